-- The "points" demo: users earn points for orders; a message says "add N
-- points to user U for order X". The broker redelivers some messages, and
-- the balances must still come out as if every order were applied once.
-- Run by scripts/demo on a throwaway cluster; plain tables in public.

CREATE EXTENSION IF NOT EXISTS pg_idem;

CREATE TABLE users (
    id      int PRIMARY KEY,
    points  int NOT NULL DEFAULT 0,
    version bigint NOT NULL DEFAULT 0    -- used by the versioned pattern only
);
INSERT INTO users (id) SELECT generate_series(1, 1000);

-- The own_table pattern's dedup table: the business's own log of orders.
CREATE TABLE points_log (
    order_id bigint PRIMARY KEY,
    user_id  int NOT NULL,
    points   int NOT NULL
);

-- The message stream (filled by messages.sql). Every delivery is a row;
-- a redelivery repeats its original's order_id, user_id and points, and,
-- for the versioned pattern, its version and new_balance.
CREATE TABLE messages (
    seq         int PRIMARY KEY,         -- delivery order
    order_id    bigint NOT NULL,
    user_id     int NOT NULL REFERENCES users,
    points      int NOT NULL,
    redelivery  boolean NOT NULL,
    slow        boolean NOT NULL,        -- its work takes 10 ms (simulated)
    version     bigint,                  -- k: the k-th distinct order of this user
    new_balance int                      -- the user's balance after order k
);

-- What each consumer did with each message, written in the same transaction
-- as the message's effect: applied = the pattern's function said "first
-- time" (false = a duplicate it skipped). Times are for the concurrency
-- figure only.
CREATE TABLE consumed (
    pattern     text NOT NULL,
    seq         int NOT NULL,
    consumer    int NOT NULL,
    applied     boolean NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    PRIMARY KEY (pattern, seq)
);

-- Start barrier, so that the consumers of a pattern really run together.
CREATE TABLE ready (pattern text, consumer int, PRIMARY KEY (pattern, consumer));

-- Exactly-once totals: every distinct order applied once.
CREATE VIEW expected AS
SELECT u.id, coalesce(o.points, 0) AS points, coalesce(o.orders, 0) AS orders
FROM users u
LEFT JOIN (SELECT user_id, sum(points)::int AS points, count(*) AS orders
           FROM (SELECT DISTINCT ON (order_id) order_id, user_id, points
                 FROM messages ORDER BY order_id, seq) d
           GROUP BY user_id) o ON o.user_id = u.id;

-- Between patterns: balances back to zero, the user's dedup table emptied.
CREATE PROCEDURE reset_demo()
LANGUAGE sql AS $$
    UPDATE users SET points = 0, version = 0;
    TRUNCATE points_log;
$$;
