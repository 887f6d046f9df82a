-- idem_reconcile and the operator tools: idem_in_flight, idem_dead_letters,
-- idem_retry, idem_forget.

-- The token of a claim in progress, read from the table as a superuser
-- may: these tests are about other things than who holds a claim
-- (test/sql/claim.sql carries tokens as an application does).
CREATE OR REPLACE FUNCTION regress_token(s text, k text) RETURNS uuid
LANGUAGE sql AS $$ SELECT claim_token FROM idem_records WHERE scope = s AND key = k $$;

-- The business system knows which charges happened.
CREATE TABLE charges (order_id text PRIMARY KEY);
INSERT INTO charges VALUES ('o-2');
CREATE FUNCTION charge_happened(scope text, key text) RETURNS boolean LANGUAGE sql AS
$$ SELECT CASE WHEN key = 'o-3' THEN NULL   -- the payment API is down: don't know
               ELSE EXISTS (SELECT 1 FROM charges WHERE order_id = key) END $$;
SELECT scope FROM idem_configure('pay', max_attempts => 2,
                                 reconcile_function => 'charge_happened(text,text)');

-- Four claims whose holders crashed: their leases have run out. (Scope
-- "other" has no reconciler: reconciliation does not look at it.)
SELECT key, status, attempt
FROM unnest(ARRAY['o-1', 'o-2', 'o-3']) AS k(key),
     LATERAL idem_begin('pay', k.key, lease => '1 microsecond');
SELECT status FROM idem_begin('other', 'x', lease => '1 microsecond');
-- ...and one live claim, which reconciliation must not touch.
SELECT status FROM idem_begin('pay', 'o-4', lease => '1 hour');

SELECT scope, key, attempt, lease_expired, holder_alive, holder_pid = pg_backend_pid() AS mine
FROM idem_in_flight ORDER BY scope, key;

SELECT * FROM idem_reconcile() ORDER BY scope, key;
SELECT scope, key, status, attempts, last_error FROM idem_records ORDER BY scope, key;
-- Reconciling again changes nothing new; max_rows and scope narrow it.
SELECT * FROM idem_reconcile('pay', 1);
SELECT * FROM idem_reconcile('nothing-here');

-- What the states mean to the next consumer.
SELECT key, status, attempt FROM unnest(ARRAY['o-1', 'o-2']) AS k(key),
       LATERAL idem_begin('pay', k.key);
-- o-1 failed and was claimed again (attempt 2); failing it uses up the attempts.
SELECT idem_fail('pay', 'o-1', regress_token('pay', 'o-1'), 'card declined');
SELECT scope, key, attempts, last_error FROM idem_dead_letters;

-- Requeue the dead letter: attempts keep counting (fencing), with 2 more.
SELECT idem_retry('pay', 'o-1') AS requeued, idem_retry('pay', 'o-2') AS not_dead;
SELECT status, attempt FROM idem_begin('pay', 'o-1');
SELECT count(*) FROM idem_dead_letters;

-- A retried dead letter lives a full TTL from the retry: one whose TTL had
-- run out is not purged (with its attempt count) before its next claim.
SELECT scope FROM idem_configure('short', ttl => '1 minute');
SELECT status FROM idem_begin('short', 'd');
SELECT idem_fail('short', 'd', regress_token('short', 'd'), 'gave up', false);
UPDATE idem_records SET recorded_at = recorded_at - interval '2 hours',
       expires_at = expires_at - interval '2 hours' WHERE scope = 'short';
SELECT idem_retry('short', 'd') AS requeued;
SELECT expires_at - recorded_at AS ttl, recorded_at > now() - interval '10 minutes' AS recorded_now
FROM idem_records WHERE scope = 'short';
SELECT idem_purge() AS purged;
SELECT status, attempt FROM idem_begin('short', 'd');

-- Forget a record: the next message with this key is new.
SELECT idem_forget('pay', 'o-2') AS forgotten, idem_forget('pay', 'o-2') AS again;
SELECT status, attempt FROM idem_begin('pay', 'o-2');

-- A claim in progress cannot be forgotten: its holder's attempt would be
-- handed out again.
SELECT idem_forget('pay', 'o-2');
\echo :LAST_ERROR_SQLSTATE
SELECT status, attempts FROM idem_records WHERE scope = 'pay' AND key = 'o-2';

