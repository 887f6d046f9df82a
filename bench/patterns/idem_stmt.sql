-- One statement, the README's: claim the key in pg_idem's table, update only
-- if new. The claim is an uncorrelated subquery, which PostgreSQL runs once,
-- before it reads a row (an InitPlan gating the plan), and does not run
-- again when READ COMMITTED rechecks a concurrently updated row; a
-- duplicate never reads users. (A bare call in the WHERE clause would run
-- again on that recheck.)
UPDATE users SET points = points + :n
WHERE id = :u AND (SELECT idem_try_insert(:scope, :k));
