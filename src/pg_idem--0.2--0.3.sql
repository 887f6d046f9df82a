\echo Use "ALTER EXTENSION pg_idem UPDATE TO '0.3'" to load this file. \quit
-- pg_idem 0.2 -> 0.3: claims are held by a token, not by an attempt number.
-- The install script of 0.3 is pg_idem--0.1.sql followed by every upgrade
-- script (see the Makefile), so an upgraded database and a new one are the
-- same. Every name is schema-qualified, as in pg_idem--0.1.sql.
--
-- The C functions of 0.3's claim protocol have new symbols (idem_begin_0_3,
-- ...), as pg_stat_statements versions its own: the library's old symbols
-- refuse, so a database whose SQL is still 0.2 cannot complete a claim by
-- its attempt number with the 0.3 library.

-- Roles that could run the claim functions this script replaces are warned
-- so: a dropped function takes its grants with it, and granting them here
-- would record them as the extension's own initial privileges, which
-- pg_dump then leaves out. (A WARNING: an extension script runs with
-- client_min_messages raised to warning, which would hide a NOTICE.)
DO $$
DECLARE
    roles text := (
        SELECT pg_catalog.string_agg(DISTINCT a.grantee::pg_catalog.regrole::pg_catalog.text, ', ')
        FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
        WHERE p.pronamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
          AND p.proname OPERATOR(pg_catalog.=) ANY (ARRAY['idem_begin', 'idem_complete', 'idem_fail'])
          AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
          AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
          AND a.grantee OPERATOR(pg_catalog.<>) 0);
BEGIN
    IF roles IS NOT NULL THEN
        RAISE WARNING 'pg_idem 0.3 replaces idem_begin, idem_complete and idem_fail: the grants of % on them are not kept', roles
        USING HINT = pg_catalog.format('GRANT EXECUTE ON FUNCTION %1$s.idem_begin(text, text, interval, text, interval, boolean, interval, bigint), '
                                       '%1$s.idem_complete(text, text, uuid, jsonb, bigint), %1$s.idem_fail(text, text, uuid, text, boolean, bigint), '
                                       '%1$s.idem_release(text, text, uuid, bigint), %1$s.idem_lookup(text, text, bigint) TO %2$s;',
                                       '@extschema@', roles);
    END IF;
END
$$;