-- A reconciliation function dropped after configuring: that scope is
-- reported, with a warning, and the rest of the run goes on.
CREATE FUNCTION soon_gone(scope text, key text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
SELECT scope FROM idem_configure('gone', reconcile_function => 'soon_gone(text,text)');
DROP FUNCTION soon_gone(text, text);
SELECT status FROM idem_begin('gone', 'g', lease => '1 microsecond');
SELECT status FROM idem_begin('pay', 'o-5', lease => '1 microsecond');
INSERT INTO charges VALUES ('o-5');
SELECT * FROM idem_reconcile() WHERE scope IN ('gone', 'pay') ORDER BY scope, key;

-- Replaced by another function of the same name: still refused, as the
-- scope is bound to the OID the function had.
CREATE FUNCTION soon_gone(scope text, key text) RETURNS boolean LANGUAGE sql AS 'SELECT false';
SELECT status FROM idem_begin('gone', 'g2', lease => '1 microsecond');
SELECT * FROM idem_reconcile('gone') ORDER BY key;

-- After pg_upgrade or a restore, OIDs are another cluster's (function OIDs
-- are not kept): the scope finds its function by the signature it keeps,
-- and idem_reconcile binds it to its OID here. Simulated by making the
-- binding look like another cluster's, in a new session (no cached
-- settings).
SELECT reconcile_function FROM idem_scopes WHERE scope = 'pay';
UPDATE idem_scopes SET reconcile_function_oid = 1, reconcile_bound_in = 42 WHERE scope = 'pay';
\c
SELECT status FROM idem_begin('pay', 'o-6', lease => '1 microsecond');
INSERT INTO charges VALUES ('o-6');
SELECT * FROM idem_reconcile('pay') ORDER BY key;
SELECT reconcile_function_oid = 'charge_happened(text,text)'::regprocedure AS bound_again,
       reconcile_bound_in = (pg_control_system()).system_identifier AS bound_here
FROM idem_scopes WHERE scope = 'pay';

