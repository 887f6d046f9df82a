-- idem_begin, idem_complete, idem_fail, idem_release, idem_lookup: the
-- claim protocol. Each error is followed by its SQLSTATE. A token is
-- carried as an application carries it: kept from the 'acquired' answer
-- (\gset) and passed to the call that ends the claim; tokens are random,
-- so only whether an answer has one is shown.

-- First claim acquires attempt 1, with a token; a second sees it in
-- progress, and gets no token.
SELECT status, attempt, result IS NULL AS no_result, lease_expires_at > now() AS leased,
       last_error IS NULL AS no_error, token IS NOT NULL AS has_token,
       expires_at - now() > '6 days 23 hours' AS expires_in_7_days,
       fingerprint IS NULL AS no_fingerprint, token AS order1
FROM idem_begin('pay', 'order-1') \gset
\echo :status :attempt :no_result :leased :no_error :has_token :expires_in_7_days :no_fingerprint
SELECT status, attempt, token, expires_at > now() AS expires FROM idem_begin('pay', 'order-1');
SELECT scope, key, status, attempts, holder_pid = pg_backend_pid() AS mine,
       lease_expires_at - recorded_at AS lease
FROM idem_records WHERE scope = 'pay';

-- Completing stores the result; later claims replay it.
SELECT idem_complete('pay', 'order-1', :'order1', '{"charge": "ch_1", "amount": 42}');
SELECT status, attempt, result, lease_expires_at, token,
       expires_at = (SELECT expires_at FROM idem_records WHERE scope = 'pay' AND key = 'order-1') AS expires_as_stored
FROM idem_begin('pay', 'order-1');
SELECT status, holder_pid, lease_expires_at, expires_at - recorded_at AS ttl
FROM idem_records WHERE scope = 'pay' AND key = 'order-1';

-- The lease: the call's, else the scope's, else pg_idem.default_lease (5 min).
SELECT status FROM idem_begin('pay', 'order-2', lease => '30 seconds');
SELECT lease_expires_at - recorded_at AS lease FROM idem_records WHERE scope = 'pay' AND key = 'order-2';

