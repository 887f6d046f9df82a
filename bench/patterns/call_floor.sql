-- The floor of any function call: bench.call_floor is texteq, a built-in,
-- called with idem_try_insert's two arguments after the same \set as stream
-- "dup" (bench/sql/setup.sql).
-- idem_dup / call_floor is what pg_idem's own work costs a duplicate.
\set k random(0, :dupkeys - 1)
SELECT bench.call_floor(:scope, :k);
