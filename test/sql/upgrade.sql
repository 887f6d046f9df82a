-- pg_idem 0.1 -> 0.3 and 0.2 -> 0.3: ALTER EXTENSION UPDATE keeps the
-- data, and gives exactly the objects, columns, privileges and function
-- properties of a new install; a database still on older SQL keeps working
-- with the new library for idem_try_insert, and says what to do for the
-- rest (the claim protocol of 0.2 and older is refused: it completed claims
-- by attempt number, which anyone could read).

-- The extension's members, with their privileges and function properties.
CREATE TEMP VIEW members AS
SELECT pg_describe_object(d.classid, d.objid, d.objsubid) AS object,
       coalesce(p.prosecdef::text || ' ' || p.provolatile::text || ' ' || p.proparallel::text
                || ' ' || coalesce(p.proacl::text, ''), c.relacl::text, '') AS properties
FROM pg_depend d
LEFT JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
LEFT JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_idem');
CREATE TEMP TABLE fresh AS SELECT * FROM members;
-- Counted without the types that only PostgreSQL 16 and later make members
-- (the row type of each table and view, and every array type: 20 more), so
-- that the count is the same on every version; the comparisons below
-- between a new install and an upgrade hold with them.
SELECT count(*) AS members_of_a_new_install
FROM pg_depend d
LEFT JOIN pg_type t ON d.classid = 'pg_type'::regclass AND t.oid = d.objid
LEFT JOIN pg_class c ON c.oid = t.typrelid
WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_idem')
  AND NOT coalesce(t.typcategory = 'A' OR c.relkind IN ('r', 'v'), false);
-- The columns of its tables and of idem_claim, in order.
CREATE TEMP VIEW columns AS
SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod) AS type
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
WHERE c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'idem\_%'
  AND c.relkind IN ('r', 'c') AND a.attnum > 0 AND NOT a.attisdropped;
CREATE TEMP TABLE fresh_columns AS SELECT * FROM columns;
SELECT relname, count(*) AS columns FROM fresh_columns GROUP BY relname ORDER BY relname;

DROP EXTENSION pg_idem;
CREATE EXTENSION pg_idem VERSION '0.1';
SELECT idem_try_insert('upgrade', 'kept') AS recorded_under_0_1;
-- 0.1 has no trigger on idem_records to tell the duplicate cache of a
-- DELETE in SQL, so nothing of it is cached: the key is new afterwards.
SELECT idem_try_insert('upgrade', 'deleted') AS new_key;
SELECT idem_try_insert('upgrade', 'deleted') AS dup, idem_try_insert('upgrade', 'deleted') AS dup_again;
DELETE FROM idem_records WHERE key = 'deleted';
SELECT idem_try_insert('upgrade', 'deleted') AS new_after_delete;
SELECT status FROM idem_begin('upgrade', 'claim');
-- What 0.2 added is refused with a hint, never half done.
SELECT idem_configure('upgrade', ttl => '1 hour');
SELECT count(*) AS scopes_written FROM idem_scopes;
-- (0.1 has no idem_advance at all.)
SELECT idem_advance('upgrade', 0, 1);

ALTER EXTENSION pg_idem UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'pg_idem';
SELECT idem_try_insert('upgrade', 'kept') AS still_a_duplicate;
SELECT (idem_configure('upgrade', ttl => '1 hour')).scope AS configured;
SELECT idem_advance('upgrade', 0, 1) AS streams_work;

CREATE TEMP TABLE upgraded AS SELECT * FROM members;
-- Both differences must be empty.
(SELECT 'only in a new install' AS where_, * FROM fresh EXCEPT SELECT 'only in a new install', * FROM upgraded)
UNION ALL
(SELECT 'only after the update', * FROM upgraded EXCEPT SELECT 'only after the update', * FROM fresh);
(SELECT 'only in a new install' AS where_, * FROM fresh_columns EXCEPT SELECT 'only in a new install', * FROM columns)
UNION ALL
(SELECT 'only after the update', * FROM columns EXCEPT SELECT 'only after the update', * FROM fresh_columns);

