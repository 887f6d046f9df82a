-- idem_begin, idem_complete, idem_fail: the claim protocol.
-- Each error is followed by its SQLSTATE.

-- First claim acquires attempt 1; a second sees it in progress.
SELECT status, attempt, result, lease_expires_at > now() AS leased, last_error
FROM idem_begin('pay', 'order-1');
SELECT status, attempt FROM idem_begin('pay', 'order-1');
SELECT scope, key, status, attempts, holder_pid = pg_backend_pid() AS mine,
       lease_expires_at - recorded_at AS lease
FROM idem_records WHERE scope = 'pay';

-- Completing stores the result; later claims replay it.
SELECT idem_complete('pay', 'order-1', 1, '{"charge": "ch_1", "amount": 42}');
SELECT status, attempt, result, lease_expires_at FROM idem_begin('pay', 'order-1');
SELECT status, holder_pid, lease_expires_at, expires_at - recorded_at AS ttl
FROM idem_records WHERE scope = 'pay' AND key = 'order-1';

-- The lease: the call's, else the scope's, else pg_idem.default_lease (5 min).
SELECT status FROM idem_begin('pay', 'order-2', lease => '30 seconds');
SELECT lease_expires_at - recorded_at AS lease FROM idem_records WHERE scope = 'pay' AND key = 'order-2';

-- An expired lease is taken over with the next attempt; the old holder's
-- completion is refused and changes nothing.
SELECT status, attempt FROM idem_begin('pay', 'order-3', lease => '1 microsecond');
SELECT status, attempt FROM idem_begin('pay', 'order-3');
SELECT idem_complete('pay', 'order-3', 1, '{"late": true}');
\echo :LAST_ERROR_SQLSTATE
SELECT status, attempts, result FROM idem_records WHERE scope = 'pay' AND key = 'order-3';
SELECT idem_complete('pay', 'order-3', 2, '{"charge": "ch_3"}');
SELECT status, attempts, result FROM idem_records WHERE scope = 'pay' AND key = 'order-3';

-- Failures: retried with the next attempt, then dead after max_attempts.
SELECT scope, max_attempts FROM idem_configure('mail', max_attempts => 2);
SELECT status, attempt FROM idem_begin('mail', 'm-1');
SELECT idem_fail('mail', 'm-1', 1, 'smtp timeout');
SELECT status, attempt, last_error FROM idem_begin('mail', 'm-1');
SELECT idem_fail('mail', 'm-1', 2, 'smtp timeout again');
SELECT status, attempt, last_error FROM idem_begin('mail', 'm-1');
-- A failure that is not retryable is dead at once.
SELECT status, attempt FROM idem_begin('mail', 'm-2');
SELECT idem_fail('mail', 'm-2', 1, 'mailbox does not exist', retryable => false);
SELECT status FROM idem_begin('mail', 'm-2');
-- Running out of attempts by lease expiry makes the record dead too.
SELECT status, attempt FROM idem_begin('mail', 'm-3', lease => '1 microsecond');
SELECT status, attempt FROM idem_begin('mail', 'm-3', lease => '1 microsecond');
SELECT status, attempt FROM idem_begin('mail', 'm-3');
SELECT key, status, attempts, last_error FROM idem_records WHERE scope = 'mail' ORDER BY key;

-- The transactional pattern and the protocol share one table.
SELECT idem_try_insert('shared', 'k1');
SELECT status, attempt FROM idem_begin('shared', 'k1');
SELECT status FROM idem_begin('shared', 'k2');
SELECT idem_try_insert('shared', 'k2') AS in_progress_is_a_duplicate;
SELECT idem_complete('shared', 'k2', 1);
SELECT idem_try_insert('shared', 'k2') AS completed_is_a_duplicate;

-- Fingerprints: the same key with another payload.
SELECT status FROM idem_begin('fp', 'k', fingerprint => repeat('a', 64));
SELECT status FROM idem_begin('fp', 'k', fingerprint => repeat('a', 64));
SELECT status FROM idem_begin('fp', 'k', fingerprint => repeat('b', 64));
\echo :LAST_ERROR_SQLSTATE
SELECT status FROM idem_begin('fp', 'k');
SELECT scope, on_fingerprint_mismatch FROM idem_configure('fp2', on_fingerprint_mismatch => 'status');
SELECT status FROM idem_begin('fp2', 'k', fingerprint => repeat('a', 64));
SELECT status, attempt FROM idem_begin('fp2', 'k', fingerprint => repeat('c', 64));
-- Once completed, a mismatching payload is told so, and never shown the
-- other payload's result.
SELECT idem_complete('fp2', 'k', 1, '{"secret": "for payload a only"}');
SELECT status, attempt, result FROM idem_begin('fp2', 'k', fingerprint => repeat('c', 64));
SELECT status, result FROM idem_begin('fp2', 'k', fingerprint => repeat('a', 64));

