-- Scopes as a security boundary: idem_grant, idem_revoke, and every
-- function that reads or writes a scope refusing (42501) a role the scope
-- was not granted to, writing nothing. Two teams, two services, in one
-- database, each with only EXECUTE on the functions.
CREATE ROLE regress_team_a;
CREATE ROLE regress_team_b;
CREATE ROLE regress_alice;
GRANT EXECUTE ON FUNCTION
    idem_try_insert(text, text, interval), idem_try_insert_many(text, text[], interval, bigint[]),
    idem_begin(text, text, interval, text, interval, boolean, interval, bigint),
    idem_complete(text, text, uuid, jsonb, bigint), idem_fail(text, text, uuid, text, boolean, bigint),
    idem_release(text, text, uuid, bigint), idem_lookup(text, text, bigint),
    idem_configure(text, interval, interval, integer, text, regprocedure, boolean),
    idem_retry(text, text), idem_forget(text, text), idem_reconcile(text, integer),
    idem_purge(integer), idem_purge_status(),
    idem_advance(text, integer, bigint, integer), idem_position(text, integer),
    idem_advance_many(text, integer, bigint[], integer),
    idem_reset_stream(text, integer), idem_grant(text, text), idem_revoke(text, text)
TO regress_team_a, regress_team_b;
GRANT SELECT ON idem_in_flight, idem_dead_letters, idem_stream_positions
TO regress_team_a, regress_team_b;

-- Secure by default: a scope nobody was granted is the owner's alone.
SET ROLE regress_team_a;
SELECT idem_try_insert('payments_a', 'order-1');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- Only the owner (or a superuser) grants, whoever has EXECUTE.
SELECT idem_grant('payments_a', 'regress_team_a') AS granted;
SELECT idem_grant('payments_a', 'regress_team_a') AS granted_again;
SELECT idem_grant('payments_b', 'regress_team_b') AS granted;
SET ROLE regress_team_b;
SELECT idem_grant('payments_a', 'regress_team_b');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_revoke('payments_a', 'regress_team_a');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT scope, grantee, granted_by FROM idem_scope_grants ORDER BY scope, grantee;

-- team_a works in its scope as before.
SET ROLE regress_team_a;
SELECT idem_try_insert('payments_a', 'order-1') AS first, idem_try_insert('payments_a', 'order-1') AS again;
SELECT status, attempt, token AS a2 FROM idem_begin('payments_a', 'order-2', lease => '1 hour') \gset
\echo :status :attempt
SELECT status, token AS a3 FROM idem_begin('payments_a', 'order-3', lease => '1 microsecond') \gset
\echo :status
SELECT idem_complete('payments_a', 'order-2', :'a2', '{"card": "4242", "amount": 100}');
SELECT status, result FROM idem_lookup('payments_a', 'order-2');
SELECT idem_advance('payments_a', 0, 10) AS advanced;
SELECT scope FROM idem_configure('payments_a', max_attempts => 3);
SELECT idem_try_insert('payments_a', 'expired', ttl => '1 microsecond') AS expires_at_once;
SELECT scope, key FROM idem_in_flight;
RESET ROLE;
-- team_a's claims have a reconciler (configured by the owner, whose
-- function it is), so that idem_reconcile would settle them.
CREATE FUNCTION regress_never_happened(scope text, key text) RETURNS boolean
LANGUAGE sql AS $$ SELECT false $$;
SELECT scope FROM idem_configure('payments_a', max_attempts => 3,
                                 reconcile_function => 'regress_never_happened(text,text)');
SELECT pg_sleep(0.01);

