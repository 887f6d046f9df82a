-- A hand-made dedup table with the same contents as pg_idem's records.
INSERT INTO consumed (scope, key, recorded_at, expires_at)
VALUES (:scope, :k, now(), now() + interval '7 days')
ON CONFLICT DO NOTHING;
