-- The duplicate cache (pg_idem.cache_size): idem_try_insert answers a
-- recent duplicate, and idem_begin a recent completed claim (with its
-- result, when it fits pg_idem.cache_result_size, 256 bytes here), without
-- reading idem_records, and every change to a record makes the next answer
-- come from the table again. The answers must be the same with the cache
-- and without: every answer is printed, and one expected output serves the
-- three kinds of server, pg_idem preloaded with pg_idem.cache_size > 0 (the
-- cache on, as scripts/test_suite runs it first), preloaded with the cache
-- off (0), and not preloaded (no cache, and no statistics: the suite's
-- second run). Only the counters differ: cache_counted() below checks them
-- for the kind of server it runs on, and prints nothing but true.

-- The token of a claim in progress, read from the table as a superuser
-- may: these tests are about other things than who holds a claim
-- (test/sql/claim.sql carries tokens as an application does).
CREATE OR REPLACE FUNCTION regress_token(s text, k text) RETURNS uuid
LANGUAGE sql AS $$ SELECT claim_token FROM idem_records WHERE scope = s AND key = k $$;

-- The kind of server: the cache is on where pg_idem is preloaded with a
-- cache size, and only there.
CREATE VIEW cache_server AS
SELECT preloaded, preloaded AND size > 0 AS cache_on
FROM (SELECT 'pg_idem' = ANY (string_to_array(
                 replace(current_setting('shared_preload_libraries'), ' ', ''), ',')) AS preloaded,
             coalesce(current_setting('pg_idem.cache_size', true), '0')::int AS size) s;
SELECT idem_cache_enabled() = cache_on AS cache_on_where_configured FROM cache_server;

-- cache_counted(scope, claims, duplicates, hits, misses): true if idem_stats
-- counted for the scope, since the reset below, the claims and duplicates
-- given, and the cache hits and misses given with the cache on, none with
-- it off; raises with what it counted if not. A server that does not
-- preload pg_idem has no counters, and must say so (55000).
CREATE FUNCTION cache_counted(s text, claims bigint, duplicates bigint, hits bigint, misses bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    server record;
    got record;
BEGIN
    SELECT * INTO server FROM cache_server;
    IF NOT server.preloaded THEN
        BEGIN
            PERFORM FROM idem_stats();
        EXCEPTION WHEN object_not_in_prerequisite_state THEN
            RETURN true;
        END;
        RAISE EXCEPTION 'idem_stats counted without pg_idem in shared_preload_libraries';
    END IF;
    IF NOT server.cache_on THEN
        hits := 0;
        misses := 0;
    END IF;
    SELECT st.claims, st.duplicates, st.cache_hits, st.cache_misses INTO got
    FROM idem_stats st WHERE st.database = current_database() AND st.scope = s;
    IF (got.claims, got.duplicates, got.cache_hits, got.cache_misses)
       IS DISTINCT FROM (claims, duplicates, hits, misses) THEN
        RAISE EXCEPTION 'scope %: % claims, % duplicates, % cache hits, % misses', s,
            got.claims, got.duplicates, got.cache_hits, got.cache_misses
            USING DETAIL = format('Expected %s, %s, %s, %s.', claims, duplicates, hits, misses);
    END IF;
    RETURN true;
END $$;

-- A fresh start, where there are counters to reset.
CREATE FUNCTION cache_stats_reset() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT preloaded FROM cache_server) THEN
        PERFORM idem_stats_reset();
    END IF;
END $$;

DELETE FROM idem_records;
SELECT cache_stats_reset();

-- A new key (a miss), its duplicate from the table (a miss, which fills the
-- cache), then duplicates from the cache (hits).
SELECT idem_try_insert('cache-a', 'k1') AS new_key;
SELECT idem_try_insert('cache-a', 'k1') AS from_table;
SELECT idem_try_insert('cache-a', 'k1') AS from_cache,
       idem_try_insert('cache-a', 'k1') AS again;
SELECT cache_counted('cache-a', claims => 1, duplicates => 3, hits => 2, misses => 2);

-- Our own uncommitted record is never cached: after the rollback the key
-- is new.
BEGIN;
SELECT idem_try_insert('cache-b', 'k') AS ours, idem_try_insert('cache-b', 'k') AS dup,
       idem_try_insert('cache-b', 'k') AS dup_again;
