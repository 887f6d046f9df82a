-- The dedup-table transaction as usually written: three statements and a
-- client-side decision. It uses aset rather than gset because gset fails on
-- the zero rows of a duplicate, while aset leaves the variable inserted at 0.
BEGIN;
\set inserted 0
INSERT INTO consumed_log (scope, key, recorded_at, expires_at)
VALUES (:scope, :k, now(), now() + interval '7 days')
ON CONFLICT DO NOTHING
RETURNING 1 AS inserted \aset
\if :inserted
UPDATE users SET points = points + :n WHERE id = :u;
\endif
COMMIT;
