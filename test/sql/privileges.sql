-- The functions that read and write pg_idem's tables run as the tables'
-- owner: SECURITY INVOKER, switching to the owner once they know their
-- caller (src/pg/as_owner.hpp). A role with EXECUTE, a grant of its scopes
-- and no privilege on the tables uses every one of them, and is itself
-- again after each call, after an error that an exception block catches,
-- and after an aborted transaction.

-- Which of the extension's functions are SECURITY DEFINER (none), and
-- which PUBLIC may execute. Only the functions that touch no pg_idem table,
-- or only the caller's own tables, and idem_may_use_scope, which answers
-- only about its caller, are open to PUBLIC.
SELECT p.oid::regprocedure AS function, p.prosecdef AS security_definer,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
FROM pg_proc p
JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_idem')
  AND p.prokind = 'f'
ORDER BY p.prosecdef DESC, public_execute, p.proname COLLATE "C", p.pronargs;

CREATE ROLE regress_idem_worker;
GRANT EXECUTE ON FUNCTION idem_try_insert(text, text, interval),
    idem_begin(text, text, interval, text, interval, boolean, interval, bigint),
    idem_complete(text, text, uuid, jsonb, bigint),
    idem_fail(text, text, uuid, text, boolean, bigint),
    idem_release(text, text, uuid, bigint), idem_lookup(text, text, bigint),
    idem_retry(text, text), idem_forget(text, text),
    idem_reconcile(text, integer), idem_purge(integer), idem_purge_status(),
    idem_advance(text, integer, bigint, integer), idem_position(text, integer),
    idem_reset_stream(text, integer)
TO regress_idem_worker;
SELECT idem_grant('rights', 'regress_idem_worker') AS scope_granted;

SET ROLE regress_idem_worker;
SELECT count(*) FROM idem_records;
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert('rights', 'a') AS first, idem_try_insert('rights', 'a') AS again;
SELECT status, attempt, token AS b_token FROM idem_begin('rights', 'b') \gset
\echo :status :attempt
SELECT idem_complete('rights', 'b', :'b_token', '{"ok": true}');
SELECT status, result FROM idem_begin('rights', 'b');
SELECT status, result FROM idem_lookup('rights', 'b');
SELECT status, attempt, token AS c_token FROM idem_begin('rights', 'c') \gset
\echo :status :attempt
SELECT idem_release('rights', 'c', :'c_token');
SELECT status, attempt, token AS c_token FROM idem_begin('rights', 'c') \gset
\echo :status :attempt
SELECT idem_fail('rights', 'c', :'c_token', 'gave up', retryable => false) AS failed_to;
SELECT idem_retry('rights', 'c') AS retried;
SELECT status, attempt FROM idem_begin('rights', 'c', lease => '1 microsecond');
SELECT idem_try_insert('rights', 'short-lived', ttl => '1 microsecond') AS short_lived;
SELECT pg_sleep(0.01);
SELECT * FROM idem_reconcile('rights');
SELECT idem_forget('rights', 'a') AS forgotten;
SELECT idem_try_insert('rights', 'a') AS new_again;
SELECT idem_purge() AS purged;
SELECT backlog_rows FROM idem_purge_status();
SELECT idem_advance('rights', 0, 5) AS advanced, idem_advance('rights', 0, 5) AS replay;
SELECT idem_position('rights', 0) AS position;
SELECT idem_reset_stream('rights') AS parts_reset;
SELECT current_user;

-- An error raised while acting as the owner, caught by an exception block.
DO $$
BEGIN
    PERFORM idem_complete('rights', 'b', gen_random_uuid(), NULL);
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'caught %; current_user is %', SQLSTATE, current_user;
END $$;
SELECT current_user;
-- An aborted transaction.
BEGIN;
SELECT idem_complete('rights', 'b', gen_random_uuid(), NULL);
ROLLBACK;
SELECT current_user, idem_try_insert('rights', 'd') AS after_abort;
-- The tables are still closed to the role.
SELECT count(*) FROM idem_records;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

SELECT key, status, attempts FROM idem_records WHERE scope = 'rights' ORDER BY key;
SELECT idem_revoke('rights', 'regress_idem_worker') AS scope_revoked;

DROP OWNED BY regress_idem_worker;
DROP ROLE regress_idem_worker;
DELETE FROM idem_records WHERE scope = 'rights';