ROLLBACK;
SELECT idem_try_insert('cache-b', 'k') AS after_rollback;
SELECT cache_counted('cache-b', claims => 2, duplicates => 2, hits => 0, misses => 4);

-- idem_forget: the key is new afterwards.
SELECT idem_forget('cache-a', 'k1');
SELECT idem_try_insert('cache-a', 'k1') AS after_forget;

-- Plain SQL on idem_records: the trigger forgets the key.
SELECT idem_try_insert('cache-a', 'k1') AS fill, idem_try_insert('cache-a', 'k1') AS hit;
DELETE FROM idem_records WHERE scope = 'cache-a' AND key = 'k1';
SELECT idem_try_insert('cache-a', 'k1') AS after_delete;
SELECT idem_try_insert('cache-a', 'k1') AS fill, idem_try_insert('cache-a', 'k1') AS hit;
UPDATE idem_records SET expires_at = now() - interval '1 second'
WHERE scope = 'cache-a' AND key = 'k1';
SELECT idem_try_insert('cache-a', 'k1') AS after_expiring_update;

-- The same statement or transaction that deletes or expires a record sees
-- its key as new, although the AFTER row trigger forgets the key only when
-- the statement ends: the BEFORE one keeps the transaction off the cache.
SELECT idem_try_insert('cache-m', 'k') AS new_key;
SELECT idem_try_insert('cache-m', 'k') AS fill, idem_try_insert('cache-m', 'k') AS hit;
DELETE FROM idem_records WHERE scope = 'cache-m' AND key = 'k'
RETURNING idem_try_insert(scope, key) AS new_again_in_the_deleting_statement;
SELECT idem_try_insert('cache-m', 'k') AS fill, idem_try_insert('cache-m', 'k') AS hit;
WITH expired AS (
    UPDATE idem_records SET expires_at = now() - interval '1 second'
    WHERE scope = 'cache-m' AND key = 'k' RETURNING scope, key)
SELECT idem_try_insert(scope, key) AS taken_over_in_the_expiring_statement FROM expired;
SELECT idem_try_insert('cache-m', 'k') AS fill, idem_try_insert('cache-m', 'k') AS hit;
BEGIN;
UPDATE idem_records SET expires_at = now() - interval '1 second'
WHERE scope = 'cache-m' AND key = 'k';
SELECT idem_try_insert('cache-m', 'k') AS taken_over_later_in_the_transaction;
COMMIT;
SELECT cache_counted('cache-m', claims => 4, duplicates => 6, hits => 3, misses => 4);

-- With either trigger disabled, nothing is cached, and disabling one
-- forgets what was: a DELETE it no longer sees cannot leave a stale entry.
SELECT idem_try_insert('cache-n', 'k') AS new_key;
SELECT idem_try_insert('cache-n', 'k') AS fill, idem_try_insert('cache-n', 'k') AS hit;
ALTER TABLE idem_records DISABLE TRIGGER idem_records_changed;
DELETE FROM idem_records WHERE scope = 'cache-n' AND key = 'k';
SELECT idem_try_insert('cache-n', 'k') AS new_after_an_unseen_delete;
SELECT idem_try_insert('cache-n', 'k') AS from_table, idem_try_insert('cache-n', 'k') AS from_table_again;
ALTER TABLE idem_records ENABLE ALWAYS TRIGGER idem_records_changed;
ALTER TABLE idem_records DISABLE TRIGGER idem_records_changing;
SELECT idem_try_insert('cache-n', 'k') AS from_table, idem_try_insert('cache-n', 'k') AS from_table_again;
ALTER TABLE idem_records ENABLE ALWAYS TRIGGER idem_records_changing;
SELECT idem_try_insert('cache-n', 'k') AS fill, idem_try_insert('cache-n', 'k') AS hit;
SELECT cache_counted('cache-n', claims => 2, duplicates => 8, hits => 2, misses => 8);
-- Enabled only for origin sessions is not enough: a replica's DELETE
-- would not fire it.
ALTER TABLE idem_records ENABLE TRIGGER idem_records_changed;
SELECT idem_try_insert('cache-n', 'k') AS from_table, idem_try_insert('cache-n', 'k') AS from_table_again;
ALTER TABLE idem_records ENABLE ALWAYS TRIGGER idem_records_changed;
-- As enabled ALWAYS, it fires for a replica's DELETE too.
SELECT idem_try_insert('cache-n', 'k') AS fill, idem_try_insert('cache-n', 'k') AS hit;
SET session_replication_role = replica;
DELETE FROM idem_records WHERE scope = 'cache-n' AND key = 'k';
RESET session_replication_role;
SELECT idem_try_insert('cache-n', 'k') AS new_after_a_replica_delete;
SELECT cache_counted('cache-n', claims => 3, duplicates => 12, hits => 3, misses => 12);