-- An expired lease is taken over with the next attempt and a new token;
-- the old holder's completion, failure and release are refused and change
-- nothing.
SELECT status, attempt, token AS old_holder FROM idem_begin('pay', 'order-3', lease => '1 microsecond') \gset
\echo :status :attempt
SELECT status, attempt, token AS new_holder FROM idem_begin('pay', 'order-3') \gset
\echo :status :attempt
SELECT :'old_holder' <> :'new_holder' AS new_token;
SELECT idem_complete('pay', 'order-3', :'old_holder', '{"late": true}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_fail('pay', 'order-3', :'old_holder', 'late failure');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_release('pay', 'order-3', :'old_holder');
\echo :LAST_ERROR_SQLSTATE
SELECT status, attempts, attempt_base, result, last_error FROM idem_records WHERE scope = 'pay' AND key = 'order-3';
SELECT idem_complete('pay', 'order-3', :'new_holder', '{"charge": "ch_3"}');
SELECT status, attempts, result FROM idem_records WHERE scope = 'pay' AND key = 'order-3';

-- Failures: retried with the next attempt, then dead after max_attempts.
SELECT scope, max_attempts FROM idem_configure('mail', max_attempts => 2);
SELECT status, attempt, token AS t FROM idem_begin('mail', 'm-1') \gset
\echo :status :attempt
SELECT idem_fail('mail', 'm-1', :'t', 'smtp timeout');
SELECT status, attempt, last_error, token AS t FROM idem_begin('mail', 'm-1') \gset
\echo :status :attempt :last_error
SELECT idem_fail('mail', 'm-1', :'t', 'smtp timeout again');
SELECT status, attempt, last_error, token FROM idem_begin('mail', 'm-1');
-- A failure that is not retryable is dead at once.
SELECT status, attempt, token AS t FROM idem_begin('mail', 'm-2') \gset
\echo :status :attempt
SELECT idem_fail('mail', 'm-2', :'t', 'mailbox does not exist', retryable => false);
SELECT status FROM idem_begin('mail', 'm-2');
-- Running out of attempts by lease expiry makes the record dead too.
SELECT status, attempt FROM idem_begin('mail', 'm-3', lease => '1 microsecond');
SELECT status, attempt FROM idem_begin('mail', 'm-3', lease => '1 microsecond');
SELECT status, attempt FROM idem_begin('mail', 'm-3');
SELECT key, status, attempts, last_error FROM idem_records WHERE scope = 'mail' ORDER BY key;

-- The transactional pattern and the protocol share one table.
SELECT idem_try_insert('shared', 'k1');
SELECT status, attempt FROM idem_begin('shared', 'k1');
SELECT status, token AS t FROM idem_begin('shared', 'k2') \gset
\echo :status
SELECT idem_try_insert('shared', 'k2') AS in_progress_is_a_duplicate;
SELECT idem_complete('shared', 'k2', :'t');
SELECT idem_try_insert('shared', 'k2') AS completed_is_a_duplicate;

-- Fingerprints: the same key with another payload. A mismatch raises
-- IDM01 (its own SQLSTATE, not 22023's "invalid parameter").
SELECT status FROM idem_begin('fp', 'k', fingerprint => repeat('a', 64));
SELECT status FROM idem_begin('fp', 'k', fingerprint => repeat('a', 64));
SELECT status FROM idem_begin('fp', 'k', fingerprint => repeat('b', 64));
\echo :LAST_ERROR_SQLSTATE
SELECT status FROM idem_begin('fp', 'k');
SELECT scope, on_fingerprint_mismatch FROM idem_configure('fp2', on_fingerprint_mismatch => 'status');
SELECT status, token AS t FROM idem_begin('fp2', 'k', fingerprint => repeat('a', 64)) \gset
\echo :status
SELECT status, attempt, token, fingerprint = repeat('a', 64) AS shows_stored_fingerprint
FROM idem_begin('fp2', 'k', fingerprint => repeat('c', 64));
-- Once completed, a mismatching payload is told so, with the stored
-- fingerprint and the expiry, and never shown the other payload's result.
SELECT idem_complete('fp2', 'k', :'t', '{"secret": "for payload a only"}');
SELECT status, attempt, result, token, fingerprint = repeat('a', 64) AS shows_stored_fingerprint,
       expires_at = (SELECT expires_at FROM idem_records WHERE scope = 'fp2') AS expires_as_stored
FROM idem_begin('fp2', 'k', fingerprint => repeat('c', 64));
SELECT status, result FROM idem_begin('fp2', 'k', fingerprint => repeat('a', 64));

-- Attempt numbers are fencing tokens: they are never handed out twice, not
-- even after a record expires and starts a new life.
SELECT status, attempt, token AS first_holder FROM idem_begin('fence', 'k', lease => '1 microsecond') \gset
\echo :status :attempt
SELECT status, attempt, token AS t FROM idem_begin('fence', 'k') \gset
\echo :status :attempt
SELECT idem_complete('fence', 'k', :'t');
UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE scope = 'fence';
SELECT status, attempt, token AS t FROM idem_begin('fence', 'k') AS new_life \gset
\echo :status :attempt
SELECT idem_complete('fence', 'k', :'first_holder', '{"stale": true}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_complete('fence', 'k', :'t', '{"fresh": true}');
SELECT status, attempts, attempt_base, result FROM idem_records WHERE scope = 'fence';
-- The same for a record renewed by idem_try_insert.
UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE scope = 'fence';
SELECT idem_try_insert('fence', 'k') AS renewed;
SELECT status, attempts, attempt_base, result FROM idem_records WHERE scope = 'fence';

-- Waiting: a claim in progress is waited for up to the wait, then reported.
SELECT status FROM idem_begin('wait', 'k');
SELECT clock_timestamp() AS before \gset
SELECT status, attempt FROM idem_begin('wait', 'k', wait => '200 milliseconds');
SELECT clock_timestamp() - :'before' >= interval '200 milliseconds' AS waited;

-- Bad input: a clear error, and nothing written.
SELECT * FROM idem_begin(NULL, 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('bad', '');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('bad', 'k', lease => '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('bad', 'k', lease => '0');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('bad', 'k', wait => '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('bad', 'k', fingerprint => '');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('bad', 'k', fingerprint => repeat('f', 1025));
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('bad', 'k', ttl => '0');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('bad', 'k', ttl => '101 years');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_complete('bad', 'never-claimed', gen_random_uuid());
\echo :LAST_ERROR_SQLSTATE
SELECT idem_release('bad', 'never-claimed', gen_random_uuid());
\echo :LAST_ERROR_SQLSTATE
-- A wrong or missing token is refused as a stale one is (55000).
SELECT idem_complete('pay', 'order-2', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_complete('pay', 'order-2', gen_random_uuid());
\echo :LAST_ERROR_SQLSTATE
SELECT idem_fail('pay', 'order-2', NULL, 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_release('pay', 'order-2', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_release('pay', 'order-2', gen_random_uuid());
\echo :LAST_ERROR_SQLSTATE
SELECT idem_fail('pay', 'order-2', (SELECT claim_token FROM idem_records WHERE scope = 'pay' AND key = 'order-2'), NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_fail('pay', 'order-2', (SELECT claim_token FROM idem_records WHERE scope = 'pay' AND key = 'order-2'), 'x', NULL);
\echo :LAST_ERROR_SQLSTATE
-- A completed claim's token holds nothing any more.
SELECT idem_fail('pay', 'order-1', :'order1', 'too late');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_complete('pay', 'order-1', :'order1', '"twice"');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_lookup(NULL, 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_lookup('bad', '');
\echo :LAST_ERROR_SQLSTATE
BEGIN READ ONLY;
SELECT * FROM idem_begin('bad', 'read-only');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT count(*) AS written_by_bad_calls FROM idem_records WHERE scope = 'bad';
SELECT status, attempts, attempt_base, last_error, result FROM idem_records WHERE scope = 'pay' AND key IN ('order-1', 'order-2') ORDER BY key;

-- Privileges: PUBLIC cannot claim, complete, fail, release or look up.
CREATE ROLE regress_idem_stranger;
SET ROLE regress_idem_stranger;
SELECT * FROM idem_begin('pay', 'order-9');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_complete('pay', 'order-2', gen_random_uuid());
\echo :LAST_ERROR_SQLSTATE
SELECT idem_fail('pay', 'order-2', gen_random_uuid(), 'sabotage');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_release('pay', 'order-2', gen_random_uuid());
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_lookup('pay', 'order-1');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE regress_idem_stranger;

DELETE FROM idem_records;
DELETE FROM idem_scopes;

-- A claim whose lease outlives the scope's TTL, and runs out of attempts:
-- the dead letter lives a full TTL from its death, so the next claim is
-- still answered dead, not acquired anew.
SELECT scope FROM idem_configure('claim-dead-ttl', ttl => '200 milliseconds',
                                 lease => '300 milliseconds', max_attempts => 1);
SELECT status, attempt FROM idem_begin('claim-dead-ttl', 'k');
SELECT pg_sleep(0.35);
SELECT status, attempt FROM idem_begin('claim-dead-ttl', 'k');
SELECT status, attempt FROM idem_begin('claim-dead-ttl', 'k') AS still_dead;
SELECT expires_at > now() AS dead_letter_still_live, expires_at > died_at AS expires_after_death
FROM idem_dead_letters WHERE scope = 'claim-dead-ttl';

-- A wait longer than any timestamp can hold still waits for the holder's
-- lease (here until it runs out, then takes over), instead of overflowing.
SELECT status, attempt FROM idem_begin('claim-long-wait', 'k', lease => '300 milliseconds');
SELECT status, attempt FROM idem_begin('claim-long-wait', 'k', wait => '292270 years');
SELECT status, attempt FROM idem_begin('claim-long-wait', 'k2', wait => '300000 years');
DELETE FROM idem_records WHERE scope IN ('claim-dead-ttl', 'claim-long-wait');
DELETE FROM idem_scopes WHERE scope = 'claim-dead-ttl';

-- Issue 18's reproduction: a session that was told 'in_progress' holds
-- nothing. Completing with what its answer carries (no token), or with a
-- guess, is refused, and the holder's completion stands.
SELECT status, token AS holder FROM idem_begin('repro', 'k', lease => '1 min') \gset
\echo :status
SELECT status, attempt, token FROM idem_begin('repro', 'k');
-- A consumer that does not branch on the status passes its answer's token.
SELECT idem_complete('repro', 'k', (idem_begin('repro', 'k')).token, '"B was never the holder"');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_complete('repro', 'k', gen_random_uuid(), '"B was never the holder"');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_complete('repro', 'k', :'holder', '"A held it"');
SELECT status, result FROM idem_begin('repro', 'k');

-- The record's lifetime: the call's ttl, else the scope's, else
-- pg_idem.default_ttl. A claim keeps its own ttl for its completion,
-- failure or release.
SELECT scope FROM idem_configure('ttl', ttl => '1 day');
SELECT status, expires_at - now() BETWEEN '59 minutes' AND '61 minutes' AS expires_in_an_hour, token AS t
FROM idem_begin('ttl', 'call', ttl => '1 hour') \gset
\echo :status :expires_in_an_hour
SELECT idem_complete('ttl', 'call', :'t', '1');
SELECT status, token AS t FROM idem_begin('ttl', 'scope') \gset
SELECT idem_complete('ttl', 'scope', :'t', '2');
SELECT status, token AS t FROM idem_begin('ttl', 'failed', ttl => '2 hours') \gset
SELECT idem_fail('ttl', 'failed', :'t', 'timeout');
SELECT status, token AS t FROM idem_begin('ttl', 'released', ttl => '3 hours') \gset
SELECT idem_release('ttl', 'released', :'t');
SELECT key, status, expires_at - recorded_at AS lifetime, ttl FROM idem_records WHERE scope = 'ttl' ORDER BY key;
-- Every answer carries the record's expiry.
SELECT status, expires_at - now() BETWEEN '59 minutes' AND '61 minutes' AS expires_in_an_hour
FROM idem_begin('ttl', 'call');
SELECT status, expires_at = (SELECT expires_at FROM idem_records WHERE key = 'call') AS expires_as_stored
FROM idem_lookup('ttl', 'call');

-- Release: the holder gives the claim back. The key is claimable at once,
-- the attempt does not count toward max_attempts (a handler that threw
-- five times is not dead on a scope of max_attempts 1), attempt numbers
-- still only grow, and the released token holds nothing.
SELECT scope FROM idem_configure('release', max_attempts => 1);
SELECT status, attempt, token AS t FROM idem_begin('release', 'k', fingerprint => 'md5:1B2M2Y8AsgTpgAmY7PhCfg==') \gset
\echo :status :attempt
SELECT idem_release('release', 'k', :'t');
SELECT idem_release('release', 'k', :'t');
\echo :LAST_ERROR_SQLSTATE
SELECT status, attempt, lease_expires_at, token, fingerprint FROM idem_lookup('release', 'k');
DO $$
DECLARE
    claim idem_claim;
BEGIN
    FOR n IN 2..5 LOOP
        claim := idem_begin('release', 'k');
        IF claim.status <> 'acquired' OR claim.attempt <> n THEN
            RAISE EXCEPTION 'claim % answered % %', n, claim.status, claim.attempt;
        END IF;
        PERFORM idem_release('release', 'k', claim.token);
    END LOOP;
END $$;
-- The next claim brings a corrected payload: a failed or released record
-- binds none, so this is no mismatch, and the claim binds its own.
SELECT status, attempt, token AS t FROM idem_begin('release', 'k', fingerprint => 'md5:corrected') \gset
\echo :status :attempt
SELECT attempts, attempt_base, fingerprint FROM idem_records WHERE scope = 'release';
SELECT status FROM idem_begin('release', 'k', fingerprint => 'md5:another');
\echo :LAST_ERROR_SQLSTATE
-- Its failure, on the one attempt that counted, makes the record dead.
SELECT idem_fail('release', 'k', :'t', 'bad card');
-- A retryable failure does not bind the payload either.
SELECT status, token AS t FROM idem_begin('fp-retry', 'k', fingerprint => 'payload-v1') \gset
SELECT idem_fail('fp-retry', 'k', :'t', 'upstream 503');
SELECT status, attempt, token AS t FROM idem_begin('fp-retry', 'k', fingerprint => 'payload-v2') \gset
\echo :status :attempt
SELECT idem_complete('fp-retry', 'k', :'t', '"done with v2"');
-- A completed record still refuses a different payload.
SELECT status FROM idem_begin('fp-retry', 'k', fingerprint => 'payload-v1');
\echo :LAST_ERROR_SQLSTATE
SELECT status, result FROM idem_begin('fp-retry', 'k', fingerprint => 'payload-v2');

-- Opaque fingerprints: any non-empty text up to 1024 bytes, compared as
-- text (a client library's base64 MD5 needs no rehashing).
SELECT status FROM idem_begin('opaque', 'k', fingerprint => repeat('z', 1024));
SELECT status, token FROM idem_begin('opaque', 'k', fingerprint => repeat('z', 1024));
SELECT status FROM idem_begin('opaque', 'k', fingerprint => repeat('Z', 1024));
\echo :LAST_ERROR_SQLSTATE

-- idem_lookup: the record as idem_begin would find it, without writing,
-- waiting or counting, and never with a token.
SELECT * FROM idem_lookup('lookup', 'none');
SELECT status, token AS t FROM idem_begin('lookup', 'k', fingerprint => 'fp-1') \gset
SELECT status, attempt, result, lease_expires_at > now() AS leased, token,
       expires_at > now() AS expires, fingerprint
FROM idem_lookup('lookup', 'k');
-- Results are jsonb: object keys come back in jsonb's order, not as sent.
SELECT idem_complete('lookup', 'k', :'t', '{"zeta": 1, "alpha": {"b": 2, "a": 1}}');
SELECT status, attempt, result, lease_expires_at, token, fingerprint FROM idem_lookup('lookup', 'k');
SELECT status, last_error FROM idem_lookup('release', 'k');
UPDATE idem_records SET expires_at = now() - interval '1 second' WHERE scope = 'lookup';
SELECT * FROM idem_lookup('lookup', 'k') AS expired_is_absent;
-- It writes nothing: it runs in a read-only transaction, and leaves the
-- expired record as it was.
BEGIN READ ONLY;
SELECT status FROM idem_lookup('lookup', 'k');
SELECT status, result FROM idem_lookup('fp-retry', 'k');
COMMIT;
SELECT count(*) AS still_there FROM idem_records WHERE scope = 'lookup';
DELETE FROM idem_records WHERE scope IN ('repro', 'ttl', 'release', 'fp-retry', 'opaque', 'lookup');
DELETE FROM idem_scopes WHERE scope IN ('ttl', 'release');

-- Tokens are drawn from pg_strong_random many at a time (claim_tokens.cpp):
-- more claims in one session than one draw serves still get each its own
-- version 4 token, and every one of them completes only its own claim.
CREATE TEMP TABLE many_tokens AS
SELECT g AS k, c.token FROM generate_series(1, 100) g, idem_begin('tokens', g::text) c;
SELECT count(*) AS claims, count(DISTINCT token) AS distinct_tokens,
       bool_and(substr(token::text, 15, 1) = '4') AS version_4,
       bool_and(substr(token::text, 20, 1) IN ('8', '9', 'a', 'b')) AS rfc_4122
FROM many_tokens;
SELECT count(*) AS completed
FROM many_tokens, LATERAL idem_complete('tokens', k::text, token) done;
SELECT status, count(*) FROM idem_records WHERE scope = 'tokens' GROUP BY status;
DELETE FROM idem_records WHERE scope = 'tokens';
