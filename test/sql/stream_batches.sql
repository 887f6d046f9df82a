-- idem_advance_many: a batch of positions of one partition, applied in
-- order as that many idem_advance calls would be, in one update of the
-- partition's row. Each error is followed by its SQLSTATE.

-- The indexes (1-based) of the new positions. A plain high-water mark
-- (window 0): within the batch too, a position is new only above the ones
-- before it.
SELECT * FROM idem_advance_many('batches', 0, ARRAY[1, 2, 3, 2, 5, 4]) AS new;
SELECT position, window_seen FROM idem_stream_positions WHERE stream = 'batches' AND part = 0;
-- A redelivered batch is all replays; one that overlaps it, only its tail.
SELECT count(*) AS new FROM idem_advance_many('batches', 0, ARRAY[1, 2, 3, 5]);
SELECT * FROM idem_advance_many('batches', 0, ARRAY[4, 5, 6, 7]) AS new;
-- The same answers as one idem_advance per position.
SELECT idem_advance('batches', 1, p, 0) AS single FROM unnest(ARRAY[1, 2, 3, 2, 5, 4]) p;

-- With a window, out-of-order positions inside it are new once.
SELECT * FROM idem_advance_many('batches', 2, ARRAY[10, 8, 9, 8, 12, 11], 4) AS new;
SELECT * FROM idem_advance_many('batches', 2, ARRAY[7, 8, 13, 6], 4) AS new;
SELECT position, window_size, window_seen FROM idem_stream_positions
WHERE stream = 'batches' AND part = 2;

-- The batch's one statement: credit each new message once; two messages
-- for one account both count (the UPDATE takes their sum).
CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
INSERT INTO accounts VALUES (1, 0), (2, 0);
PREPARE credit(integer, bigint[], bigint[], bigint[]) AS
WITH batch AS (
    SELECT * FROM unnest($2, $3, $4) WITH ORDINALITY AS m(pos, account, amount, n)
), fresh AS (
    SELECT b.account, sum(b.amount) AS amount
    FROM idem_advance_many('payments', $1, $2, 64) AS new(n) JOIN batch b USING (n)
    GROUP BY b.account
)
UPDATE accounts a SET balance = a.balance + f.amount FROM fresh f WHERE a.id = f.account;
EXECUTE credit(0, ARRAY[100, 101, 102], ARRAY[1, 1, 2], ARRAY[10, 20, 5]);
EXECUTE credit(0, ARRAY[101, 102, 103], ARRAY[1, 2, 2], ARRAY[20, 5, 7]);
EXECUTE credit(0, ARRAY[100, 101, 102, 103], ARRAY[1, 1, 2, 2], ARRAY[10, 20, 5, 7]);
SELECT * FROM accounts ORDER BY id;
DEALLOCATE credit;
DROP TABLE accounts;

-- In a transaction: a rolled-back batch is forgotten.
BEGIN;
SELECT count(*) FROM idem_advance_many('batches', 3, ARRAY[1, 2]);
ROLLBACK;
SELECT * FROM idem_advance_many('batches', 3, ARRAY[2, 1], 8) AS after_rollback;

-- Bad input: a clear error, and nothing written.
SELECT * FROM idem_advance_many(NULL, 0, ARRAY[1]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_advance_many('bad', NULL, ARRAY[1]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_advance_many('bad', 0, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_advance_many('bad', 0, ARRAY[1], NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_advance_many('bad', 0, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_advance_many('bad', 0, ARRAY[1, NULL]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_advance_many('bad', 0, ARRAY[1, -2]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_advance_many('bad', 0, ARRAY[[1, 2], [3, 4]]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_advance_many('bad', 0, ARRAY[1], 8193);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_advance_many('bad', -1, ARRAY[1]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_advance_many('', 0, ARRAY[1]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_advance_many('bad', 0, array_fill(1::bigint, ARRAY[10001]));
\echo :LAST_ERROR_SQLSTATE
BEGIN READ ONLY;
SELECT * FROM idem_advance_many('bad', 0, ARRAY[1]);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT count(*) AS written_by_bad_calls FROM idem_streams WHERE stream = 'bad';

-- The largest batch: one row, however many positions.
SELECT count(*) AS new
FROM idem_advance_many('batches', 4, ARRAY(SELECT generate_series(1, 10000)::bigint), 8192);
SELECT position, window_seen FROM idem_stream_positions WHERE stream = 'batches' AND part = 4;

SELECT idem_reset_stream('batches'), idem_reset_stream('payments');
