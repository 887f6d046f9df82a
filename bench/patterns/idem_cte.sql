-- The same statement with the claim in a CTE joined to the UPDATE (the
-- README's form before 0.3): also evaluated once, but the join reads the
-- user's row for a duplicate too.
WITH d AS (SELECT idem_try_insert(:scope, :k) AS first)
UPDATE users SET points = points + :n FROM d WHERE d.first AND id = :u;
