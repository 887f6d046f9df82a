// The managed dedup table, @extschema@.idem_records: where it is, how a key
// is looked up in it, and how a record is claimed. Include after postgres.h.
#pragma once

extern "C" {
#include "access/tupdesc.h"
#include "datatype/timestamp.h"
#include "utils/uuid.h"
}

namespace idem
{

struct ExtensionObjects;

// A validated (scope, key) and its key id (see src/core/record_key.hpp),
// all palloc'd; and its route, when the call gave one (routes.hpp).
struct RecordRef {
	text *scope;
	text *key;
	bytea *id;
	bool routed;
	int64 route;
};

// Validates scope and key (errors with SQLSTATE 22004, 22023 or 54000) and
// computes the key id. `fn` names the SQL function in error messages.
RecordRef record_ref(const char *fn, text *scope, text *key);

// The checks of record_ref that concern the scope alone.
void check_record_scope(const char *fn, text *scope);

// The contents of a new record, besides its key.
struct NewRecord {
	Oid status; // a label of idem_status
	TimestampTz recorded_at;
	TimestampTz expires_at;
	TimestampTz lease_expires_at; // 0: none
	int holder_pid;               // 0: none
	TimestampTz holder_started_at;
	text *fingerprint; // NULL: none
	// Columns of pg_idem 0.3's claims; both NULL for other records.
	const pg_uuid_t *claim_token; // NULL: none
	const Interval *ttl;          // NULL: the scope's
};

// Inserts the record unless the key already has one, with the semantics of
// INSERT ... ON CONFLICT DO NOTHING (waiting for an uncommitted holder of
// the key). Returns whether it was inserted.
bool records_insert(const RecordRef &ref, const NewRecord &record);

// What the duplicate cache did for a claim: nothing (off, or not READ
// COMMITTED), answered it, or was asked and missed.
enum class CacheAnswer { unused, hit, miss };

// Claims the key as a completed record in the caller's transaction. Returns
// false when a live record exists (committed, or committed by a concurrent
// transaction this call waited for); true when this transaction now owns it.
// Asks the duplicate cache first, and offers it the duplicates it finds.
bool records_try_insert(const RecordRef &ref, TimestampTz now, TimestampTz expires_at,
                        CacheAnswer *cache);

// records_try_insert for each of refs[0..n), in that order, with the table
// opened once: first[i] is what it answered for refs[i]. The caller orders
// the keys (a batch in key id order never deadlocks with another) and gives
// each at most once. A batch leaves the duplicate cache alone: its keys are
// looked up in the table in one pass, and filling the cache from them would
// take the cache's exclusive lock once per duplicate.
void records_try_insert_many(const RecordRef *refs, int n, TimestampTz now, TimestampTz expires_at,
                             bool *first);

// How ending a claim changes its record (idem_complete, idem_release).
struct ClaimEnd {
	Oid status; // a label of idem_status: completed, or failed for a release
	TimestampTz recorded_at;
	const Interval *ttl; // the record lives from recorded_at for its own ttl, else this
	bool set_result;     // result becomes `result` (0: NULL); else it is kept
	Datum result;        // jsonb, detoasted
	bool clear_last_error;
	bool release; // attempt_base + 1: the released attempt stops counting
};

// Ends the claim that `token` holds on ref's key, if the key's record is in
// progress with that token: below SQL, as UPDATE ... WHERE key_id = ... AND
// status = 'in_progress' AND claim_token = ... would (a concurrent change of
// the record is waited for and the record read again; in REPEATABLE READ
// and SERIALIZABLE it is a serialization failure, 40001), through the
// primary key, firing no trigger; the duplicate cache forgets the key.
// Returns false, writing nothing, when the token holds no claim on the key.
bool records_end_claim(const RecordRef &ref, const pg_uuid_t *token, const ClaimEnd &end);

// Offers the duplicate cache the record of ref's key, if it is live at
// `now`: for idem_begin, which has read and row-locked it (SELECT ... FOR
// UPDATE) and is about to report it completed. `generation` is
// cache_generation() read before that read. Does nothing when the cache is
// not usable; the cache refuses what it cannot keep exactly.
void records_offer_to_cache(const RecordRef &ref, TimestampTz now, uint64 generation);

} // namespace idem
