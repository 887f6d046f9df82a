// pg_idem's configuration parameters (GUCs), defined in module.cpp.
#pragma once

namespace idem
{

// pg_idem.default_ttl, in seconds: the lifetime of a record when neither the
// call nor its scope says otherwise.
extern int default_ttl_seconds;

// pg_idem.default_lease, in seconds: how long an idem_begin claim is held
// when neither the call nor its scope says otherwise.
extern int default_lease_seconds;

// pg_idem.default_max_attempts: claims of one key before it is dead.
extern int default_max_attempts;

// The purge worker (purge_worker.cpp).
extern char *purge_databases; // pg_idem.purge_databases
extern int purge_naptime_ms;  // pg_idem.purge_naptime
extern int purge_batch_size;  // pg_idem.purge_batch_size
extern int purge_rate_limit;  // pg_idem.purge_rate_limit, rows per second, 0: none
extern bool purge_reconcile;  // pg_idem.purge_reconcile
extern bool purge_vacuum;     // pg_idem.purge_vacuum
extern bool purge_yield;      // pg_idem.purge_yield

// pg_idem.reconcile_timeout, in milliseconds, 0: none: the longest one call
// of a scope's reconciliation function may take (reconciler_deadline.hpp).
extern int reconcile_timeout_ms;

// pg_idem.stats_max_scopes: scopes idem_stats counts on their own (stats.cpp).
extern int stats_max_scopes;

// pg_idem.cache_size: entries of the duplicate cache, 0: none
// (duplicate_cache.cpp).
extern int cache_size;

// pg_idem.cache_result_size: bytes of a completed record's result (its
// detoasted jsonb) that a cache entry keeps, so that idem_begin can replay
// it; 0: only NULL results.
extern int cache_result_size;

// pg_idem.test_cache_fill_lock: for tests only (0: off). Before the duplicate
// cache inserts an entry, the backend waits for the advisory lock with this
// key, so that an isolation spec can change the record in between.
extern int test_cache_fill_lock;

} // namespace idem
