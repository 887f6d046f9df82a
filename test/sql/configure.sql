-- idem_configure: per-scope settings, and what they change.

SELECT scope, ttl, lease, max_attempts, on_fingerprint_mismatch, reconcile_function,
       takeover_on_disconnect, configured_by = current_user::regrole AS by_me
FROM idem_configure('orders', ttl => '2 days', lease => '45 seconds', max_attempts => 7,
                    on_fingerprint_mismatch => 'status', takeover_on_disconnect => true);

-- The scope's TTL applies to both patterns; the call's TTL still wins.
SELECT idem_try_insert('orders', 'a'), idem_try_insert('orders', 'b', '1 hour');
SELECT status FROM idem_begin('orders', 'c');
SELECT key, expires_at - recorded_at AS ttl, lease_expires_at - recorded_at AS lease
FROM idem_records WHERE scope = 'orders' ORDER BY key;

-- Configuring again replaces every setting; NULL means the default.
SELECT scope, ttl, lease, max_attempts, on_fingerprint_mismatch
FROM idem_configure('orders', max_attempts => 3);
SELECT idem_try_insert('orders', 'd');
SELECT expires_at - recorded_at AS ttl FROM idem_records WHERE scope = 'orders' AND key = 'd';
SELECT count(*) FROM idem_scopes;

-- Bad input: nothing is written.
SELECT idem_configure(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_configure('');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_configure('x', ttl => '-1 day');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_configure('x', lease => '0');
\echo :LAST_ERROR_SQLSTATE
-- Longer than a century: refused now, not by every later claim.
SELECT idem_configure('x', ttl => '300000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_configure('x', lease => '101 years');
\echo :LAST_ERROR_SQLSTATE
SELECT (idem_configure('century', ttl => '100 years', lease => '1200 mons')).ttl;
DELETE FROM idem_scopes WHERE scope = 'century';
SELECT idem_try_insert('x', 'k', ttl => '300000 years');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_configure('x', max_attempts => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_configure('x', on_fingerprint_mismatch => 'ignore');
\echo :LAST_ERROR_SQLSTATE
-- A reconciliation function is checked when it is configured.
CREATE FUNCTION wrong_args(text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION wrong_result(text, text) RETURNS int LANGUAGE sql AS 'SELECT 1';
CREATE FUNCTION many(text, text) RETURNS SETOF boolean LANGUAGE sql AS 'SELECT true';
CREATE PROCEDURE proc(text, text) LANGUAGE sql AS 'SELECT 1';
CREATE FUNCTION right_one(scope text, key text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
SELECT idem_configure('x', reconcile_function => 'wrong_args(text)');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_configure('x', reconcile_function => 'wrong_result(text,text)');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_configure('x', reconcile_function => 'many(text,text)');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_configure('x', reconcile_function => 'proc(text,text)');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_configure('x', reconcile_function => 'no_such_function(text,text)');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS written_by_bad_calls FROM idem_scopes WHERE scope = 'x';
SELECT scope, reconcile_function FROM idem_configure('x', reconcile_function => 'right_one(text,text)');

-- Only granted roles configure; and a role may only name a function it may run.
CREATE ROLE regress_idem_admin;
GRANT EXECUTE ON FUNCTION idem_configure(text, interval, interval, integer, text, regprocedure, boolean)
    TO regress_idem_admin;
REVOKE EXECUTE ON FUNCTION right_one(text, text) FROM PUBLIC;
CREATE ROLE regress_idem_nobody;
SELECT idem_grant('y', 'regress_idem_admin') AS scope_granted;
SET ROLE regress_idem_nobody;
SELECT idem_configure('y');
\echo :LAST_ERROR_SQLSTATE
SET ROLE regress_idem_admin;
SELECT idem_configure('y', reconcile_function => 'right_one(text,text)');
\echo :LAST_ERROR_SQLSTATE
SELECT scope, configured_by FROM idem_configure('y', max_attempts => 2);
-- Nor a scope it was not granted.
SELECT idem_configure('x', max_attempts => 2);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT scope, configured_by FROM idem_scopes ORDER BY scope;

REVOKE ALL ON FUNCTION idem_configure(text, interval, interval, integer, text, regprocedure, boolean)
    FROM regress_idem_admin;
DELETE FROM idem_scopes;
DELETE FROM idem_records;
DELETE FROM idem_scope_grants;
DROP ROLE regress_idem_admin, regress_idem_nobody;
DROP FUNCTION wrong_args(text), wrong_result(text, text), many(text, text), right_one(text, text);
DROP PROCEDURE proc(text, text);
