-- The hand-written optimistic UPDATE (versioned_sql.sql) in a PL/pgSQL
-- function (bench.ver_update in bench/sql/setup.sql), after the same read.
SELECT bench.ver_update(:u, :ev, :np);
