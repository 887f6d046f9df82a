-- The same protocol written by hand in PL/pgSQL (bench.pl_begin and
-- bench.pl_complete in bench/sql/setup.sql): INSERT ... ON CONFLICT DO
-- UPDATE ... WHERE the lease expired RETURNING, the business update, and a
-- complete function; three autocommit calls.
SELECT acquired::int AS acquired, attempt FROM bench.pl_begin(:scope, :k) \gset
\if :acquired
UPDATE users SET points = points + :n WHERE id = :u;
SELECT bench.pl_complete(:scope, :k, :attempt);
\endif
