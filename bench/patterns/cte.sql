-- The best hand-written single statement: log the order, and update the
-- balance only if the log row went in.
WITH ins AS (
    INSERT INTO points_log (order_id, user_id, points) VALUES (:k, :u, :n)
    ON CONFLICT DO NOTHING
    RETURNING 1)
UPDATE users SET points = points + :n
WHERE id = :u AND EXISTS (SELECT 1 FROM ins);
