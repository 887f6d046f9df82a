-- pg_idem 0.1 install script, as released. Later versions add an upgrade
-- script each (src/pg_idem--A--B.sql); the install script of the current
-- version is this file followed by them (the Makefile builds it), so that a
-- new database and an upgraded one are the same.
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
