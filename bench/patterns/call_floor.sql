-- The floor of any function call: bench.call_floor is texteq, a built-in,
-- declared SECURITY DEFINER like idem_try_insert and called with the same
-- two arguments after the same \set as stream "dup" (bench/sql/setup.sql).
-- idem_dup / call_floor is what pg_idem's own work costs a duplicate.
\set k random(0, :dupkeys - 1)
SELECT bench.call_floor(:scope, :k);