-- 0.2 -> 0.3, with a consumer role, a completed record and a claim in
-- flight.
DROP TABLE upgraded;
DROP EXTENSION pg_idem;
CREATE EXTENSION pg_idem VERSION '0.2';
CREATE ROLE regress_idem_consumer;
GRANT EXECUTE ON FUNCTION idem_begin(text, text, interval, text, interval, boolean),
    idem_complete(text, text, integer, jsonb), idem_try_insert(text, text, interval)
TO regress_idem_consumer;
SELECT idem_try_insert('upgrade', 'done') AS recorded_under_0_2;
-- The 0.3 library refuses 0.2's claim functions, with what to do.
SELECT * FROM idem_begin('upgrade', 'claim');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_complete('upgrade', 'claim', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_fail('upgrade', 'claim', 1, 'x');
\echo :LAST_ERROR_SQLSTATE
-- A claim in flight, as 0.2 left it (written here by hand: the library
-- no longer starts 0.2 claims).
SELECT idem_try_insert('upgrade', 'in-flight');
UPDATE idem_records SET status = 'in_progress', lease_expires_at = now() + interval '1 hour',
                        holder_pid = 1, holder_started_at = now()
WHERE key = 'in-flight';
-- A scope with a reconciliation function as 0.2 kept it: a regprocedure,
-- which pg_upgrade refuses (function OIDs are not kept). Written by hand,
-- as the 0.3 library configures only 0.3's scopes.
CREATE FUNCTION upgrade_happened(scope text, key text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
INSERT INTO idem_scopes (scope, reconcile_function, configured_by, configured_at)
VALUES ('upgrade-rec', 'upgrade_happened(text,text)', current_user::regrole, now());
SELECT idem_configure('upgrade-rec', ttl => '1 hour');
\echo :LAST_ERROR_SQLSTATE
-- The update says which roles lose their grants on the replaced functions,
-- and how to grant the new ones.
ALTER EXTENSION pg_idem UPDATE TO '0.3';
SELECT idem_try_insert('upgrade', 'done') AS still_a_duplicate;
-- The claim in flight got a token no one knows: its 0.2 holder cannot
-- complete it, and it ends by its lease.
SELECT status, claim_token IS NOT NULL AS held_by_an_unknown_token FROM idem_records WHERE key = 'in-flight';
SELECT status, attempt, token FROM idem_begin('upgrade', 'in-flight');
SELECT idem_complete('upgrade', 'in-flight', NULL);
\echo :LAST_ERROR_SQLSTATE
-- The update keeps the reconciliation function by its signature, and
-- idem_reconcile finds and calls it.
SELECT scope, reconcile_function, pg_typeof(reconcile_function) FROM idem_scopes
WHERE scope = 'upgrade-rec';
SELECT status FROM idem_begin('upgrade-rec', 'r', lease => '1 microsecond');
SELECT scope, key, outcome FROM idem_reconcile('upgrade-rec');
SET ROLE regress_idem_consumer;
SELECT status FROM idem_begin('upgrade', 'after');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert('upgrade', 'done') AS consumer_keeps_idem_try_insert;
-- Scopes in use were granted to PUBLIC (with a WARNING above); a new one
-- is the owner's until granted.
SELECT idem_try_insert('new-after-update', 'k');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT scope, grantee FROM idem_scope_grants ORDER BY scope;
DROP OWNED BY regress_idem_consumer;
DROP ROLE regress_idem_consumer;
CREATE TEMP TABLE upgraded AS SELECT * FROM members;
(SELECT 'only in a new install' AS where_, * FROM fresh EXCEPT SELECT 'only in a new install', * FROM upgraded)
UNION ALL
(SELECT 'only after the update', * FROM upgraded EXCEPT SELECT 'only after the update', * FROM fresh);
(SELECT 'only in a new install' AS where_, * FROM fresh_columns EXCEPT SELECT 'only in a new install', * FROM columns)
UNION ALL
(SELECT 'only after the update', * FROM columns EXCEPT SELECT 'only after the update', * FROM fresh_columns);

-- The files after this one get a new install.
DROP EXTENSION pg_idem;
CREATE EXTENSION pg_idem;
DROP FUNCTION upgrade_happened(text, text);
