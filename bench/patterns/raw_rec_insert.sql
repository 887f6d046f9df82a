-- The row idem_try_insert writes for a new key, written by hand into a copy
-- of idem_records (public.records_copy: the same columns, key id and
-- indexes; bench/sql/setup.sql).
INSERT INTO records_copy (key_id, scope, key, status, recorded_at, expires_at)
VALUES (bench.key_id(:scope, :k), :scope, :k, 'completed', now(), now() + interval '7 days')
ON CONFLICT DO NOTHING;