-- Through a parent table too: its DELETE fires idem_records' row triggers.
CREATE TABLE cache_parent (LIKE idem_records);
ALTER TABLE idem_records INHERIT cache_parent;
SELECT idem_try_insert('cache-p', 'k') AS new_key;
SELECT idem_try_insert('cache-p', 'k') AS fill, idem_try_insert('cache-p', 'k') AS hit;
DELETE FROM cache_parent WHERE scope = 'cache-p' AND key = 'k'
RETURNING idem_try_insert(scope, key) AS new_again_in_the_parents_delete;
ALTER TABLE idem_records NO INHERIT cache_parent;
DROP TABLE cache_parent;

-- pg_idem's own changes do not keep a transaction off the cache: after a
-- completion in it, a cached key is still a hit.
SELECT idem_try_insert('cache-p', 'cached') AS new_key;
SELECT idem_try_insert('cache-p', 'cached') AS fill;
BEGIN;
SELECT status FROM idem_begin('cache-p', 'claimed');
SELECT idem_complete('cache-p', 'claimed', regress_token('cache-p', 'claimed'));
SELECT idem_try_insert('cache-p', 'cached') AS hit_after_a_completion;
COMMIT;
SELECT cache_counted('cache-p', claims => 4, duplicates => 4, hits => 2, misses => 5);

-- CREATE OR REPLACE TRIGGER forgets the table: replaced as it was, the
-- trigger is enabled for origin sessions only, and a replica's DELETE
-- would not reach the cache.
SELECT idem_try_insert('cache-p', 'k') AS fill, idem_try_insert('cache-p', 'k') AS hit;
CREATE OR REPLACE TRIGGER idem_records_changed AFTER UPDATE OR DELETE ON idem_records
    FOR EACH ROW WHEN (idem_cache_enabled()) EXECUTE FUNCTION idem_records_changed();
SET session_replication_role = replica;
DELETE FROM idem_records WHERE scope = 'cache-p' AND key = 'k';
RESET session_replication_role;
SELECT idem_try_insert('cache-p', 'k') AS new_after_a_replica_delete;
-- Replaced with fewer events (only UPDATE OF status) and enabled ALWAYS,
-- it would miss other changes: nothing is cached.
CREATE OR REPLACE TRIGGER idem_records_changed AFTER UPDATE OF status OR DELETE ON idem_records
    FOR EACH ROW WHEN (idem_cache_enabled()) EXECUTE FUNCTION idem_records_changed();
ALTER TABLE idem_records ENABLE ALWAYS TRIGGER idem_records_changed;
SELECT idem_try_insert('cache-p', 'k') AS from_table, idem_try_insert('cache-p', 'k') AS from_table_again;
UPDATE idem_records SET expires_at = now() - interval '1 second'
WHERE scope = 'cache-p' AND key = 'k';
SELECT idem_try_insert('cache-p', 'k') AS taken_over;
CREATE OR REPLACE TRIGGER idem_records_changed AFTER UPDATE OR DELETE ON idem_records
    FOR EACH ROW WHEN (idem_cache_enabled()) EXECUTE FUNCTION idem_records_changed();
ALTER TABLE idem_records ENABLE ALWAYS TRIGGER idem_records_changed;
SELECT idem_try_insert('cache-p', 'k') AS fill, idem_try_insert('cache-p', 'k') AS hit;
SELECT cache_counted('cache-p', claims => 6, duplicates => 10, hits => 4, misses => 11);

-- A trigger's WHEN clause replaced (here by one that never fires), or the
-- function it calls: nothing is cached, and a DELETE the trigger misses
-- leaves no stale entry.
SELECT idem_try_insert('cache-q', 'k') AS new_key;
SELECT idem_try_insert('cache-q', 'k') AS fill, idem_try_insert('cache-q', 'k') AS hit;
CREATE OR REPLACE TRIGGER idem_records_changed AFTER UPDATE OR DELETE ON idem_records
    FOR EACH ROW WHEN (false) EXECUTE FUNCTION idem_records_changed();
