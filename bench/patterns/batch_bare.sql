-- A batch applied without dedup (the baseline: redeliveries are applied
-- again): one UPDATE of users, the batch's points added up per user (an
-- UPDATE ... FROM with two source rows for one target row applies only one),
-- in the order of the user ids: the update follows it, so concurrent batches
-- lock the users they share in the same order and do not deadlock. (The
-- other batch patterns do the same.)
UPDATE users SET points = users.points + a.n
FROM (SELECT m.u, sum(m.n) AS n
      FROM bench.batch(:base, :nc, :client_id, :seq0, :nn, :nr, :seed) b,
           unnest(b.k, b.u, b.n) AS m(k, u, n)
      GROUP BY m.u ORDER BY m.u) a
WHERE users.id = a.u;
