-- The message stream: 16,000 distinct orders for 1,000 users, plus 4,000
-- redeliveries (20% of the 20,000 messages) of randomly chosen orders. A
-- redelivery arrives 1 to 40 messages after its original, so with
-- round-robin consumers it usually reaches another consumer, often while
-- the original is still being processed. Fixed seed: every run is the same.

SELECT setseed(0.42);

CREATE TEMP TABLE orders AS
SELECT n,
       1000000 + n                        AS order_id,
       1 + floor(random() * 1000)::int    AS user_id,
       1 + floor(random() * 100)::int     AS points
FROM generate_series(1, 16000) n;

CREATE TEMP TABLE redeliveries AS
SELECT r,
       1 + floor(random() * 16000)::int   AS n,     -- which order
       1 + floor(random() * 40)::int      AS gap    -- how many messages later
FROM generate_series(1, 4000) r;

INSERT INTO messages (seq, order_id, user_id, points, redelivery)
SELECT row_number() OVER (ORDER BY pos, r), order_id, user_id, points, redelivery
FROM (SELECT o.n::numeric AS pos, 0 AS r, o.order_id, o.user_id, o.points, false AS redelivery
      FROM orders o
      UNION ALL
      SELECT o.n + d.gap - 0.5, d.r, o.order_id, o.user_id, o.points, true
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
