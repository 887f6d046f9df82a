-- idem_purge and idem_purge_status. (The test database has no purge worker:
-- its columns are NULL here; the worker is tested with TAP.) Its counts are
-- of the whole table, which starts empty.

DELETE FROM idem_records;
SELECT count(*) FROM (
    SELECT idem_try_insert('purge', 'expired-' || g, '1 microsecond') FROM generate_series(1, 30) g
    UNION ALL
    SELECT idem_try_insert('purge', 'live-' || g, '1 hour') FROM generate_series(1, 20) g) s;
-- An expired record in progress is for reconciliation, never for the purge.
SELECT status FROM idem_begin('purge', 'claim', lease => '1 microsecond');
UPDATE idem_records SET expires_at = now() - interval '1 day' WHERE scope = 'purge' AND key = 'claim';
-- (now() is this transaction's start: expiry is judged in a later one.)
SELECT pg_sleep(0.01);

SELECT worker_pid, last_round_at, rounds, backlog_rows, oldest_expired_age > interval '0' AS aged,
       expired_leases
FROM idem_purge_status;

-- Batches of max_rows; the count is exact, and live records stay.
SELECT idem_purge(12) AS first, idem_purge(12) AS second, idem_purge(12) AS third,
       idem_purge(12) AS nothing_left;
SELECT count(*) FILTER (WHERE key LIKE 'live-%') AS live,
       count(*) FILTER (WHERE key LIKE 'expired-%') AS expired,
       count(*) FILTER (WHERE status = 'in_progress') AS in_progress
FROM idem_records WHERE scope = 'purge';
SELECT backlog_rows, oldest_expired_age, expired_leases FROM idem_purge_status;

-- A rolled-back purge deletes nothing.
UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE scope = 'purge' AND key LIKE 'live-%';
BEGIN;
SELECT idem_purge(100);
ROLLBACK;
SELECT count(*) AS still_there FROM idem_records WHERE scope = 'purge' AND key LIKE 'live-%';
SELECT idem_purge(100);

-- Bad input, and privileges.
SELECT idem_purge(0);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_purge(NULL);
\echo :LAST_ERROR_SQLSTATE
CREATE ROLE regress_idem_stranger;
SET ROLE regress_idem_stranger;
SELECT idem_purge(10);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_purge_status;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE regress_idem_stranger;

DELETE FROM idem_records;
