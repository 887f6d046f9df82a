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

-- The managed dedup table: one row per (scope, key), found through a
-- 16-byte digest so that keys of any length (up to 1 MB) can be indexed.
-- Scope and key are stored whole and compared on every digest match; see
-- src/core/record_key.hpp. Only pg_idem's functions write it.
CREATE TABLE @extschema@.idem_records (
    key_digest       bytea NOT NULL,
    scope            text NOT NULL,
    key              text NOT NULL,
    status           @extschema@.idem_status NOT NULL,
    attempts         integer NOT NULL DEFAULT 1,
    recorded_at      timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    lease_expires_at timestamptz,
    holder_pid       integer,
    fingerprint      text,
    result           jsonb,
    last_error       text,
    CONSTRAINT idem_records_pkey PRIMARY KEY (key_digest)
);

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