ALTER TABLE idem_records ENABLE ALWAYS TRIGGER idem_records_changed;
SELECT idem_try_insert('cache-q', 'k') AS from_table, idem_try_insert('cache-q', 'k') AS from_table_again;
DELETE FROM idem_records WHERE scope = 'cache-q' AND key = 'k';
SELECT idem_try_insert('cache-q', 'k') AS new_after_an_unseen_delete;
CREATE OR REPLACE TRIGGER idem_records_changed AFTER UPDATE OR DELETE ON idem_records
    FOR EACH ROW WHEN (idem_cache_enabled()) EXECUTE FUNCTION idem_records_changed();
ALTER TABLE idem_records ENABLE ALWAYS TRIGGER idem_records_changed;
SELECT idem_try_insert('cache-q', 'k') AS fill, idem_try_insert('cache-q', 'k') AS hit;
CREATE OR REPLACE FUNCTION idem_cache_enabled() RETURNS boolean
LANGUAGE sql STABLE STRICT PARALLEL SAFE AS 'SELECT false';
SELECT idem_try_insert('cache-q', 'k') AS from_table, idem_try_insert('cache-q', 'k') AS from_table_again;
DELETE FROM idem_records WHERE scope = 'cache-q' AND key = 'k';
SELECT idem_try_insert('cache-q', 'k') AS new_after_an_unseen_delete;
CREATE OR REPLACE FUNCTION idem_cache_enabled() RETURNS boolean
AS '$libdir/pg_idem', 'idem_cache_enabled' LANGUAGE C STABLE STRICT PARALLEL SAFE;
SELECT idem_try_insert('cache-q', 'k') AS fill, idem_try_insert('cache-q', 'k') AS hit;
SELECT cache_counted('cache-q', claims => 3, duplicates => 10, hits => 3, misses => 10);

-- A user's trigger fired by pg_idem's own change (here idem_forget's
-- DELETE) sees the key as new: meanwhile nothing uses the cache.
CREATE TABLE requeued (key text, is_new boolean);
CREATE FUNCTION requeue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO requeued VALUES (OLD.key, idem_try_insert(OLD.scope, OLD.key));
    RETURN OLD;
END $$;
CREATE TRIGGER a_requeue AFTER DELETE ON idem_records
    FOR EACH ROW WHEN (OLD.scope = 'cache-q') EXECUTE FUNCTION requeue();
SELECT idem_try_insert('cache-q', 'k') AS fill, idem_try_insert('cache-q', 'k') AS hit;
SELECT idem_forget('cache-q', 'k');
SELECT * FROM requeued;
DROP TRIGGER a_requeue ON idem_records;
DROP TABLE requeued;
DROP FUNCTION requeue();

-- A column rewritten by ALTER TABLE (no row trigger fires) forgets the
-- table: idem_begin replays the new result, not the cached one.
SELECT status FROM idem_begin('cache-o', 'k');
SELECT idem_complete('cache-o', 'k', regress_token('cache-o', 'k'), '"before"');
SELECT status, result FROM idem_begin('cache-o', 'k');
SELECT status, result FROM idem_begin('cache-o', 'k');
ALTER TABLE idem_records ALTER COLUMN result TYPE jsonb
    USING CASE WHEN scope = 'cache-o' THEN '"rewritten"' ELSE result END;
SELECT status, result FROM idem_begin('cache-o', 'k');
SELECT cache_counted('cache-o', claims => 1, duplicates => 3, hits => 1, misses => 3);

-- TRUNCATE gives idem_records a new relfilenode: cached keys are new.
SELECT idem_try_insert('cache-a', 'k1') AS fill, idem_try_insert('cache-a', 'k1') AS hit;
TRUNCATE idem_records;
SELECT idem_try_insert('cache-a', 'k1') AS after_truncate;

-- An entry answers only before the record's expiry.
SELECT idem_try_insert('cache-c', 'k', '100 milliseconds') AS new_key;
SELECT idem_try_insert('cache-c', 'k', '100 milliseconds') AS fill;
SELECT pg_sleep(0.2);
SELECT idem_try_insert('cache-c', 'k') AS after_expiry;

