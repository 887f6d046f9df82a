-- pg_idem install script. The single source of pg_idem--<version>.sql.
--
-- Every name is schema-qualified (@extschema@ or pg_catalog) so that nothing
-- here, and nothing the C functions run, depends on the caller's search_path.

\echo Use "CREATE EXTENSION pg_idem" to load this file. \quit

-- The life of a record. Records written by the transactional functions
-- (idem_try_insert) are 'completed' from the start: they commit together
-- with the effect they guard. The other states belong to the claim/complete
-- protocol.
CREATE TYPE @extschema@.idem_status AS ENUM ('in_progress', 'completed', 'failed', 'dead');

-- The managed dedup table: one row per (scope, key), found through its key
-- id: the scope and key themselves when short, a SHA-256 when long, so that
-- keys of any length (up to 1 MB) can be indexed. Scope and key are stored
-- whole and compared on every match; see src/core/record_key.hpp. Only
-- pg_idem's functions write it.
CREATE TABLE @extschema@.idem_records (
    key_id       bytea NOT NULL,
    scope            text NOT NULL,
    key              text NOT NULL,
    status           @extschema@.idem_status NOT NULL,
    attempts         integer NOT NULL DEFAULT 1,
    attempt_base     integer NOT NULL DEFAULT 0,
    recorded_at      timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    lease_expires_at timestamptz,
    holder_pid       integer,
    holder_started_at timestamptz,
    fingerprint      text,
    result           jsonb,
    last_error       text,
    CONSTRAINT idem_records_pkey PRIMARY KEY (key_id)
);

-- The purge finds expired records through this index. BRIN, because expiry
-- grows with insertion time: it costs claims almost nothing to maintain,
-- unlike a second btree on every insert.
CREATE INDEX idem_records_expiry ON @extschema@.idem_records
    USING brin (expires_at) WITH (pages_per_range = 8);

-- Claims in flight, for reconciliation, idem_in_flight and the purge status.
-- Partial: records written by idem_try_insert never enter it.
CREATE INDEX idem_records_in_flight ON @extschema@.idem_records (lease_expires_at)
    WHERE status = 'in_progress';

-- Steady insert-and-purge churn: vacuum this table early and often.
ALTER TABLE @extschema@.idem_records SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05
);

COMMENT ON COLUMN @extschema@.idem_records.attempts IS
    'number of the latest claim: the fencing token of its holder; it only grows';
COMMENT ON COLUMN @extschema@.idem_records.attempt_base IS
    'attempts used before the last idem_retry; attempts - attempt_base count against max_attempts';
COMMENT ON TABLE @extschema@.idem_records IS
    'pg_idem idempotency records; written only through the pg_idem functions';

REVOKE ALL ON TABLE @extschema@.idem_records FROM PUBLIC;

