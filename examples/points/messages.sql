-- The message stream: 16,000 distinct orders for 1,000 users, plus 4,000
-- redeliveries (20% of the 20,000 messages) of randomly chosen orders.
-- Most redeliveries arrive 1 to 40 messages after their original (a quarter
-- of them within 3). The first 100 are the broker's acknowledgement
-- timeouts: their order is slow to process (10 ms) and is redelivered at
-- once, the very next message, so another consumer gets it while the first
-- is still working on it.
-- Fixed seed: every run generates the same stream.

SELECT setseed(0.42) \gset

CREATE TEMP TABLE orders AS
SELECT n,
       1000000 + n                        AS order_id,
       1 + floor(random() * 1000)::int    AS user_id,
       1 + floor(random() * 100)::int     AS points
FROM generate_series(1, 16000) n;

CREATE TEMP TABLE redeliveries AS
SELECT r,
       1 + floor(random() * 16000)::int   AS n,     -- which order
       CASE WHEN r <= 100 THEN 1                    -- how many messages later
            ELSE 1 + floor(random() ^ 2 * 40)::int END AS gap
FROM generate_series(1, 4000) r;

INSERT INTO messages (seq, order_id, user_id, points, redelivery, slow)
SELECT row_number() OVER (ORDER BY pos, r), order_id, user_id, points, redelivery,
       n IN (SELECT n FROM redeliveries WHERE r <= 100)
FROM (SELECT o.n::numeric AS pos, 0 AS r, o.n, o.order_id, o.user_id, o.points, false AS redelivery
      FROM orders o
      UNION ALL
      SELECT o.n + d.gap - 0.5, d.r, o.n, o.order_id, o.user_id, o.points, true
      FROM redeliveries d JOIN orders o USING (n)) s;

-- For the versioned pattern the producer numbers each user's orders
-- (version k = the k-th distinct order of that user, in delivery order)
-- and sends the absolute balance after it; a redelivery repeats both.
WITH v AS (
    SELECT order_id,
           row_number() OVER w    AS version,
           sum(points) OVER w     AS new_balance
    FROM messages WHERE NOT redelivery
    WINDOW w AS (PARTITION BY user_id ORDER BY seq))
UPDATE messages m SET version = v.version, new_balance = v.new_balance
FROM v WHERE v.order_id = m.order_id;

ANALYZE;