-- A claim in progress (idem_begin) is a duplicate, cached; completing it
-- changes the record, and the next duplicate comes from the table again.
SELECT status FROM idem_begin('cache-d', 'k');
SELECT idem_try_insert('cache-d', 'k') AS fill, idem_try_insert('cache-d', 'k') AS hit;
-- idem_begin answers only completed records from the cache.
SELECT status, attempt FROM idem_begin('cache-d', 'k');
SELECT idem_complete('cache-d', 'k', regress_token('cache-d', 'k'));
SELECT idem_try_insert('cache-d', 'k') AS refill, idem_try_insert('cache-d', 'k') AS hit;
SELECT cache_counted('cache-d', claims => 1, duplicates => 4, hits => 2, misses => 4);

-- REPEATABLE READ never uses the cache (neither hits nor misses count).
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT idem_try_insert('cache-d', 'k') AS rr_dup;
COMMIT;
SELECT cache_counted('cache-d', claims => 1, duplicates => 5, hits => 2, misses => 4);

-- A long key has a SHA-256 key id; those are never cached, so a
-- collision still meets the table's comparison of scope and key.
SELECT idem_try_insert('cache-e', repeat('x', 100)) AS new_key,
       idem_try_insert('cache-e', repeat('x', 100)) AS dup,
       idem_try_insert('cache-e', repeat('x', 100)) AS dup_again;
SELECT cache_counted('cache-e', claims => 1, duplicates => 2, hits => 0, misses => 3);

-- idem_begin: a completed claim is answered from the cache, with its
-- result, exactly as the table answers it. The first completed answer comes
-- from the table (and fills the cache), the next ones from the cache.
SELECT status, attempt FROM idem_begin('cache-f', 'k');
SELECT idem_fail('cache-f', 'k', regress_token('cache-f', 'k'), 'timeout', retryable => true);
SELECT status, attempt FROM idem_begin('cache-f', 'k');
SELECT idem_complete('cache-f', 'k', regress_token('cache-f', 'k'), '{"order": 42, "items": [1, 2, 3], "note": "ok"}');
CREATE TEMP TABLE answers AS SELECT 'table' AS source, * FROM idem_begin('cache-f', 'k');
INSERT INTO answers SELECT 'cache', * FROM idem_begin('cache-f', 'k');
INSERT INTO answers SELECT 'cache again', * FROM idem_begin('cache-f', 'k');
SELECT source, status, attempt, result, lease_expires_at, last_error, token,
       expires_at = (SELECT expires_at FROM idem_records WHERE scope = 'cache-f' AND key = 'k')
           AS expires_as_stored, fingerprint
FROM answers;
SELECT count(DISTINCT (status, attempt, result, lease_expires_at, last_error, token, expires_at,
                       fingerprint)) AS distinct_answers
