-- The hand-written CTE (cte.sql), logging the order as the row
-- idem_try_insert writes, into a copy of idem_records (public.records_copy:
-- the same columns, key id and indexes; bench/sql/setup.sql).
WITH ins AS (
    INSERT INTO records_copy (key_id, scope, key, status, recorded_at, expires_at)
    VALUES (bench.key_id(:scope, :k), :scope, :k, 'completed', now(), now() + interval '7 days')
    ON CONFLICT DO NOTHING
    RETURNING 1)
UPDATE users SET points = points + :n
WHERE id = :u AND EXISTS (SELECT 1 FROM ins);