-- team_b is refused in team_a's scope by every function, and nothing is
-- written or shown.
SET ROLE regress_team_b;
SELECT idem_try_insert('payments_a', 'order-3', '30 days');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_try_insert_many('payments_a', ARRAY['order-1', 'order-7']);
\echo :LAST_ERROR_SQLSTATE
SELECT (idem_begin('payments_a', 'order-2')).result;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('payments_a', 'order-9');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_lookup('payments_a', 'order-2');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_complete('payments_a', 'order-3', :'a3', '"stolen"');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_fail('payments_a', 'order-3', :'a3', 'sabotage');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_release('payments_a', 'order-3', :'a3');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_configure('payments_a', ttl => '1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_retry('payments_a', 'order-3');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_forget('payments_a', 'order-1');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_reconcile('payments_a');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_advance('payments_a', 0, 11);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_advance_many('payments_a', 0, ARRAY[11, 12]);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_position('payments_a', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_reset_stream('payments_a');
\echo :LAST_ERROR_SQLSTATE
-- The operator views and tools keep to team_b's own scopes.
SELECT count(*) AS in_flight_seen FROM idem_in_flight;
SELECT count(*) AS streams_seen FROM idem_stream_positions;
SELECT * FROM idem_reconcile();
SELECT idem_purge() AS purged;
SELECT count(*) AS dead_letters_seen FROM idem_dead_letters;
-- A function of team_b's own in a query on a view never sees the rows the
-- view holds back (the views are security barriers).
CREATE FUNCTION pg_temp.peek(scope text, key text) RETURNS boolean
LANGUAGE plpgsql COST 0.0000001 AS $$
BEGIN
    RAISE NOTICE 'peeked at % %', scope, key;
    RETURN true;
END $$;
SELECT count(*) FROM idem_in_flight WHERE pg_temp.peek(scope, key);
-- team_b works in its own scope.
SELECT idem_try_insert('payments_b', 'order-1') AS own_scope;
SELECT * FROM idem_try_insert_many('payments_b', ARRAY['order-1', 'order-2']) AS own_scope_batch;
SELECT * FROM idem_advance_many('payments_b', 0, ARRAY[1, 2]) AS own_stream_batch;
RESET ROLE;

-- What team_b tried changed nothing of team_a's: its expired record and
-- its claim whose lease ran out are still there, unreconciled.
SELECT scope, key, status, attempts, result FROM idem_records
WHERE scope LIKE 'payments%' ORDER BY scope, key;
SELECT scope, max_attempts, ttl FROM idem_scopes WHERE scope LIKE 'payments%' ORDER BY scope;
-- The owner's tools see every scope.
SELECT scope, key, outcome FROM idem_reconcile();
SELECT idem_purge() AS purged_by_the_owner;
SELECT stream, part, position FROM idem_streams WHERE stream LIKE 'payments%' ORDER BY stream, part;

-- Membership: a role granted team_a's role uses team_a's scopes, and stops
-- in its next transaction once the membership is revoked.
GRANT regress_team_a TO regress_alice;
GRANT EXECUTE ON FUNCTION idem_try_insert(text, text, interval) TO regress_alice;
SET ROLE regress_alice;
SELECT idem_try_insert('payments_a', 'alice-1') AS through_membership;
RESET ROLE;
REVOKE regress_team_a FROM regress_alice;
SET ROLE regress_alice;
SELECT idem_try_insert('payments_a', 'alice-2');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- PUBLIC: every role may use the scope.
SELECT idem_grant('shared', 'PUBLIC') AS granted_to_public;
SET ROLE regress_alice;
SELECT idem_try_insert('shared', 'k') AS public_scope;
RESET ROLE;
SELECT idem_revoke('shared', 'public') AS revoked_from_public;
SET ROLE regress_alice;
SELECT idem_try_insert('shared', 'k2');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- A revoke takes effect at once in this session, and keeps the records.
SELECT idem_revoke('payments_a', 'regress_team_a') AS revoked;
SELECT idem_revoke('payments_a', 'regress_team_a') AS revoked_again;
SET ROLE regress_team_a;
SELECT idem_try_insert('payments_a', 'order-1');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS in_flight_seen FROM idem_in_flight;
RESET ROLE;
SELECT count(*) AS records_kept FROM idem_records WHERE scope = 'payments_a';

-- Bad input.
SELECT idem_grant(NULL, 'regress_team_a');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_grant('', 'regress_team_a');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_grant(repeat('s', 129), 'regress_team_a');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_grant('payments_a', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_grant('payments_a', 'regress_no_such_role');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_revoke('payments_a', 'regress_no_such_role') AS revoked_nothing;
-- A stream name longer than a scope can be is granted to no one (the owner
-- still uses it), not to the roles of a scope it begins with.
SELECT idem_grant(repeat('s', 128), 'regress_team_b') AS granted;
GRANT EXECUTE ON FUNCTION idem_advance(text, integer, bigint, integer) TO regress_team_b;
SET ROLE regress_team_b;
SELECT idem_advance(repeat('s', 128), 0, 1) AS granted_stream;
SELECT idem_advance(repeat('s', 129), 0, 1);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT idem_advance(repeat('s', 129), 0, 1) AS owner_uses_it;
SELECT idem_revoke(repeat('s', 128), 'regress_team_b') AS revoked;
SELECT count(*) AS grants_left FROM idem_scope_grants;

DELETE FROM idem_records WHERE scope LIKE 'payments%' OR scope = 'shared';
DELETE FROM idem_scopes WHERE scope LIKE 'payments%';
DELETE FROM idem_streams WHERE stream LIKE 'payments%' OR stream LIKE 'sss%';
DELETE FROM idem_scope_grants;
DROP FUNCTION regress_never_happened(text, text);
DROP OWNED BY regress_team_a, regress_team_b, regress_alice;
DROP ROLE regress_team_a, regress_team_b, regress_alice;
