-- idem_try_insert_many: the unique-constraint pattern for a batch of keys.
-- Each error is followed by its SQLSTATE.

-- The positions of the keys it recorded; a key repeated in the batch is
-- recorded once, at its first position.
SELECT * FROM idem_try_insert_many('many', ARRAY['a', 'b', 'a', 'c']) AS recorded;
-- Keys already recorded, by a batch or one by one, are duplicates.
SELECT idem_try_insert('many', 'd') AS single;
SELECT * FROM idem_try_insert_many('many', ARRAY['c', 'd', 'e', 'e', 'f', 'a']) AS recorded;
SELECT idem_try_insert('many', 'f') AS single_after_batch;
SELECT key, status, attempts FROM idem_records WHERE scope = 'many' ORDER BY key;

-- WITH ORDINALITY numbers a batch as the function does.
SELECT k.key, k.n, r.n IS NOT NULL AS new
FROM unnest(ARRAY['f', 'g', 'g', 'h']) WITH ORDINALITY AS k(key, n)
LEFT JOIN idem_try_insert_many('many', ARRAY['f', 'g', 'g', 'h']) AS r(n) USING (n)
ORDER BY k.n;

-- The batch's one statement: consume it exactly once. Two messages for one
-- account in a batch both count (the UPDATE takes their sum: UPDATE ...
-- FROM with two source rows for one target row would apply only one), a
-- message delivered twice in the batch counts once, and a redelivered
-- batch changes nothing.
CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
INSERT INTO accounts VALUES (1, 0), (2, 0), (3, 0);
PREPARE consume(text[], bigint[], bigint[]) AS
WITH batch AS (
    SELECT * FROM unnest($1, $2, $3) WITH ORDINALITY AS m(order_id, account, points, n)
), fresh AS (
    SELECT b.account, sum(b.points) AS points
    FROM idem_try_insert_many('many_orders', $1) AS recorded(n) JOIN batch b USING (n)
    GROUP BY b.account
)
UPDATE accounts a SET balance = a.balance + f.points
FROM fresh f WHERE a.id = f.account;
EXECUTE consume(ARRAY['o1', 'o2', 'o3', 'o2'], ARRAY[1, 1, 2, 1], ARRAY[10, 20, 5, 20]);
SELECT * FROM accounts ORDER BY id;
-- Redelivered with one new message: only that one moves a balance.
EXECUTE consume(ARRAY['o1', 'o2', 'o3', 'o4'], ARRAY[1, 1, 2, 3], ARRAY[10, 20, 5, 7]);
EXECUTE consume(ARRAY['o1', 'o2', 'o3', 'o4'], ARRAY[1, 1, 2, 3], ARRAY[10, 20, 5, 7]);
SELECT * FROM accounts ORDER BY id;
SELECT count(*) AS order_records FROM idem_records WHERE scope = 'many_orders';
DEALLOCATE consume;

-- A batch rolled back leaves nothing; the keys are new again.
BEGIN;
SELECT count(*) FROM idem_try_insert_many('many_rollback', ARRAY['x', 'y']);
ROLLBACK;
SELECT count(*) FROM idem_records WHERE scope = 'many_rollback';
SELECT * FROM idem_try_insert_many('many_rollback', ARRAY['y', 'x']) AS after_rollback;

-- A batch rolled back to a savepoint too; the rest of the transaction stays.
BEGIN;
SELECT count(*) FROM idem_try_insert_many('many_savepoint', ARRAY['x']);
SAVEPOINT s;
SELECT count(*) FROM idem_try_insert_many('many_savepoint', ARRAY['x', 'y']);
ROLLBACK TO SAVEPOINT s;
SELECT * FROM idem_try_insert_many('many_savepoint', ARRAY['x', 'y']) AS after_savepoint;
COMMIT;

-- TTL: the call's, else the scope's or pg_idem.default_ttl. An expired
-- record counts as absent and is renewed in place.
SELECT count(*) FROM idem_try_insert_many('many_expiry', ARRAY['old', 'live'], '1 microsecond');
SELECT pg_sleep(0.01);
SELECT count(*) FROM idem_try_insert_many('many_expiry', ARRAY['live'], '1 hour');
SELECT * FROM idem_try_insert_many('many_expiry', ARRAY['old', 'live']) AS recorded;
SELECT key, attempts, expires_at - recorded_at AS ttl FROM idem_records
WHERE scope = 'many_expiry' ORDER BY key;

-- A large batch: every distinct key once.
SELECT count(*) AS recorded
FROM idem_try_insert_many('many_large', ARRAY(SELECT 'k' || (i % 5000) FROM generate_series(1, 10000) i));
SELECT count(*) AS records FROM idem_records WHERE scope = 'many_large';

-- An index an operator adds on idem_records, partial, gets an entry for
-- every record of a batch that belongs in it, wherever it is in the batch.
CREATE INDEX idem_records_vip ON idem_records (key) WHERE key LIKE 'vip%';
SELECT count(*) AS recorded
FROM idem_try_insert_many('many_partial', ARRAY['aaa', 'vip-1', 'bbb', 'vip-2']);
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT key FROM idem_records WHERE key LIKE 'vip%' ORDER BY key;
SELECT key FROM idem_records WHERE key LIKE 'vip%' ORDER BY key;
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP INDEX idem_records_vip;

-- Bad input: a clear error, and nothing written (the good keys before a
-- bad one neither).
SELECT * FROM idem_try_insert_many(NULL, ARRAY['k']);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_try_insert_many('many_bad', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_try_insert_many('many_bad', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_try_insert_many('many_bad', ARRAY['k', NULL]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_try_insert_many('many_bad', ARRAY['k', '']);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_try_insert_many('many_bad', ARRAY['k', repeat('x', 1048577)]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_try_insert_many('', ARRAY['k']);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_try_insert_many('many_bad', ARRAY[['a', 'b'], ['c', 'd']]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_try_insert_many('many_bad', array_fill('k'::text, ARRAY[10001]));
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_try_insert_many('many_bad', ARRAY['k'], '-1 hour');
\echo :LAST_ERROR_SQLSTATE
BEGIN READ ONLY;
SELECT * FROM idem_try_insert_many('many_bad', ARRAY['k']);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT count(*) AS written_by_bad_calls FROM idem_records WHERE scope = 'many_bad';

-- The caller's search_path cannot redirect anything.
SET search_path = pg_catalog;
SELECT * FROM public.idem_try_insert_many('many', ARRAY['z']) AS with_catalog_path;
RESET search_path;

DROP TABLE accounts;
