-- One statement: claim the key in pg_idem's table, update only if new. (The
-- claim is in a CTE, not in the UPDATE's WHERE clause: a volatile function
-- there would run again when READ COMMITTED rechecks a concurrently updated
-- row.)
WITH d AS (SELECT idem_try_insert(:scope, :k) AS first)
UPDATE users SET points = points + :n FROM d WHERE d.first AND id = :u;
