\echo Use "ALTER EXTENSION pg_idem UPDATE TO '0.2'" to load this file. \quit
-- pg_idem 0.1 -> 0.2. The install script of 0.2 is pg_idem--0.1.sql followed
-- by this file (see the Makefile), so an upgraded database and a new one
-- are the same. Every name is schema-qualified, as in pg_idem--0.1.sql.

-- idem_configure records the calling role as configured_by (the role its
-- reconciliation function runs as). As SECURITY DEFINER it could only see
-- the outer user, which inside another SECURITY DEFINER function or a
-- maintenance command (ANALYZE running an index expression) is someone
-- else, even a superuser. It is now SECURITY INVOKER and writes idem_scopes
-- as the table's owner itself (src/pg/scopes.cpp).
ALTER FUNCTION @extschema@.idem_configure(text, interval, interval, integer, text, regprocedure, boolean)
    SECURITY INVOKER;

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

-- ---------------------------------------------------------------------------
-- The duplicate cache (needs pg_idem in shared_preload_libraries and
-- pg_idem.cache_size > 0; README "Duplicate cache").
-- ---------------------------------------------------------------------------

-- The duplicate cache (src/pg/duplicate_cache.cpp) must forget a key whose
-- record changes or goes away. pg_idem's own writes tell it directly; these
-- triggers, one C function, catch the rest (an operator's UPDATE, DELETE or
-- TRUNCATE in SQL, also through a parent table, and a replicated one):
--   idem_records_changed    forgets each changed key after its change;
--   idem_records_changing   before a row changes, keeps the changing
--                           transaction off the cache until it ends (the
--                           first trigger's events wait for the end of the
--                           statement);
--   idem_records_truncating makes a TRUNCATE forget the whole table when
--                           it commits (no object access hook sees a
--                           replicated one).
-- ALWAYS: also when session_replication_role is replica. The cache keeps
-- no record of a table that lacks any of them as defined here, enabled
-- ALWAYS, and creating, altering or dropping one forgets the whole table.
-- The WHEN clauses spare servers without the cache (the default) the
-- trigger calls and the queued after-trigger event of every update.
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
CREATE TRIGGER idem_records_changing BEFORE UPDATE OR DELETE ON @extschema@.idem_records
    FOR EACH ROW WHEN (@extschema@.idem_cache_enabled())
    EXECUTE FUNCTION @extschema@.idem_records_changed();
ALTER TABLE @extschema@.idem_records ENABLE ALWAYS TRIGGER idem_records_changing;
CREATE TRIGGER idem_records_truncating BEFORE TRUNCATE ON @extschema@.idem_records
    FOR EACH STATEMENT WHEN (@extschema@.idem_cache_enabled())
    EXECUTE FUNCTION @extschema@.idem_records_changed();
ALTER TABLE @extschema@.idem_records ENABLE ALWAYS TRIGGER idem_records_truncating;
REVOKE ALL ON FUNCTION @extschema@.idem_records_changed() FROM PUBLIC;
