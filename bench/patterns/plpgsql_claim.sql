-- The same protocol written by hand in PL/pgSQL (bench.pl_begin and
-- bench.pl_complete in bench/sql/setup.sql): INSERT ... ON CONFLICT DO
-- UPDATE ... WHERE the lease expired RETURNING a fresh random token, the
-- business update, and a complete function that checks the token; three
-- autocommit calls, the same work as idem_begin.sql.
SELECT acquired::int AS acquired, coalesce(token::text, '') AS token
FROM bench.pl_begin(:scope, :k) \gset
\if :acquired
UPDATE users SET points = points + :n WHERE id = :u;
SELECT bench.pl_complete(:scope, :k, :token::uuid);
\endif