-- The duplicate cache (src/pg/duplicate_cache.cpp) must forget a key whose
-- record changes or goes away. pg_idem's own writes tell it directly; this
-- trigger catches the rest (an operator's DELETE or UPDATE in SQL). ALWAYS:
-- also when session_replication_role is replica. TRUNCATE needs nothing: it
-- gives the table a new relfilenode, which every cached entry is checked
-- against. The WHEN clause spares servers without the cache (the default)
-- the queued after-trigger event of every update.
CREATE FUNCTION @extschema@.idem_cache_enabled() RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_cache_enabled'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.idem_cache_enabled() IS
    'whether this server has the duplicate cache (pg_idem preloaded, pg_idem.cache_size > 0)';
CREATE FUNCTION @extschema@.idem_records_changed() RETURNS trigger
AS 'MODULE_PATHNAME', 'idem_records_changed'
LANGUAGE C;
CREATE TRIGGER idem_records_changed AFTER UPDATE OR DELETE ON @extschema@.idem_records
    FOR EACH ROW WHEN (@extschema@.idem_cache_enabled())
    EXECUTE FUNCTION @extschema@.idem_records_changed();
ALTER TABLE @extschema@.idem_records ENABLE ALWAYS TRIGGER idem_records_changed;
REVOKE ALL ON FUNCTION @extschema@.idem_records_changed() FROM PUBLIC;

-- Records are data: pg_dump keeps them.
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_records', '');

-- Transactional dedup on the managed table. SECURITY DEFINER because callers
-- have no privilege on idem_records; the C code names every object with its
-- schema, so the caller's search_path cannot redirect it. EXECUTE is granted
-- explicitly: a role that can claim keys can also make other consumers skip
-- them.
CREATE FUNCTION @extschema@.idem_try_insert(scope text, key text, ttl interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_try_insert'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

REVOKE ALL ON FUNCTION @extschema@.idem_try_insert(text, text, interval) FROM PUBLIC;

-- Unique-constraint dedup on the caller's own table, with the caller's
-- privileges, row-level security and triggers.
CREATE FUNCTION @extschema@.idem_try_insert_row(target regclass, "row" jsonb)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_try_insert_row'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Optimistic-lock update on the caller's own table: true when applied, false
-- when the row has another version (a replay or a stale message), NULL when
-- no row has that key.
CREATE FUNCTION @extschema@.idem_versioned_update(target regclass, key jsonb,
                                                  expected_version bigint, changes jsonb,
                                                  version_column name DEFAULT 'version')
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_versioned_update'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- ---------------------------------------------------------------------------
-- The claim / complete / fail protocol, for effects outside the database.
-- ---------------------------------------------------------------------------

-- Per-scope settings, written by idem_configure. A NULL column (or a scope
-- with no row) falls back to the pg_idem.default_* parameter.
CREATE TABLE @extschema@.idem_scopes (
    scope                   text COLLATE "C" PRIMARY KEY,
    ttl                     interval,
    lease                   interval,
    max_attempts            integer,
    on_fingerprint_mismatch text,
    reconcile_function      regprocedure,
    takeover_on_disconnect  boolean,
    configured_by           regrole NOT NULL,
    configured_at           timestamptz NOT NULL,
    CONSTRAINT idem_scopes_mismatch_policy CHECK (on_fingerprint_mismatch IN ('error', 'status'))
);

REVOKE ALL ON TABLE @extschema@.idem_scopes FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_scopes', '');

-- What idem_begin answers.
--   status: 'acquired' (you hold the key: do the work, then idem_complete or
--   idem_fail with this attempt), 'in_progress' (another holder has a live
--   lease), 'completed' (done before: replay result), 'dead' (attempts used
--   up), 'fingerprint_mismatch' (same key, different payload, when the
--   scope's policy is 'status').
CREATE TYPE @extschema@.idem_claim AS (
    status           text,
    attempt          integer,
    result           jsonb,
    lease_expires_at timestamptz,
    last_error       text
);

CREATE FUNCTION @extschema@.idem_begin(scope text, key text,
                                       lease interval DEFAULT NULL,
                                       fingerprint text DEFAULT NULL,
                                       wait interval DEFAULT NULL,
                                       takeover_on_disconnect boolean DEFAULT NULL)
RETURNS @extschema@.idem_claim
AS 'MODULE_PATHNAME', 'idem_begin'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

CREATE FUNCTION @extschema@.idem_complete(scope text, key text, attempt integer,
                                          result jsonb DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_complete'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

CREATE FUNCTION @extschema@.idem_fail(scope text, key text, attempt integer, error text,
                                      retryable boolean DEFAULT true)
RETURNS @extschema@.idem_status
AS 'MODULE_PATHNAME', 'idem_fail'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

CREATE FUNCTION @extschema@.idem_configure(scope text,
                                           ttl interval DEFAULT NULL,
                                           lease interval DEFAULT NULL,
                                           max_attempts integer DEFAULT NULL,
                                           on_fingerprint_mismatch text DEFAULT NULL,
                                           reconcile_function regprocedure DEFAULT NULL,
                                           takeover_on_disconnect boolean DEFAULT NULL)
RETURNS @extschema@.idem_scopes
AS 'MODULE_PATHNAME', 'idem_configure'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

REVOKE ALL ON FUNCTION @extschema@.idem_begin(text, text, interval, text, interval, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_complete(text, text, integer, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_fail(text, text, integer, text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_configure(text, interval, interval, integer, text, regprocedure, boolean) FROM PUBLIC;

-- Settles claims whose lease ran out, asking each scope's reconciliation
-- function whether the effect happened. Returns what it looked at.
CREATE FUNCTION @extschema@.idem_reconcile(scope text DEFAULT NULL, max_rows integer DEFAULT 100)
RETURNS TABLE (scope text, key text, attempt integer, outcome text)
AS 'MODULE_PATHNAME', 'idem_reconcile'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

-- Operator tools.
CREATE FUNCTION @extschema@.idem_retry(scope text, key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_retry'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

CREATE FUNCTION @extschema@.idem_forget(scope text, key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_forget'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

-- Claims in flight, with their lease and holder. holder_alive needs the
-- viewer to see other sessions' backend_start (pg_read_all_stats).
CREATE VIEW @extschema@.idem_in_flight AS
SELECT r.scope, r.key, r.attempts AS attempt, r.recorded_at AS claimed_at,
       pg_catalog.now() OPERATOR(pg_catalog.-) r.recorded_at AS lease_age,
       r.lease_expires_at,
       r.lease_expires_at OPERATOR(pg_catalog.<=) pg_catalog.now() AS lease_expired,
       r.holder_pid,
       EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a
               WHERE a.pid OPERATOR(pg_catalog.=) r.holder_pid
                 AND a.backend_start OPERATOR(pg_catalog.=) r.holder_started_at) AS holder_alive
FROM @extschema@.idem_records r
WHERE r.status OPERATOR(pg_catalog.=) 'in_progress';

-- Records whose attempts are used up: requeue with idem_retry, or drop with
-- idem_forget.
CREATE VIEW @extschema@.idem_dead_letters AS
SELECT r.scope, r.key, r.attempts, r.last_error, r.recorded_at AS died_at, r.expires_at
FROM @extschema@.idem_records r
WHERE r.status OPERATOR(pg_catalog.=) 'dead';

REVOKE ALL ON FUNCTION @extschema@.idem_reconcile(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_retry(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_forget(text, text) FROM PUBLIC;
REVOKE ALL ON @extschema@.idem_in_flight, @extschema@.idem_dead_letters FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- Purging expired records.
-- ---------------------------------------------------------------------------

-- Deletes up to max_rows expired records (never one in progress), skipping
-- rows another purge or a claim holds, and returns how many it deleted.
-- The purge worker runs the same batches; this is for cron or pg_cron.
CREATE FUNCTION @extschema@.idem_purge(max_rows integer DEFAULT 10000)
RETURNS bigint
AS 'MODULE_PATHNAME', 'idem_purge'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

-- What the purge worker of this database did last, and what waits.
CREATE FUNCTION @extschema@.idem_purge_status(
    OUT worker_pid integer,
    OUT last_round_at timestamptz,
    OUT last_round_rows bigint,
    OUT last_round_ms double precision,
    OUT rounds bigint,
    OUT purged_total bigint,
    OUT reconciled_completed bigint,
    OUT reconciled_failed bigint,
    OUT reconciled_unknown bigint,
    OUT backlog_rows bigint,
    OUT oldest_expired_age interval,
    OUT expired_leases bigint)
AS 'MODULE_PATHNAME', 'idem_purge_status'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

CREATE VIEW @extschema@.idem_purge_status AS SELECT * FROM @extschema@.idem_purge_status();

REVOKE ALL ON FUNCTION @extschema@.idem_purge(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_purge_status() FROM PUBLIC;
REVOKE ALL ON @extschema@.idem_purge_status FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- Computed keys and payload fingerprints (src/core/message_key.hpp gives the
-- canonical form and the digest; README "Computed keys").
-- ---------------------------------------------------------------------------

CREATE FUNCTION @extschema@.idem_key(payload jsonb, VARIADIC fields text[])
RETURNS text
AS 'MODULE_PATHNAME', 'idem_key'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

CREATE FUNCTION @extschema@.idem_fingerprint(payload jsonb)
RETURNS text
AS 'MODULE_PATHNAME', 'idem_fingerprint'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

-- ---------------------------------------------------------------------------
-- Stream positions: dedup without a record per message, for consumers that
-- own a partition. One row per (stream, part): the high-water mark and an
-- anti-replay window (RFC 4303, 3.4.3) of the positions below it.
-- ---------------------------------------------------------------------------

CREATE TABLE @extschema@.idem_streams (
    stream       text COLLATE "C" NOT NULL,
    part         integer NOT NULL,
    position     bigint NOT NULL,    -- the highest position accepted
    window_size  integer NOT NULL,   -- the window of the last idem_advance
    window_state bytea NOT NULL,     -- src/core/replay_window.hpp's encoding
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (stream, part)
) WITH (fillfactor = 50); -- room on the page for HOT updates: a row is rewritten per message

REVOKE ALL ON TABLE @extschema@.idem_streams FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_streams', '');

-- True, and the position recorded, if it is above the stream's high-water
-- mark or inside the window and not seen before; false for a replay or a
-- position too old for the window. In the caller's transaction.
CREATE FUNCTION @extschema@.idem_advance(stream text, part integer, "position" bigint,
                                         "window" integer DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_advance'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

-- The stream's high-water mark, NULL if nothing was accepted yet: where a
-- consumer seeks after a restart.
CREATE FUNCTION @extschema@.idem_position(stream text, part integer)
RETURNS bigint
AS 'MODULE_PATHNAME', 'idem_position'
LANGUAGE C STABLE PARALLEL SAFE SECURITY DEFINER;

-- Internal: how many positions below the high-water mark the window holds
-- as seen.
CREATE FUNCTION @extschema@.idem_stream_window_seen(window_state bytea)
RETURNS integer
AS 'MODULE_PATHNAME', 'idem_stream_window_seen'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- Operator tools.
CREATE VIEW @extschema@.idem_stream_positions AS
SELECT stream, part, position, window_size,
       @extschema@.idem_stream_window_seen(window_state) AS window_seen,
       updated_at
FROM @extschema@.idem_streams;

-- Forgets a stream (every part, or one): the next idem_advance starts it
-- afresh and accepts any position. Returns how many parts were forgotten.
CREATE FUNCTION @extschema@.idem_reset_stream(stream text, part integer DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'idem_reset_stream'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

REVOKE ALL ON FUNCTION @extschema@.idem_advance(text, integer, bigint, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_position(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_reset_stream(text, integer) FROM PUBLIC;
REVOKE ALL ON @extschema@.idem_stream_positions FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- Statistics (needs pg_idem in shared_preload_libraries; see stats.cpp).
-- ---------------------------------------------------------------------------

-- What the functions answered, per database and scope, since the counters
-- were last reset. A NULL scope is a database's "other" row: its scopes
-- beyond pg_idem.stats_max_scopes. The cache counters stay 0: the duplicate
-- cache is not built yet.
CREATE FUNCTION @extschema@.idem_stats(
    OUT dbid oid,
    OUT scope text,
    OUT claims bigint,
    OUT duplicates bigint,
    OUT in_progress bigint,
    OUT takeovers bigint,
    OUT completions bigint,
    OUT failures bigint,
    OUT dead_letters bigint,
    OUT purged bigint,
    OUT reconciled bigint,
    OUT cache_hits bigint,
    OUT cache_misses bigint,
    OUT stats_since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'idem_stats'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW @extschema@.idem_stats AS
SELECT s.dbid, d.datname AS database, s.scope, s.claims, s.duplicates, s.in_progress,
       s.takeovers, s.completions, s.failures, s.dead_letters, s.purged, s.reconciled,
       s.cache_hits, s.cache_misses, s.stats_since
FROM @extschema@.idem_stats() s
LEFT JOIN pg_catalog.pg_database d ON d.oid OPERATOR(pg_catalog.=) s.dbid;

-- Sets every counter of every database back to zero.
CREATE FUNCTION @extschema@.idem_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'idem_stats_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION @extschema@.idem_stats() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_stats_reset() FROM PUBLIC;
REVOKE ALL ON @extschema@.idem_stats FROM PUBLIC;
