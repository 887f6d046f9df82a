-- The PL/pgSQL protocol of plpgsql_claim.sql writing the rows idem_begin
-- and idem_complete write, into a copy of idem_records (bench.pl_begin_rec
-- and bench.pl_complete_rec in bench/sql/setup.sql).
SELECT acquired::int AS acquired, coalesce(token::text, '') AS token
FROM bench.pl_begin_rec(:scope, :k) \gset
\if :acquired
UPDATE users SET points = points + :n WHERE id = :u;
SELECT bench.pl_complete_rec(:scope, :k, :token::uuid);
\endif
