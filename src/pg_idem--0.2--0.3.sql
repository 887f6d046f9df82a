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
        USING HINT = pg_catalog.format('GRANT EXECUTE ON FUNCTION %1$s.idem_begin(text, text, interval, text, interval, boolean, interval), '
                                       '%1$s.idem_complete(text, text, uuid, jsonb), %1$s.idem_fail(text, text, uuid, text, boolean), '
                                       '%1$s.idem_release(text, text, uuid), %1$s.idem_lookup(text, text) TO %2$s;',
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
                                       ttl interval DEFAULT NULL)
RETURNS @extschema@.idem_claim
AS 'MODULE_PATHNAME', 'idem_begin_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

CREATE FUNCTION @extschema@.idem_complete(scope text, key text, token uuid,
                                          result jsonb DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_complete_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

CREATE FUNCTION @extschema@.idem_fail(scope text, key text, token uuid, error text,
                                      retryable boolean DEFAULT true)
RETURNS @extschema@.idem_status
AS 'MODULE_PATHNAME', 'idem_fail_0_3'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

-- The holder gives the claim back without spending an attempt: the key is
-- claimable at once, and the next claim binds its own fingerprint.
CREATE FUNCTION @extschema@.idem_release(scope text, key text, token uuid)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE SECURITY DEFINER;

-- The record of a key as idem_begin would see it, without writing,
-- waiting or counting: status 'absent' (none, or expired), 'in_progress',
-- 'completed', 'failed' or 'dead'; never a token.
CREATE FUNCTION @extschema@.idem_lookup(scope text, key text)
RETURNS @extschema@.idem_claim
AS 'MODULE_PATHNAME', 'idem_lookup'
LANGUAGE C STABLE PARALLEL RESTRICTED SECURITY DEFINER;

REVOKE ALL ON FUNCTION @extschema@.idem_begin(text, text, interval, text, interval, boolean, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_complete(text, text, uuid, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_fail(text, text, uuid, text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_release(text, text, uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_lookup(text, text) FROM PUBLIC;
