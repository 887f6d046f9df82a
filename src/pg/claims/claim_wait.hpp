// How idem_begin(..., wait => ...) waits for another holder to finish
// without a sleep loop in the caller. Include after postgres.h.
#pragma once

namespace idem
{

// With pg_idem in shared_preload_libraries: a fixed array of condition
// variables in shared memory, one per bucket of key ids. idem_complete
// and idem_fail wake the bucket when their transaction commits, so a waiter
// re-checks the record as soon as it can have changed. Without preloading,
// waiters re-check on a short timer instead (documented as the fallback).
void claim_wait_request_shmem();
void claim_wait_init_shmem();

// Wakes the waiters for `key_id` when the current transaction commits.
void claim_wake_at_commit(const bytea *key_id);

// Sleeps until woken for `key_id` or for at most `timeout_ms`. The caller
// re-checks its condition after every return and calls claim_sleep_done()
// when it stops waiting.
void claim_sleep(const bytea *key_id, long timeout_ms);
void claim_sleep_done();

} // namespace idem
