-- The claim protocol as three autocommit statements: claim, the business
-- update, complete. A duplicate (completed, or in progress elsewhere) skips
-- the update. pgbench compares numbers only, hence acquired as 0/1.
SELECT (status = 'acquired')::int AS acquired, coalesce(attempt, 0) AS attempt
FROM idem_begin(:scope, :k::text) \gset
\if :acquired
UPDATE users SET points = points + :n WHERE id = :u;
SELECT idem_complete(:scope, :k::text, :attempt);
\endif
