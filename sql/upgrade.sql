-- pg_idem 0.1 -> 0.2: ALTER EXTENSION UPDATE keeps the data, and gives
-- exactly the objects, privileges and function properties of a new
-- install; a database still on 0.1's SQL keeps working with the new
-- library for what 0.1 had, and says what to do for the rest.

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
SELECT count(*) AS members_of_a_new_install FROM fresh;

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