-- Bad input.
SELECT * FROM idem_reconcile(NULL, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_retry(NULL, 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_forget('pay', '');
\echo :LAST_ERROR_SQLSTATE

-- Privileges: none of these is open to PUBLIC.
CREATE ROLE regress_idem_stranger;
SET ROLE regress_idem_stranger;
SELECT * FROM idem_reconcile();
\echo :LAST_ERROR_SQLSTATE
SELECT idem_retry('pay', 'o-1');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_forget('pay', 'o-1');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM idem_in_flight;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM idem_dead_letters;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- The reconciliation function runs as the role that configured the scope,
-- not as the extension owner.
CREATE TABLE who_asked (role name);
CREATE FUNCTION record_caller(scope text, key text) RETURNS boolean LANGUAGE sql AS
$$ INSERT INTO who_asked VALUES (current_user); SELECT true $$;
GRANT INSERT ON who_asked TO regress_idem_stranger;
SELECT idem_grant('audit', 'regress_idem_stranger') AS scope_granted;
GRANT EXECUTE ON FUNCTION idem_configure(text, interval, interval, integer, text, regprocedure, boolean)
    TO regress_idem_stranger;
SET ROLE regress_idem_stranger;
SELECT scope FROM idem_configure('audit', reconcile_function => 'record_caller(text,text)');
RESET ROLE;
SELECT status FROM idem_begin('audit', 'a', lease => '1 microsecond');
SELECT * FROM idem_reconcile('audit');
SELECT * FROM who_asked;
-- Allowed when configured, but no longer: left as it is, with a warning.
REVOKE EXECUTE ON FUNCTION record_caller(text, text) FROM PUBLIC;
SELECT status FROM idem_begin('audit', 'b', lease => '1 microsecond');
SELECT * FROM idem_reconcile('audit');
SELECT count(*) AS calls FROM who_asked;

-- It runs with a search_path of its own, never the caller's: a function
-- the caller puts first cannot stand in for a built-in it calls.
CREATE SCHEMA reconcile_trap;
CREATE TABLE trap_calls (n integer);
CREATE FUNCTION reconcile_trap.lower(text) RETURNS text LANGUAGE sql AS
$$ INSERT INTO public.trap_calls VALUES (1) RETURNING 'trapped' $$;
CREATE FUNCTION key_is_lower(scope text, key text) RETURNS boolean LANGUAGE sql AS
$$ SELECT lower(key) = key $$;
SELECT scope FROM idem_configure('trap', reconcile_function => 'key_is_lower(text,text)');
SELECT status FROM idem_begin('trap', 'k', lease => '1 microsecond');
SET search_path = reconcile_trap, public, pg_catalog;
SELECT * FROM idem_reconcile('trap');
RESET search_path;
SELECT count(*) AS trapped_calls FROM trap_calls;
DROP SCHEMA reconcile_trap CASCADE;
DROP TABLE trap_calls;

-- Nor does the caller's session keep any setting the function changes, even
-- for the rest of the session: a search_path left behind would make the
-- caller (a superuser, or the purge worker) resolve its next statements
-- through the function owner's schemas.
CREATE FUNCTION leaves_settings(scope text, key text) RETURNS boolean LANGUAGE plpgsql AS
$$ BEGIN
    PERFORM pg_catalog.set_config('search_path', 'leftover, public', false);
    PERFORM pg_catalog.set_config('work_mem', '1234kB', false);
    PERFORM pg_catalog.set_config('pg_idem_test.leftover', 'yes', true);
    RETURN NULL;
END $$;
SELECT scope FROM idem_configure('leaves', reconcile_function => 'leaves_settings(text,text)');
SELECT status FROM idem_begin('leaves', 'k', lease => '1 microsecond');
SELECT current_setting('search_path') AS search_path_before,
       current_setting('work_mem') AS work_mem_before \gset
SELECT scope, key, outcome FROM idem_reconcile('leaves');
SELECT current_setting('search_path') = :'search_path_before' AS search_path_kept,
       current_setting('work_mem') = :'work_mem_before' AS work_mem_kept,
       current_setting('pg_idem_test.leftover', true) IS DISTINCT FROM 'yes' AS local_setting_gone;
BEGIN;
SELECT scope, key, outcome FROM idem_reconcile('leaves');
SELECT current_setting('search_path') = :'search_path_before' AS search_path_kept_in_transaction,
       current_setting('pg_idem_test.leftover', true) IS DISTINCT FROM 'yes' AS local_setting_gone_in_transaction;
COMMIT;
DROP FUNCTION leaves_settings(text, text);

-- A reconciler that raises an error: a warning, its claim reported unknown
-- and left in progress, and the other scopes' claims settled all the same.
CREATE FUNCTION payment_api(scope text, key text) RETURNS boolean LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'payment API unreachable'; END $$;
SELECT scope FROM idem_configure('raises', reconcile_function => 'payment_api(text,text)');
SELECT status FROM idem_begin('raises', 'r', lease => '1 microsecond');
SELECT status FROM idem_begin('trap', 'later', lease => '1 microsecond');
SELECT * FROM idem_reconcile() WHERE scope IN ('raises', 'trap') ORDER BY scope;
SELECT scope, key, status FROM idem_records WHERE scope IN ('raises', 'trap') ORDER BY scope, key;
DROP FUNCTION key_is_lower(text, text), payment_api(text, text);

-- The function's owner can change its body at any time, and the body runs as
-- the role that configured the scope: so that owner must already have that
-- role's privileges. A superuser may not configure a stranger's function...
CREATE SCHEMA stranger_code AUTHORIZATION regress_idem_stranger;
SET ROLE regress_idem_stranger;
CREATE FUNCTION stranger_code.check_payment(scope text, key text) RETURNS boolean
LANGUAGE sql AS 'SELECT true';
RESET ROLE;
SELECT scope FROM idem_configure('escalate', reconcile_function => 'stranger_code.check_payment(text,text)');
\echo :LAST_ERROR_SQLSTATE
-- ... and when the owner changes later (or the configuring role is
-- dropped), the scope's claims are left alone, with a warning.
SELECT scope FROM idem_configure('escalate', reconcile_function => 'record_caller(text,text)');
ALTER FUNCTION record_caller(text, text) OWNER TO regress_idem_stranger;
SELECT status FROM idem_begin('escalate', 'e', lease => '1 microsecond');
SELECT * FROM idem_reconcile('escalate');
ALTER FUNCTION record_caller(text, text) OWNER TO CURRENT_USER;
CREATE FUNCTION orphan_check(scope text, key text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE ROLE regress_idem_gone;
GRANT EXECUTE ON FUNCTION idem_configure(text, interval, interval, integer, text, regprocedure, boolean)
    TO regress_idem_gone;
SELECT idem_grant('orphan', 'regress_idem_gone') AS scope_granted;
SET ROLE regress_idem_gone;
SELECT scope FROM idem_configure('orphan', reconcile_function => 'orphan_check(text,text)');
RESET ROLE;
REVOKE ALL ON FUNCTION idem_configure(text, interval, interval, integer, text, regprocedure, boolean)
    FROM regress_idem_gone;
DROP ROLE regress_idem_gone;
SELECT status FROM idem_begin('orphan', 'o', lease => '1 microsecond');
SELECT * FROM idem_reconcile('orphan');
SELECT scope, key, status FROM idem_records WHERE scope IN ('escalate', 'orphan') ORDER BY scope;
DROP SCHEMA stranger_code CASCADE;
DROP FUNCTION orphan_check(text, text);

REVOKE ALL ON FUNCTION idem_configure(text, interval, interval, integer, text, regprocedure, boolean)
    FROM regress_idem_stranger;
DELETE FROM idem_records;
DELETE FROM idem_scopes;

-- Every scope gets its turn: scope "flood" has five stuck claims older than
-- scope "quiet"'s one, and a function that never knows; with room for two,
-- a round asks about one claim of each, oldest first within each scope.
CREATE FUNCTION never_knows(scope text, key text) RETURNS boolean LANGUAGE sql AS 'SELECT NULL::boolean';
SELECT scope FROM idem_configure('flood', reconcile_function => 'never_knows(text,text)');
SELECT scope FROM idem_configure('quiet', reconcile_function => 'charge_happened(text,text)');
SELECT count(*) AS flooded FROM generate_series(1, 5) g,
       LATERAL idem_begin('flood', 'f' || g, lease => '1 microsecond') b;
SELECT pg_sleep(0.01);
SELECT status FROM idem_begin('quiet', 'c-1', lease => '1 microsecond');
SELECT * FROM idem_reconcile(NULL, 2);
SELECT scope, key, status FROM idem_records WHERE scope = 'quiet';
-- Room for every claim there could be: all of flood's are asked about.
SELECT * FROM idem_reconcile(NULL, 2147483647) ORDER BY scope, key;
DELETE FROM idem_records;
DELETE FROM idem_scopes;

-- A function that takes longer than pg_idem.reconcile_timeout is canceled:
-- a warning, its claim unknown and left in progress, and the next scope's
-- claims settled all the same, without waiting for it.
CREATE FUNCTION slow_api(scope text, key text) RETURNS boolean LANGUAGE sql AS
$$ SELECT pg_sleep(30) IS NULL $$;
SELECT scope FROM idem_configure('a-slow', reconcile_function => 'slow_api(text,text)');
SELECT scope FROM idem_configure('b-quick', reconcile_function => 'charge_happened(text,text)');
SELECT status FROM idem_begin('a-slow', 's', lease => '1 microsecond');
SELECT status FROM idem_begin('b-quick', 'c-1', lease => '1 microsecond');
SET pg_idem.reconcile_timeout = '200ms';
SELECT clock_timestamp() AS before \gset
SELECT * FROM idem_reconcile() ORDER BY scope;
SELECT clock_timestamp() - :'before' < interval '10 seconds' AS did_not_wait;
SELECT scope, key, status FROM idem_records ORDER BY scope;
DELETE FROM idem_records;
-- A function that calls idem_reconcile itself, then sleeps, is held to the
-- limit all the same: the nested round runs within the outer call's limit
-- and does not end it.
CREATE FUNCTION nesting_api(scope text, key text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('regress.nested', true) = 'on' THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('regress.nested', 'on', true);
    PERFORM count(*) FROM idem_reconcile(scope);
    PERFORM pg_sleep(30);
    RETURN true;
END $$;
SELECT scope FROM idem_configure('a-slow', reconcile_function => 'nesting_api(text,text)');
SELECT status FROM idem_begin('a-slow', 'n', lease => '1 microsecond');
SELECT status FROM idem_begin('b-quick', 'c-1', lease => '1 microsecond');
SELECT clock_timestamp() AS before \gset
SELECT * FROM idem_reconcile() ORDER BY scope;
SELECT clock_timestamp() - :'before' < interval '10 seconds' AS did_not_wait;
RESET pg_idem.reconcile_timeout;
SELECT scope, key, status FROM idem_records ORDER BY scope;
-- Only a superuser sets the limit.
SET ROLE regress_idem_stranger;
SET pg_idem.reconcile_timeout = 0;
RESET ROLE;
DROP FUNCTION never_knows(text, text), slow_api(text, text), nesting_api(text, text);
DELETE FROM idem_records;
DELETE FROM idem_scopes;
DELETE FROM idem_scope_grants;
DROP TABLE charges, who_asked;
DROP FUNCTION charge_happened(text, text), record_caller(text, text);
DROP ROLE regress_idem_stranger;
