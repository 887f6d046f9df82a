-- The claim protocol as three autocommit statements: claim, the business
-- update, complete with the claim's token. A duplicate (completed, or in
-- progress elsewhere) skips the update. pgbench compares numbers only,
-- hence acquired as 0/1; a NULL token (not acquired) is set as ''.
SELECT (status = 'acquired')::int AS acquired, coalesce(token::text, '') AS token
FROM idem_begin(:scope, :k::text) \gset
\if :acquired
UPDATE users SET points = points + :n WHERE id = :u;
SELECT idem_complete(:scope, :k::text, :token::uuid);
\endif
