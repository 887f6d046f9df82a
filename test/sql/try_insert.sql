-- idem_try_insert: the unique-constraint pattern on the managed table.
-- Each error is followed by its SQLSTATE.

-- First time true, then a duplicate; scopes are separate.
SELECT idem_try_insert('points', 'order-1') AS first,
       idem_try_insert('points', 'order-1') AS again,
       idem_try_insert('refunds', 'order-1') AS other_scope;

-- A claim made in a transaction that rolls back vanishes with it.
BEGIN;
SELECT idem_try_insert('points', 'order-2');
ROLLBACK;
SELECT idem_try_insert('points', 'order-2') AS after_rollback;

-- A duplicate never aborts the caller's transaction.
BEGIN;
SELECT idem_try_insert('points', 'order-1') AS duplicate;
SELECT 'still in a healthy transaction' AS status;
COMMIT;

-- A claim rolled back to a savepoint vanishes too.
BEGIN;
SAVEPOINT s;
SELECT idem_try_insert('points', 'order-3');
ROLLBACK TO SAVEPOINT s;
SELECT idem_try_insert('points', 'order-3') AS after_savepoint_rollback;
COMMIT;

-- One statement with the business write: the balance moves once.
CREATE TABLE users (id int PRIMARY KEY, points int NOT NULL DEFAULT 0);
INSERT INTO users VALUES (1, 0);
WITH d AS (SELECT idem_try_insert('points', 'order-10') AS first)
UPDATE users SET points = points + 5 FROM d WHERE d.first AND id = 1;
WITH d AS (SELECT idem_try_insert('points', 'order-10') AS first)
UPDATE users SET points = points + 5 FROM d WHERE d.first AND id = 1;
SELECT points FROM users WHERE id = 1;

-- The README's form: the claim as a subquery of the WHERE clause, run once
-- per statement before any row is read. The balance moves once, and the key
-- is recorded even when no row matches (user 2 does not exist).
UPDATE users SET points = points + 7 WHERE id = 1 AND (SELECT idem_try_insert('points', 'order-11'));
UPDATE users SET points = points + 7 WHERE id = 1 AND (SELECT idem_try_insert('points', 'order-11'));
UPDATE users SET points = points + 7 WHERE id = 2 AND (SELECT idem_try_insert('points', 'order-12'));
SELECT points FROM users WHERE id = 1;
SELECT key FROM idem_records WHERE scope = 'points' AND key IN ('order-11', 'order-12') ORDER BY key;

-- Many claims in one statement: exactly the distinct keys are new.
SELECT count(*) FILTER (WHERE claimed) AS new, count(*) FILTER (WHERE NOT claimed) AS duplicates
FROM (SELECT idem_try_insert('batch', 'k' || (i % 100)) AS claimed
      FROM generate_series(1, 1000) i) s;

-- TTL: the call's, else pg_idem.default_ttl (7 days).
SELECT idem_try_insert('ttl', 'default'), idem_try_insert('ttl', 'one-hour', '1 hour');
SELECT key, expires_at - recorded_at AS ttl, status, attempts
FROM idem_records WHERE scope = 'ttl' ORDER BY key;
SHOW pg_idem.default_ttl;

-- A record past its expiry counts as absent, purged or not; claiming it
-- again renews it in place.
SELECT idem_try_insert('expiry', 'k', '1 microsecond');
SELECT pg_sleep(0.01);
SELECT idem_try_insert('expiry', 'k') AS expired_is_absent;
SELECT idem_try_insert('expiry', 'k') AS renewed_is_live;
SELECT count(*), min(expires_at - recorded_at) FROM idem_records WHERE scope = 'expiry';

-- Keys up to 1 MB work and are told apart by their full value.
SELECT idem_try_insert('long', repeat('x', 1048576)) AS one_mb,
       idem_try_insert('long', repeat('x', 1048576)) AS one_mb_again,
       idem_try_insert('long', repeat('x', 1048575) || 'y') AS differs_in_last_byte;
SELECT count(*), max(length(key)) FROM idem_records WHERE scope = 'long';

-- Unicode and odd bytes are just bytes of the key.
SELECT idem_try_insert('unicode', 'zamówienie-ü'), idem_try_insert('unicode', 'zamowienie-u');

-- The caller's search_path cannot redirect anything.
SET search_path = pg_catalog;
SELECT public.idem_try_insert('points', 'order-20') AS with_catalog_path;
RESET search_path;

-- Bad input: a clear error, and nothing written.
SELECT idem_try_insert(NULL, 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert('bad', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert('', 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert('bad', '');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert(repeat('s', 129), 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert('bad', repeat('x', 1048577));
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert('bad', 'k', '-1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert('bad', 'k', '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert('bad', 'k', interval '1 day' - interval '2 days');
\echo :LAST_ERROR_SQLSTATE
-- Positive from some dates only (-1 day from February 1): refused, so that a
-- record is never born expired, whatever the date.
SELECT idem_try_insert('bad', 'k', '1 month -30 days');
\echo :LAST_ERROR_SQLSTATE
BEGIN READ ONLY;
SELECT idem_try_insert('bad', 'read-only');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT count(*) AS written_by_bad_calls FROM idem_records WHERE scope = 'bad';

DROP TABLE users;
