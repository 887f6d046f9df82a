-- A batch deduplicated by hand, in one statement: log the batch's orders in
-- points_log, and add up per user the points of those that went in. (ON
-- CONFLICT DO NOTHING inserts an order that is twice in the batch once: the
-- second is a conflict with the first.)
WITH ins AS (
    INSERT INTO points_log (order_id, user_id, points)
    SELECT m.k, m.u, m.n
    FROM bench.batch(:base, :nc, :client_id, :seq0, :nn, :nr, :seed) b,
         unnest(b.k, b.u, b.n) AS m(k, u, n)
    ON CONFLICT DO NOTHING
    RETURNING user_id, points)
UPDATE users SET points = users.points + a.n
FROM (SELECT user_id, sum(points) AS n FROM ins GROUP BY user_id ORDER BY user_id) a
WHERE users.id = a.user_id;
