-- idem_stats and idem_stats_reset: what the functions answered, per scope.
-- The counters need pg_idem in shared_preload_libraries. This file runs on
-- both kinds of server: test/expected/stats.out is the preloaded one,
-- test/expected/stats_1.out the other, where every use of the statistics raises
-- 55000 and the calls themselves work as always.

-- The token of a claim in progress, read from the table as a superuser
-- may: these tests are about other things than who holds a claim
-- (test/sql/claim.sql carries tokens as an application does).
CREATE OR REPLACE FUNCTION regress_token(s text, k text) RETURNS uuid
LANGUAGE sql AS $$ SELECT claim_token FROM idem_records WHERE scope = s AND key = k $$;

-- Start from nothing: no records left by other files (the purge below
-- would count them), no counts.
DELETE FROM idem_records;
SELECT idem_stats_reset();
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS rows_after_reset FROM idem_stats WHERE database = current_database();

-- idem_try_insert: true is a claim, false a duplicate. A call counts when
-- it returns, even if its transaction then rolls back.
SELECT idem_try_insert('stats-a', 'k1'), idem_try_insert('stats-a', 'k1'),
       idem_try_insert('stats-a', 'k2');
BEGIN;
SELECT idem_try_insert('stats-a', 'k3');
ROLLBACK;

-- idem_try_insert_many: each key counts, a claim or a duplicate (a key
-- repeated in the batch too): stats-m has 3 claims and 2 duplicates.
SELECT count(*) AS recorded FROM idem_try_insert_many('stats-m', ARRAY['k1', 'k2', 'k1']);
SELECT count(*) AS recorded FROM idem_try_insert_many('stats-m', ARRAY['k2', 'k3']);

-- The claim protocol: acquired, in progress, completed, a takeover of an
-- expired lease, failures, a dead letter.
SELECT status, attempt FROM idem_begin('stats-b', 'p1');
SELECT status FROM idem_begin('stats-b', 'p1');
SELECT idem_complete('stats-b', 'p1', regress_token('stats-b', 'p1'));
SELECT status FROM idem_begin('stats-b', 'p1');
SELECT status FROM idem_begin('stats-b', 'p2', lease => '1 microsecond');
SELECT pg_sleep(0.01);
SELECT status, attempt FROM idem_begin('stats-b', 'p2');
SELECT idem_fail('stats-b', 'p2', regress_token('stats-b', 'p2'), 'timeout');
SELECT status FROM idem_begin('stats-b', 'p3');
SELECT idem_fail('stats-b', 'p3', regress_token('stats-b', 'p3'), 'card declined', retryable => false);
-- A call that raises an error counts nothing.
SELECT idem_complete('stats-b', 'p1', regress_token('stats-b', 'p1'));
\echo :LAST_ERROR_SQLSTATE
-- idem_lookup counts nothing: it is no claim. A release counts nothing
-- either (its claim was counted when it was acquired).
SELECT status FROM idem_lookup('stats-b', 'p1');
SELECT status FROM idem_lookup('stats-b', 'never');
SELECT status FROM idem_begin('stats-b', 'p4');
SELECT idem_release('stats-b', 'p4', regress_token('stats-b', 'p4'));

-- Attempts used up by expired leases: idem_begin marks the record dead.
SELECT scope FROM idem_configure('stats-e', max_attempts => 1);
SELECT status FROM idem_begin('stats-e', 'k', lease => '1 microsecond');
SELECT pg_sleep(0.01);
SELECT status FROM idem_begin('stats-e', 'k');

-- Reconciliation: one effect happened, one did not (and that claim has
-- no attempts left, so it is also a dead letter).
CREATE FUNCTION stats_effect_happened(scope text, key text) RETURNS boolean
LANGUAGE sql AS $$ SELECT key = 'yes' $$;
SELECT scope FROM idem_configure('stats-c', max_attempts => 1,
                                 reconcile_function => 'stats_effect_happened(text,text)');
SELECT status FROM idem_begin('stats-c', 'yes', lease => '1 microsecond');
SELECT status FROM idem_begin('stats-c', 'no', lease => '1 microsecond');
SELECT pg_sleep(0.01);
SELECT key, outcome FROM idem_reconcile('stats-c') ORDER BY key;

-- The purge counts the records it deleted, per scope.
SELECT count(*) FROM (
    SELECT idem_try_insert('stats-d', 'k' || g, '1 microsecond') FROM generate_series(1, 5) g) s;
SELECT pg_sleep(0.01);
SELECT idem_purge(100);

-- The cache counters depend on pg_idem.cache_size: duplicate_cache.sql.
SELECT scope, claims, duplicates, in_progress, takeovers, completions, failures,
       dead_letters, purged, reconciled,
       stats_since > now() - interval '1 hour' AS recent
FROM idem_stats WHERE database = current_database() ORDER BY scope;

-- The view is over a function; both are for the roles they are granted to.
CREATE ROLE regress_idem_stats_reader;
SET ROLE regress_idem_stats_reader;
SELECT count(*) FROM idem_stats;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM idem_stats();
\echo :LAST_ERROR_SQLSTATE
SELECT idem_stats_reset();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT SELECT ON idem_stats TO regress_idem_stats_reader;
GRANT EXECUTE ON FUNCTION idem_stats(), idem_stats_reset() TO regress_idem_stats_reader;
-- A reader sees the rows of the scopes it was granted, no others (nor the
-- "other" rows, nor other databases'), and may not reset them all.
SET ROLE regress_idem_stats_reader;
SELECT count(*) AS rows_seen FROM idem_stats;
RESET ROLE;
SELECT idem_grant('stats-b', 'regress_idem_stats_reader') AS scope_granted;
SET ROLE regress_idem_stats_reader;
SELECT scope, claims FROM idem_stats ORDER BY scope;
SELECT idem_stats_reset();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT idem_revoke('stats-b', 'regress_idem_stats_reader') AS scope_revoked;
REVOKE ALL ON idem_stats FROM regress_idem_stats_reader;
REVOKE ALL ON FUNCTION idem_stats(), idem_stats_reset() FROM regress_idem_stats_reader;
DROP ROLE regress_idem_stats_reader;

-- A reset forgets every row.
SELECT idem_stats_reset();
SELECT count(*) AS rows_after_reset FROM idem_stats WHERE database = current_database();

-- A backend counts its last 8 scopes in a slot of its own, and moves the
-- oldest one's counts to the shared table when it counts a ninth: 12 scopes
-- counted in turn, three rounds, two new keys and a duplicate each, are
-- each counted exactly.
SELECT count(*) FILTER (WHERE idem_try_insert('stats-slot-' || s, (r % 2)::text)) AS claims
FROM generate_series(1, 3) r, generate_series(1, 12) s;
SELECT scope, claims, duplicates FROM idem_stats
WHERE database = current_database() ORDER BY scope;
-- A reset drops what the slot holds too: counting starts again from zero.
SELECT idem_stats_reset();
SELECT idem_try_insert('stats-slot-1', 'after the reset');
SELECT scope, claims, duplicates FROM idem_stats
WHERE database = current_database() ORDER BY scope;

DELETE FROM idem_records;
DELETE FROM idem_scopes;
DROP FUNCTION stats_effect_happened(text, text);
