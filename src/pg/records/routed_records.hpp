// The records' SQL path on a Citus cluster: when idem_records is a
// distributed table (routes.hpp), a key is claimed and a claim ended by SQL
// that Citus routes to the shard of the record's route, so it runs on the
// worker connection of the transaction's business statements on that
// route (or locally, inside a delegated function) and commits with them.
// pg_idem never writes the heap of a Citus shell table. Include after
// postgres.h.
#pragma once

extern "C" {
#include "utils/uuid.h"
}

namespace idem
{

struct RecordRef;
struct ClaimEnd;

// records_try_insert on distributed records: INSERT ... ON CONFLICT (route,
// key_id) DO NOTHING; on a conflict the record is read, and an expired one
// (not in progress) taken over by an UPDATE. INSERT ... ON CONFLICT's waits
// and serialization failures.
bool routed_try_insert(const RecordRef &ref, TimestampTz now, TimestampTz expires_at);

// records_end_claim on distributed records: one UPDATE ... WHERE route and
// key id match, the record is in progress and holds `token`.
bool routed_end_claim(const RecordRef &ref, const pg_uuid_t *token, const ClaimEnd &end);

} // namespace idem
