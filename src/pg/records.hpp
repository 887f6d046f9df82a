// The managed dedup table, @extschema@.idem_records: where it is, how a key
// is looked up in it, and how a record is claimed. Include after postgres.h.
#pragma once

extern "C" {
#include "datatype/timestamp.h"
}

namespace idem {

// A validated (scope, key) and its digest, all palloc'd.
struct RecordRef {
	text *scope;
	text *key;
	bytea *digest;
};

// Validates scope and key (errors with SQLSTATE 22004, 22023 or 54000) and
// computes the digest. `fn` names the SQL function in error messages.
RecordRef record_ref(const char *fn, text *scope, text *key);

// Claims the key as a completed record in the caller's transaction. Returns
// false when a live record exists (committed, or committed by a concurrent
// transaction this call waited for); true when this transaction now owns it.
bool records_try_insert(const RecordRef &ref, TimestampTz now, TimestampTz expires_at);

} // namespace idem
