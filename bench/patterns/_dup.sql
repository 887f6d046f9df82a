-- stream "dup": every message is an order already recorded. bench/run first
-- runs the same pattern script with stream "new" and base 0 over exactly
-- orders 0 .. dupkeys-1, so each of these keys exists.
\set k random(0, :dupkeys - 1)