FROM answers;
SELECT cache_counted('cache-f', claims => 2, duplicates => 3, hits => 2, misses => 3);
-- A NULL result too; and an entry made by idem_try_insert's duplicate
-- answers idem_begin (a completed record, attempt 1, no result), and one
-- made by idem_begin answers idem_try_insert.
SELECT status FROM idem_begin('cache-f', 'null');
SELECT idem_complete('cache-f', 'null', regress_token('cache-f', 'null'));
SELECT status, attempt, result IS NULL AS no_result FROM idem_begin('cache-f', 'null');
SELECT status, attempt, result IS NULL AS no_result FROM idem_begin('cache-f', 'null');
SELECT idem_try_insert('cache-g', 'k') AS new_key;
SELECT idem_try_insert('cache-g', 'k') AS fill;
SELECT status, attempt, result, lease_expires_at, last_error, token, expires_at > now() AS expires, fingerprint
FROM idem_begin('cache-g', 'k');
SELECT idem_try_insert('cache-f', 'k') AS dup_of_begin_entry;
-- Only a completed record: a failed one (here without a last error, by an
-- operator's UPDATE) is claimed again, not answered from its entry.
SELECT idem_try_insert('cache-g', 'failed') AS new_key;
UPDATE idem_records SET status = 'failed' WHERE scope = 'cache-g' AND key = 'failed';
SELECT idem_try_insert('cache-g', 'failed') AS fill;
SELECT status, attempt FROM idem_begin('cache-g', 'failed');
SELECT cache_counted('cache-f', claims => 3, duplicates => 6, hits => 4, misses => 5),
       cache_counted('cache-g', claims => 3, duplicates => 3, hits => 1, misses => 5);

-- A result larger than pg_idem.cache_result_size is not kept: idem_begin
-- reads it from the table every time (misses), idem_try_insert still hits.
SELECT status FROM idem_begin('cache-h', 'big');
SELECT idem_complete('cache-h', 'big', regress_token('cache-h', 'big'), jsonb_build_object('blob', repeat('x', 300)));
SELECT status, attempt, length(result ->> 'blob') AS blob FROM idem_begin('cache-h', 'big');
SELECT status, attempt, length(result ->> 'blob') AS blob FROM idem_begin('cache-h', 'big');
SELECT idem_try_insert('cache-h', 'big') AS dup;
SELECT cache_counted('cache-h', claims => 1, duplicates => 3, hits => 1, misses => 3);

-- Fingerprints. The same payload (or a call without a fingerprint) is
-- answered from the cache; a different one misses, and the table raises
-- the mismatch (IDM01), or answers it by the scope's setting.
SELECT status FROM idem_begin('cache-i', 'k', fingerprint => repeat('a', 64));
SELECT idem_complete('cache-i', 'k', regress_token('cache-i', 'k'), '"done"');
SELECT status, result FROM idem_begin('cache-i', 'k', fingerprint => repeat('a', 64));
SELECT status, result FROM idem_begin('cache-i', 'k', fingerprint => repeat('a', 64));
SELECT status, result FROM idem_begin('cache-i', 'k');
SELECT status, result FROM idem_begin('cache-i', 'k', fingerprint => repeat('b', 64));
\echo :LAST_ERROR_SQLSTATE
SELECT cache_counted('cache-i', claims => 1, duplicates => 3, hits => 2, misses => 2);
SELECT scope FROM idem_configure('cache-j', on_fingerprint_mismatch => 'status');
SELECT status FROM idem_begin('cache-j', 'k', fingerprint => repeat('a', 64));
SELECT idem_complete('cache-j', 'k', regress_token('cache-j', 'k'), '"done"');
SELECT status, result FROM idem_begin('cache-j', 'k', fingerprint => repeat('a', 64));
SELECT status, result FROM idem_begin('cache-j', 'k', fingerprint => repeat('a', 64));
SELECT status, attempt, result, lease_expires_at, last_error, token, expires_at > now() AS expires, fingerprint
FROM idem_begin('cache-j', 'k', fingerprint => repeat('b', 64));
-- A fingerprint that is not one (an operator's UPDATE) differs, as text,
-- from every valid one: never answered from the cache.
UPDATE idem_records SET fingerprint = upper(fingerprint) WHERE scope = 'cache-j';
SELECT status FROM idem_begin('cache-j', 'k');
SELECT status FROM idem_begin('cache-j', 'k', fingerprint => repeat('a', 64));
SELECT status FROM idem_begin('cache-j', 'k', fingerprint => repeat('a', 64));
SELECT cache_counted('cache-j', claims => 1, duplicates => 3, hits => 1, misses => 6);

-- What idem_begin returns besides status, attempt and result must match
-- too: a completed record that keeps a last error (reconciled after a
-- failure) or a lease (an operator's UPDATE) is always read from the table.
CREATE FUNCTION cache_effect_happened(scope text, key text) RETURNS boolean
LANGUAGE sql AS $$ SELECT true $$;
SELECT scope FROM idem_configure('cache-k', reconcile_function => 'cache_effect_happened(text,text)');
SELECT status FROM idem_begin('cache-k', 'k');
SELECT idem_fail('cache-k', 'k', regress_token('cache-k', 'k'), 'boom', retryable => true);
SELECT status, attempt FROM idem_begin('cache-k', 'k', lease => '1 microsecond');
SELECT * FROM idem_reconcile('cache-k');
SELECT status, attempt, result, lease_expires_at, last_error FROM idem_begin('cache-k', 'k');
SELECT status, attempt, result, lease_expires_at, last_error FROM idem_begin('cache-k', 'k');
SELECT status FROM idem_begin('cache-k', 'lease');
SELECT idem_complete('cache-k', 'lease', regress_token('cache-k', 'lease'));
UPDATE idem_records SET lease_expires_at = 'infinity' WHERE scope = 'cache-k' AND key = 'lease';
SELECT status, attempt, lease_expires_at FROM idem_begin('cache-k', 'lease');
SELECT status, attempt, lease_expires_at FROM idem_begin('cache-k', 'lease');
SELECT cache_counted('cache-k', claims => 3, duplicates => 4, hits => 0, misses => 7);

-- Expiry: idem_begin compares with the wall clock; an expired record is
-- claimed anew (attempt 2), never answered from the cache.
SELECT scope FROM idem_configure('cache-l', ttl => '200 milliseconds');
SELECT status FROM idem_begin('cache-l', 'k');
SELECT idem_complete('cache-l', 'k', regress_token('cache-l', 'k'), '1');
SELECT status, attempt, result FROM idem_begin('cache-l', 'k');
SELECT status, attempt, result FROM idem_begin('cache-l', 'k');
SELECT pg_sleep(0.3);
SELECT status, attempt, result FROM idem_begin('cache-l', 'k');
SELECT cache_counted('cache-l', claims => 2, duplicates => 2, hits => 1, misses => 3);

-- idem_forget and idem_complete after a takeover change the record: the
-- next answer comes from the table.
SELECT idem_forget('cache-f', 'k');
SELECT status, attempt FROM idem_begin('cache-f', 'k');
SELECT idem_complete('cache-f', 'k', regress_token('cache-f', 'k'), '"again"');
SELECT status, attempt, result FROM idem_begin('cache-f', 'k');
SELECT status, attempt, result FROM idem_begin('cache-f', 'k');

-- REPEATABLE READ: idem_begin neither asks the cache nor counts.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT status, attempt, result FROM idem_begin('cache-f', 'k');
COMMIT;
SELECT cache_counted('cache-f', claims => 4, duplicates => 9, hits => 5, misses => 7);

SELECT bool_and(cache_counted(scope, claims, duplicates, hits, misses)) AS all_counted
FROM (VALUES
    ('cache-a', 5, 9, 5, 9),
    ('cache-b', 2, 2, 0, 4),
    ('cache-c', 2, 1, 0, 3),
    ('cache-d', 1, 5, 2, 4),
    ('cache-e', 1, 2, 0, 3),
    ('cache-f', 4, 9, 5, 7),
    ('cache-g', 3, 3, 1, 5),
    ('cache-h', 1, 3, 1, 3),
    ('cache-i', 1, 3, 2, 2),
    ('cache-j', 1, 3, 1, 6),
    ('cache-k', 3, 4, 0, 7),
    ('cache-l', 2, 2, 1, 3),
    ('cache-m', 4, 6, 3, 4),
    ('cache-n', 3, 12, 3, 12),
    ('cache-o', 1, 3, 1, 3),
    ('cache-p', 6, 10, 4, 11),
    ('cache-q', 4, 12, 4, 11))
    AS expected (scope, claims, duplicates, hits, misses);

DROP TABLE answers;
DELETE FROM idem_records;
DELETE FROM idem_scopes WHERE scope LIKE 'cache-%';
DROP FUNCTION cache_effect_happened(text, text);

-- Last, since it leaves idem_records unlike any install: a column dropped
-- and added again forgets the table, and nothing is cached afterwards (the
-- table path reads some columns by number). The extension is then
-- installed afresh for the files after this one.
SELECT status FROM idem_begin('cache-r', 'k');
SELECT idem_complete('cache-r', 'k', regress_token('cache-r', 'k'), '{"a": 1}');
SELECT status, result FROM idem_begin('cache-r', 'k');
SELECT status, result FROM idem_begin('cache-r', 'k');
ALTER TABLE idem_records DROP COLUMN result;
ALTER TABLE idem_records ADD COLUMN result jsonb;
SELECT status, result AS result_after_the_column_was_replaced FROM idem_begin('cache-r', 'k');
SELECT idem_try_insert('cache-r', 'k') AS from_table, idem_try_insert('cache-r', 'k') AS from_table_again;
SELECT cache_counted('cache-r', claims => 1, duplicates => 5, hits => 1, misses => 5);
SELECT cache_stats_reset();
DROP EXTENSION pg_idem;
CREATE EXTENSION pg_idem;
DROP FUNCTION cache_counted(text, bigint, bigint, bigint, bigint), cache_stats_reset();
DROP VIEW cache_server;