-- Attempt numbers are fencing tokens: they are never handed out twice, not
-- even after a record expires and starts a new life.
SELECT status, attempt FROM idem_begin('fence', 'k', lease => '1 microsecond');
SELECT status, attempt FROM idem_begin('fence', 'k');
SELECT idem_complete('fence', 'k', 2);
UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE scope = 'fence';
SELECT status, attempt FROM idem_begin('fence', 'k') AS new_life;
SELECT idem_complete('fence', 'k', 1, '{"stale": true}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_complete('fence', 'k', 3, '{"fresh": true}');
SELECT status, attempts, attempt_base, result FROM idem_records WHERE scope = 'fence';
-- The same for a record renewed by idem_try_insert.
UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE scope = 'fence';
SELECT idem_try_insert('fence', 'k') AS renewed;
SELECT status, attempts, attempt_base, result FROM idem_records WHERE scope = 'fence';

-- Waiting: a claim in progress is waited for up to the wait, then reported.
SELECT status FROM idem_begin('wait', 'k');
SELECT clock_timestamp() AS before \gset
SELECT status, attempt FROM idem_begin('wait', 'k', wait => '200 milliseconds');
SELECT clock_timestamp() - :'before' >= interval '200 milliseconds' AS waited;

-- Bad input: a clear error, and nothing written.
SELECT * FROM idem_begin(NULL, 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('bad', '');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('bad', 'k', lease => '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('bad', 'k', lease => '0');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('bad', 'k', wait => '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('bad', 'k', fingerprint => 'not-hex');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('bad', 'k', fingerprint => upper(repeat('a', 64)));
\echo :LAST_ERROR_SQLSTATE
SELECT idem_complete('bad', 'never-claimed', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_complete('pay', 'order-2', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_complete('pay', 'order-2', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_complete('pay', 'order-2', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_complete('pay', 'order-2', 7);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_fail('pay', 'order-2', 1, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_fail('pay', 'order-2', 1, 'x', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_fail('pay', 'order-1', 1, 'too late');
\echo :LAST_ERROR_SQLSTATE
BEGIN READ ONLY;
SELECT * FROM idem_begin('bad', 'read-only');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT count(*) AS written_by_bad_calls FROM idem_records WHERE scope = 'bad';
SELECT status, attempts FROM idem_records WHERE scope = 'pay' AND key = 'order-2';

-- Privileges: PUBLIC cannot claim, complete or fail.
CREATE ROLE regress_idem_stranger;
SET ROLE regress_idem_stranger;
SELECT * FROM idem_begin('pay', 'order-9');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_complete('pay', 'order-2', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_fail('pay', 'order-2', 1, 'sabotage');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE regress_idem_stranger;

DELETE FROM idem_records;
DELETE FROM idem_scopes;

-- A claim whose lease outlives the scope's TTL, and runs out of attempts:
-- the dead letter lives a full TTL from its death, so the next claim is
-- still answered dead, not acquired anew.
SELECT scope FROM idem_configure('claim-dead-ttl', ttl => '200 milliseconds',
                                 lease => '300 milliseconds', max_attempts => 1);
SELECT status, attempt FROM idem_begin('claim-dead-ttl', 'k');
SELECT pg_sleep(0.35);
SELECT status, attempt FROM idem_begin('claim-dead-ttl', 'k');
SELECT status, attempt FROM idem_begin('claim-dead-ttl', 'k') AS still_dead;
SELECT expires_at > now() AS dead_letter_still_live, expires_at > died_at AS expires_after_death
FROM idem_dead_letters WHERE scope = 'claim-dead-ttl';

-- A wait longer than any timestamp can hold still waits for the holder's
-- lease (here until it runs out, then takes over), instead of overflowing.
SELECT status, attempt FROM idem_begin('claim-long-wait', 'k', lease => '300 milliseconds');
SELECT status, attempt FROM idem_begin('claim-long-wait', 'k', wait => '292270 years');
SELECT status, attempt FROM idem_begin('claim-long-wait', 'k2', wait => '300000 years');
DELETE FROM idem_records WHERE scope IN ('claim-dead-ttl', 'claim-long-wait');
DELETE FROM idem_scopes WHERE scope = 'claim-dead-ttl';
