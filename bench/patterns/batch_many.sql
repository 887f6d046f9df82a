-- requires: idem_try_insert_many(text, text[], interval, bigint[])
-- A batch deduplicated by pg_idem, in one statement: idem_try_insert_many
-- records the batch's keys and returns the positions of those it recorded
-- now (an order twice in the batch at its first position only); the points
-- of the messages at those positions are added up per user. (The call is in
-- a CTE, which runs once: see idem_stmt.sql.)
WITH b AS (SELECT * FROM bench.batch(:base, :nc, :client_id, :seq0, :nn, :nr, :seed)),
     fresh AS (SELECT f.pos FROM b, idem_try_insert_many(:scope, b.k::text[]) AS f(pos))
UPDATE users SET points = users.points + a.n
FROM (SELECT m.u, sum(m.n) AS n
      FROM b, unnest(b.k, b.u, b.n) WITH ORDINALITY AS m(k, u, n, pos)
      JOIN fresh USING (pos)
      GROUP BY m.u ORDER BY m.u) a
WHERE users.id = a.u;