-- The claim's credential: a random token that only its acquirer is told
-- (NULL when the record is not in progress), and the lifetime the claim
-- asked for, which its completion or failure uses (NULL: the scope's).
ALTER TABLE @extschema@.idem_records
    ADD COLUMN claim_token uuid,
    ADD COLUMN ttl interval;
COMMENT ON COLUMN @extschema@.idem_records.claim_token IS
    'the holder''s token while in progress (idem_begin tells it only to the acquirer); NULL otherwise';
COMMENT ON COLUMN @extschema@.idem_records.ttl IS
    'lifetime the claim asked for (idem_begin''s ttl), used when it completes or fails; NULL: the scope''s';
COMMENT ON COLUMN @extschema@.idem_records.attempt_base IS
    'attempts that do not count against max_attempts: those before the last idem_retry, and released ones';

-- Claims in flight keep working across the update: each gets a token no
-- one knows, so its holder cannot complete it by attempt number any more;
-- it ends by its lease (a takeover, or reconciliation).
UPDATE @extschema@.idem_records SET claim_token = pg_catalog.gen_random_uuid()
WHERE status OPERATOR(pg_catalog.=) 'in_progress';

-- What idem_begin and idem_lookup answer, in the order of the new columns:
--   token: the claim's credential, only in an 'acquired' answer;
--   expires_at: when the record expires (a client-side cache must not
--   replay past it);
--   fingerprint: the stored fingerprint, in idem_lookup's answers and in
--   idem_begin's 'fingerprint_mismatch'.
ALTER TYPE @extschema@.idem_claim
    ADD ATTRIBUTE token uuid,
    ADD ATTRIBUTE expires_at timestamptz,
    ADD ATTRIBUTE fingerprint text;

DROP FUNCTION @extschema@.idem_begin(text, text, interval, text, interval, boolean);
DROP FUNCTION @extschema@.idem_complete(text, text, integer, jsonb);
DROP FUNCTION @extschema@.idem_fail(text, text, integer, text, boolean);

-- status: 'acquired' (you hold the key: do the work, then idem_complete,
-- idem_release or idem_fail with the token), 'in_progress', 'completed',
-- 'dead' or 'fingerprint_mismatch'.
CREATE FUNCTION @extschema@.idem_begin(scope text, key text,
                                       lease interval DEFAULT NULL,
                                       fingerprint text DEFAULT NULL,
                                       wait interval DEFAULT NULL,
                                       takeover_on_disconnect boolean DEFAULT NULL,
                                       ttl interval DEFAULT NULL,
                                       route bigint DEFAULT NULL)
RETURNS @extschema@.idem_claim
AS 'MODULE_PATHNAME', 'idem_begin_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.idem_complete(scope text, key text, token uuid,
                                          result jsonb DEFAULT NULL, route bigint DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_complete_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.idem_fail(scope text, key text, token uuid, error text,
                                      retryable boolean DEFAULT true, route bigint DEFAULT NULL)
RETURNS @extschema@.idem_status
AS 'MODULE_PATHNAME', 'idem_fail_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The holder gives the claim back without spending an attempt: the key is
-- claimable at once, and the next claim binds its own fingerprint.
CREATE FUNCTION @extschema@.idem_release(scope text, key text, token uuid,
                                         route bigint DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The record of a key as idem_begin would see it, without writing,
-- waiting or counting: status 'absent' (none, or expired), 'in_progress',
-- 'completed', 'failed' or 'dead'; never a token.
CREATE FUNCTION @extschema@.idem_lookup(scope text, key text, route bigint DEFAULT NULL)
RETURNS @extschema@.idem_claim
AS 'MODULE_PATHNAME', 'idem_lookup'
LANGUAGE C STABLE PARALLEL RESTRICTED;

-- Batches (src/pg/records/try_insert_many.cpp): idem_try_insert for many
-- keys of one scope in one call. Returns the positions in keys (1-based, as
-- WITH ORDINALITY numbers them) of the keys it recorded; a key repeated in
-- the batch is recorded once, at its first position. At most 10,000 keys.
-- routes: the route of each key (routes.cpp), one per key, in order.
CREATE FUNCTION @extschema@.idem_try_insert_many(scope text, keys text[],
                                                 ttl interval DEFAULT NULL,
                                                 routes bigint[] DEFAULT NULL)
RETURNS SETOF integer
AS 'MODULE_PATHNAME', 'idem_try_insert_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

REVOKE ALL ON FUNCTION @extschema@.idem_try_insert_many(text, text[], interval, bigint[]) FROM PUBLIC;

-- idem_advance for a batch of positions of one partition, in order, with
-- one update of its row (src/pg/messages/stream_positions.cpp). Returns the
-- indexes (1-based) of the positions that were new. At most 10,000.
CREATE FUNCTION @extschema@.idem_advance_many(stream text, part integer, positions bigint[],
                                              "window" integer DEFAULT 0)
RETURNS SETOF integer
AS 'MODULE_PATHNAME', 'idem_advance_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

REVOKE ALL ON FUNCTION @extschema@.idem_advance_many(text, integer, bigint[], integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_begin(text, text, interval, text, interval, boolean, interval, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_complete(text, text, uuid, jsonb, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_fail(text, text, uuid, text, boolean, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_release(text, text, uuid, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_lookup(text, text, bigint) FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- Scopes as a security boundary (src/pg/scopes/scope_grants.cpp): a role uses a
-- scope, or the stream of that name, only if the owner granted it to the
-- role (or a role it has the privileges of, or PUBLIC).
-- ---------------------------------------------------------------------------

-- Grants name roles, as pg_hba.conf does, so that they survive pg_dump
-- and a restore into a cluster whose roles have other OIDs; PUBLIC is
-- 'public', which no role can be named.
CREATE TABLE @extschema@.idem_scope_grants (
    scope      text COLLATE "C" NOT NULL,
    grantee    text NOT NULL,
    granted_by text NOT NULL,
    granted_at timestamptz NOT NULL,
    PRIMARY KEY (scope, grantee)
);
COMMENT ON TABLE @extschema@.idem_scope_grants IS
    'which roles may use each scope (and stream); written by idem_grant and idem_revoke';
REVOKE ALL ON TABLE @extschema@.idem_scope_grants FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_scope_grants', '');

-- Any change, by idem_grant or in SQL, reaches every backend's cache of
-- answers at commit.
CREATE FUNCTION @extschema@.idem_scope_grants_changed() RETURNS trigger
AS 'MODULE_PATHNAME', 'idem_scope_grants_changed'
LANGUAGE C;
REVOKE ALL ON FUNCTION @extschema@.idem_scope_grants_changed() FROM PUBLIC;
CREATE TRIGGER idem_scope_grants_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.idem_scope_grants
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.idem_scope_grants_changed();
ALTER TABLE @extschema@.idem_scope_grants ENABLE ALWAYS TRIGGER idem_scope_grants_changed;

-- Only the owner of pg_idem (or a superuser) grants and revokes: both
-- check it, whoever has EXECUTE. role: a role's name, or PUBLIC.
CREATE FUNCTION @extschema@.idem_grant(scope text, role text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_grant'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION @extschema@.idem_revoke(scope text, role text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_revoke'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.idem_grant(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_revoke(text, text) FROM PUBLIC;

-- Whether the current user may use a scope: the filter of the views. Open
-- to PUBLIC: it only ever answers about the caller.
CREATE FUNCTION @extschema@.idem_may_use_scope(scope text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_may_use_scope'
LANGUAGE C STABLE PARALLEL RESTRICTED;

-- Internal: the same for a given role, in pg_idem's own statements, which
-- run as the owner.
CREATE FUNCTION @extschema@.idem_scope_usable_by(scope text, role oid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_scope_usable_by'
LANGUAGE C STABLE PARALLEL RESTRICTED;
REVOKE ALL ON FUNCTION @extschema@.idem_scope_usable_by(text, oid) FROM PUBLIC;

-- The functions that use pg_idem's tables act for their caller: SECURITY
-- INVOKER, and they switch to the owner themselves once they know who
-- called (src/pg/as_owner.hpp). As SECURITY DEFINER they could only see the
-- session's user, which under autovacuum or a superuser's ANALYZE is a
-- superuser whoever wrote the expression being run.
ALTER FUNCTION @extschema@.idem_try_insert(text, text, interval) SECURITY INVOKER;
ALTER FUNCTION @extschema@.idem_reconcile(text, integer) SECURITY INVOKER;
ALTER FUNCTION @extschema@.idem_retry(text, text) SECURITY INVOKER;
ALTER FUNCTION @extschema@.idem_forget(text, text) SECURITY INVOKER;
ALTER FUNCTION @extschema@.idem_purge(integer) SECURITY INVOKER;
ALTER FUNCTION @extschema@.idem_purge_status() SECURITY INVOKER;
ALTER FUNCTION @extschema@.idem_advance(text, integer, bigint, integer) SECURITY INVOKER;
ALTER FUNCTION @extschema@.idem_position(text, integer) SECURITY INVOKER;
ALTER FUNCTION @extschema@.idem_reset_stream(text, integer) SECURITY INVOKER;
-- idem_stats and idem_position now read the caller's grants (SPI, as the
-- owner): only in the leader of a parallel query.
ALTER FUNCTION @extschema@.idem_stats() PARALLEL RESTRICTED;
ALTER FUNCTION @extschema@.idem_position(text, integer) PARALLEL RESTRICTED;

-- The views show only the scopes (and streams) the viewer may use. As
-- security barriers: a viewer's own function in a query on them never sees
-- a row before the filter has.
CREATE OR REPLACE VIEW @extschema@.idem_in_flight WITH (security_barrier) AS
SELECT r.scope, r.key, r.attempts AS attempt, r.recorded_at AS claimed_at,
       pg_catalog.now() OPERATOR(pg_catalog.-) r.recorded_at AS lease_age,
       r.lease_expires_at,
       r.lease_expires_at OPERATOR(pg_catalog.<=) pg_catalog.now() AS lease_expired,
       r.holder_pid,
       EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a
               WHERE a.pid OPERATOR(pg_catalog.=) r.holder_pid
                 AND a.backend_start OPERATOR(pg_catalog.=) r.holder_started_at) AS holder_alive
FROM @extschema@.idem_records r
WHERE r.status OPERATOR(pg_catalog.=) 'in_progress'
  AND @extschema@.idem_may_use_scope(r.scope);

CREATE OR REPLACE VIEW @extschema@.idem_dead_letters WITH (security_barrier) AS
SELECT r.scope, r.key, r.attempts, r.last_error, r.recorded_at AS died_at, r.expires_at
FROM @extschema@.idem_records r
WHERE r.status OPERATOR(pg_catalog.=) 'dead'
  AND @extschema@.idem_may_use_scope(r.scope);

CREATE OR REPLACE VIEW @extschema@.idem_stream_positions WITH (security_barrier) AS
SELECT stream, part, position, window_size,
       @extschema@.idem_stream_window_seen(window_state) AS window_seen,
       updated_at
FROM @extschema@.idem_streams
WHERE @extschema@.idem_may_use_scope(stream);

-- Secure by default: a scope no one was granted is the owner's alone. So
-- that a deployment keeps working across the update, every scope and
-- stream that already has records or settings is granted to PUBLIC, as
-- every scope was usable by every role with EXECUTE before; revoke what
-- should be closed.
DO $$
DECLARE
    opened bigint;
BEGIN
    INSERT INTO @extschema@.idem_scope_grants (scope, grantee, granted_by, granted_at)
    SELECT DISTINCT s.scope, 'public', CURRENT_USER, pg_catalog.now()
    FROM (SELECT r.scope FROM @extschema@.idem_records r
          UNION SELECT c.scope FROM @extschema@.idem_scopes c
          UNION SELECT t.stream FROM @extschema@.idem_streams t) s;
    GET DIAGNOSTICS opened = ROW_COUNT;
    IF opened > 0 THEN
        RAISE WARNING 'pg_idem 0.3: the % scopes and streams in use were granted to PUBLIC, as 0.2 let every role with EXECUTE use them', opened
        USING HINT = 'See them with SELECT * FROM @extschema@.idem_scope_grants; grant each to its roles with idem_grant(scope, role), then idem_revoke(scope, ''public'').';
    END IF;
END
$$;

-- ---------------------------------------------------------------------------
-- pg_upgrade (src/pg/scopes/scopes.cpp, src/pg/claims/reconcile.cpp). pg_upgrade refuses
-- a table with a regprocedure column: function OIDs are not kept across
-- the upgrade. So a scope keeps its reconciliation function by its
-- schema-qualified signature, which survives the upgrade (and pg_dump),
-- and beside it the OID it was bound to and the cluster where that OID
-- means it (pg_control's system identifier). In that cluster the function
-- is called by OID, so one dropped and replaced by another of the same name
-- is refused, as before. In another (after pg_upgrade or a restore) it is
-- found by its signature, and idem_reconcile binds it there again.
-- ---------------------------------------------------------------------------

ALTER TABLE @extschema@.idem_scopes
    ADD COLUMN reconcile_function_oid oid,
    ADD COLUMN reconcile_bound_in bigint;

-- Found by signature until the first idem_reconcile binds it (the system
-- identifier is not readable in SQL without superuser rights).
ALTER TABLE @extschema@.idem_scopes ALTER COLUMN reconcile_function TYPE text
    USING (pg_catalog.pg_identify_object('pg_catalog.pg_proc'::pg_catalog.regclass,
                                         reconcile_function, 0)).identity;

-- ---------------------------------------------------------------------------
-- Citus (src/pg/records/routes.cpp, routed_records.cpp, docs/citus.md): a
-- record may carry its route, the distribution value of the business row it
-- protects (the account id of "add points to account A"). On one node the
-- route is stored and changes nothing else. Once idem_distribute has made
-- idem_records a distributed table colocated with the business table, every
-- call must give the route, and every read and write of a record is SQL that
-- Citus routes to the shard of that route: the record and the business row
-- commit together on one worker, and move together.
-- ---------------------------------------------------------------------------

ALTER TABLE @extschema@.idem_records ADD COLUMN route bigint;
COMMENT ON COLUMN @extschema@.idem_records.route IS
    'the distribution value of the business row the record protects (the calls'' route); NULL when none was given';

-- With a route: overloads of the 0.1 functions, which stay as they are
-- (and keep their grants). No default for ttl here, so that a call with
-- three arguments is never ambiguous: idem_try_insert(scope, key, NULL,
-- route) takes the scope's ttl.
CREATE FUNCTION @extschema@.idem_try_insert(scope text, key text, ttl interval, route bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_try_insert'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.idem_try_insert(text, text, interval, bigint) FROM PUBLIC;

CREATE FUNCTION @extschema@.idem_retry(scope text, key text, route bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_retry'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.idem_retry(text, text, bigint) FROM PUBLIC;

CREATE FUNCTION @extschema@.idem_forget(scope text, key text, route bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_forget'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION @extschema@.idem_forget(text, text, bigint) FROM PUBLIC;

-- A change of a scope's settings reaches every backend's cache at commit,
-- also on a Citus worker, where idem_configure's own invalidation does not
-- run (src/pg/scopes/scope_grants.cpp).
CREATE TRIGGER idem_scopes_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.idem_scopes
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.idem_scope_grants_changed();
ALTER TABLE @extschema@.idem_scopes ENABLE ALWAYS TRIGGER idem_scopes_changed;

-- Makes idem_records a Citus distributed table colocated with the business
-- table colocate_with, distributed by route, and the scopes' settings and
-- grants reference tables, which every node reads locally (docs/citus.md).
-- Run on the coordinator, by the owner of pg_idem or a superuser, before
-- records exist without a route. The stream positions stay on the
-- coordinator: a position orders a partition, not a business row.
CREATE FUNCTION @extschema@.idem_distribute(colocate_with regclass)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    records pg_catalog.regclass := '@extschema@.idem_records'::pg_catalog.regclass;
    dist_column pg_catalog.text;
    dist_type pg_catalog.regtype;
    method "char";
    reshape pg_catalog.text;
    failed pg_catalog.text;
BEGIN
    IF NOT pg_catalog.pg_has_role(CURRENT_USER,
                                  (SELECT extowner FROM pg_catalog.pg_extension
                                   WHERE extname = 'pg_idem'), 'USAGE') THEN
        RAISE EXCEPTION 'idem_distribute: only the owner of pg_idem may distribute its records'
        USING ERRCODE = '42501';
    END IF;
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RAISE EXCEPTION 'idem_distribute: Citus is not installed in this database'
        USING ERRCODE = '55000',
              HINT = 'Preload citus before pg_idem, CREATE EXTENSION citus, and distribute the business table first.';
    END IF;
    IF colocate_with IS NULL THEN
        RAISE EXCEPTION 'idem_distribute: colocate_with must not be NULL' USING ERRCODE = '22004';
    END IF;
    EXECUTE 'SELECT p.partmethod, a.attname::text, a.atttypid::regtype
             FROM pg_catalog.pg_dist_partition p
             LEFT JOIN pg_catalog.pg_attribute a
               ON a.attrelid = p.logicalrelid
              AND a.attname = pg_catalog.column_to_column_name(p.logicalrelid, p.partkey)
             WHERE p.logicalrelid = $1'
    INTO method, dist_column, dist_type USING colocate_with;
    IF method IS NULL OR method <> 'h' THEN
        RAISE EXCEPTION 'idem_distribute: % is not a hash-distributed Citus table', colocate_with
        USING ERRCODE = '22023',
              HINT = 'Distribute it with create_distributed_table(table, column) first.';
    END IF;
    IF dist_type NOT IN ('smallint'::regtype, 'integer'::regtype, 'bigint'::regtype) THEN
        RAISE EXCEPTION 'idem_distribute: % is distributed by %, of type %; a route is a bigint',
                        colocate_with, dist_column, dist_type
        USING ERRCODE = '42804',
              HINT = 'Records can follow a table distributed by an integer column (smallint, integer or bigint).';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = records) THEN
        RAISE EXCEPTION 'idem_distribute: pg_idem''s records are distributed already'
        USING ERRCODE = '55000';
    END IF;
    IF EXISTS (SELECT 1 FROM @extschema@.idem_records WHERE route IS NULL) THEN
        RAISE EXCEPTION 'idem_distribute: records without a route exist'
        USING ERRCODE = '55000',
              DETAIL = 'A record must live in the shard of its route; these have none.',
              HINT = 'Let them expire and purge them (idem_purge), or forget them, then distribute.';
    END IF;
    -- Citus requires the distribution column in every unique index, and
    -- refuses row triggers: the duplicate cache's triggers go (the cache
    -- is off for distributed records, src/pg/cache/duplicate_cache.cpp).
    -- The same on every worker's own idem_records, which Citus leaves as
    -- CREATE EXTENSION made it (an extension's table), so that it has the
    -- shards' shape there too.
    reshape := pg_catalog.format(
        'ALTER TABLE %1$s.idem_records ALTER COLUMN route SET NOT NULL, '
        'DROP CONSTRAINT idem_records_pkey, '
        'ADD CONSTRAINT idem_records_pkey PRIMARY KEY (route, key_id); '
        'DROP TRIGGER IF EXISTS idem_records_changing ON %1$s.idem_records; '
        'DROP TRIGGER IF EXISTS idem_records_changed ON %1$s.idem_records; '
        'DROP TRIGGER IF EXISTS idem_records_truncating ON %1$s.idem_records',
        '@extschema@');
    EXECUTE reshape;
    SELECT pg_catalog.string_agg(w.nodename || ':' || w.nodeport || ': ' || w.result, '; ')
    INTO failed
    FROM pg_catalog.run_command_on_workers(reshape) w
    WHERE NOT w.success;
    IF failed IS NOT NULL THEN
        RAISE EXCEPTION 'idem_distribute: pg_idem''s records could not be reshaped on every worker'
        USING ERRCODE = '55000', DETAIL = failed;
    END IF;
    PERFORM pg_catalog.create_distributed_table(records, 'route',
                                                colocate_with => colocate_with::text);
    -- Their statement triggers invalidate each node's caches when the
    -- coordinator changes a placement, which Citus allows only so.
    PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
    PERFORM pg_catalog.create_reference_table('@extschema@.idem_scopes'::pg_catalog.regclass);
    PERFORM pg_catalog.create_reference_table('@extschema@.idem_scope_grants'::pg_catalog.regclass);
    -- The rows copied into the shards stay on the coordinator's disk,
    -- invisible, until truncated.
    PERFORM pg_catalog.truncate_local_data_after_distributing_table(t)
    FROM pg_catalog.unnest(ARRAY[records, '@extschema@.idem_scopes'::pg_catalog.regclass,
                                 '@extschema@.idem_scope_grants'::pg_catalog.regclass]) t;
END
$$;
REVOKE ALL ON FUNCTION @extschema@.idem_distribute(regclass) FROM PUBLIC;

-- idem_versioned_update(t, jsonb_build_object(...), v, jsonb_build_object(...))
-- without building the two objects: its planner support function rewrites
-- such a call, when nothing can tell the difference, into one of
-- idem_versioned_update_fields with the keys and values as arguments
-- (src/pg/user_tables/built_objects.hpp), its arguments in the order
-- written. Not for calling by hand.
CREATE FUNCTION @extschema@.idem_versioned_update_fields(VARIADIC arguments "any")
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_versioned_update_fields'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.idem_versioned_update_support(internal)
RETURNS internal
AS 'MODULE_PATHNAME', 'idem_versioned_update_support'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
REVOKE ALL ON FUNCTION @extschema@.idem_versioned_update_support(internal) FROM PUBLIC;

ALTER FUNCTION @extschema@.idem_versioned_update(regclass, jsonb, bigint, jsonb, name)
    SUPPORT @extschema@.idem_versioned_update_support;

-- The same for idem_try_insert_row(t, jsonb_build_object(...)).
CREATE FUNCTION @extschema@.idem_try_insert_row_fields(VARIADIC arguments "any")
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_try_insert_row_fields'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.idem_try_insert_row_support(internal)
RETURNS internal
AS 'MODULE_PATHNAME', 'idem_try_insert_row_support'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
REVOKE ALL ON FUNCTION @extschema@.idem_try_insert_row_support(internal) FROM PUBLIC;

ALTER FUNCTION @extschema@.idem_try_insert_row(regclass, jsonb)
    SUPPORT @extschema@.idem_try_insert_row_support;
