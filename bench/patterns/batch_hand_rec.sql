-- A batch deduplicated by hand (batch_hand.sql), logging each order as the
-- row idem_try_insert_many writes, into a copy of idem_records
-- (public.records_copy: the same columns, key id and indexes;
-- bench/sql/setup.sql). The rows that went in return their keys, whose
-- users and points are functions of the order (bench.batch_user,
-- bench.msg_points).
WITH ins AS (
    INSERT INTO records_copy (key_id, scope, key, status, recorded_at, expires_at)
    SELECT bench.key_id(:scope, m.k::text), :scope, m.k::text, 'completed', now(),
           now() + interval '7 days'
    FROM bench.batch(:base, :nc, :client_id, :seq0, :nn, :nr, :seed) b, unnest(b.k) AS m(k)
    ON CONFLICT DO NOTHING
    RETURNING key::bigint AS k)
UPDATE users SET points = users.points + a.n
FROM (SELECT bench.batch_user(k) AS u, sum(bench.msg_points(k)) AS n
      FROM ins GROUP BY 1 ORDER BY 1) a
WHERE users.id = a.u;
