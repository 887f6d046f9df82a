-- The duplicate cache (pg_idem.cache_size): idem_try_insert answers a
-- recent duplicate without reading idem_records, and every change to a
-- record makes the next answer come from the table again. The answers must
-- be the same with the cache and without; only the counters differ.
-- expected/duplicate_cache.out is a server with pg_idem preloaded and
-- pg_idem.cache_size > 0 (scripts/test), duplicate_cache_1.out one without
-- preloading (idem_stats raises 55000), duplicate_cache_2.out preloaded
-- with the cache off (hits stay 0).

DELETE FROM idem_records;
SELECT idem_stats_reset();
SELECT idem_cache_enabled();

CREATE VIEW cache_counts AS
SELECT scope, claims, duplicates, cache_hits, cache_misses
FROM idem_stats WHERE database = current_database() AND scope LIKE 'cache-%';

-- A new key (a miss), its duplicate from the table (a miss, which fills the
-- cache), then duplicates from the cache (hits).
SELECT idem_try_insert('cache-a', 'k1') AS new_key;
SELECT idem_try_insert('cache-a', 'k1') AS from_table;
SELECT idem_try_insert('cache-a', 'k1') AS from_cache,
       idem_try_insert('cache-a', 'k1') AS again;
SELECT * FROM cache_counts WHERE scope = 'cache-a';

-- Our own uncommitted record is never cached: after the rollback the key
-- is new.
BEGIN;
SELECT idem_try_insert('cache-b', 'k') AS ours, idem_try_insert('cache-b', 'k') AS dup,
       idem_try_insert('cache-b', 'k') AS dup_again;
ROLLBACK;
SELECT idem_try_insert('cache-b', 'k') AS after_rollback;
SELECT * FROM cache_counts WHERE scope = 'cache-b';

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
SELECT idem_complete('cache-d', 'k', 1);
SELECT idem_try_insert('cache-d', 'k') AS refill, idem_try_insert('cache-d', 'k') AS hit;
SELECT * FROM cache_counts WHERE scope = 'cache-d';

-- REPEATABLE READ never uses the cache (neither hits nor misses count).
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT idem_try_insert('cache-d', 'k') AS rr_dup;
COMMIT;
SELECT * FROM cache_counts WHERE scope = 'cache-d';

-- A long key has a SHA-256 key id; those are never cached, so a
-- collision still meets the table's comparison of scope and key.
SELECT idem_try_insert('cache-e', repeat('x', 100)) AS new_key,
       idem_try_insert('cache-e', repeat('x', 100)) AS dup,
       idem_try_insert('cache-e', repeat('x', 100)) AS dup_again;
SELECT * FROM cache_counts WHERE scope = 'cache-e';

SELECT * FROM cache_counts ORDER BY scope;

DROP VIEW cache_counts;
DELETE FROM idem_records;
SELECT idem_stats_reset();
