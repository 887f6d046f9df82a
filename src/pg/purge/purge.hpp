// Purging expired records: one batch at a time, shared by idem_purge and the
// purge worker. Include after postgres.h.
#pragma once

#include "pg/purge/purge_status.hpp"

namespace idem
{

// Deletes up to max_rows expired records (never one in progress) in the
// current transaction, inside the caller's SPI connection. Rows locked by
// someone else (another purge, a claim renewing an expired record) are
// skipped, so concurrent purges never wait on or count the same row. With
// `only_for`, only the records of scopes that role may use.
int64 purge_batch(int max_rows, Oid only_for = InvalidOid);

// Reconciles up to max_rows expired leases of every scope (inside SPI), as
// idem_reconcile(NULL, max_rows) would for the current role, adding the
// outcomes to `round`.
void reconcile_batch(int max_rows, PurgeRound *round);

} // namespace idem
