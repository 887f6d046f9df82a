// A message consumer that applies each message exactly once with pg_idem,
// for node-postgres (`pg`). Copy this file into your consumer and adapt the
// SQL to your tables. The role needs EXECUTE on idem_try_insert (pattern 1)
// or on idem_begin, idem_complete, idem_fail and idem_release (pattern 2);
// see the README's Privileges section.
//
// 1. creditOnce: the effect is a write to your own database. The claim and
//    the write are one statement in your transaction, so they commit or roll
//    back together: a redelivery after the commit is skipped, and a crash
//    before it leaves nothing behind.
//
//      const applied = await inTransaction(client, () =>
//        creditOnce(client, 'credits', msgId, account, amount));
//
// 2. callOnce: the effect is a call to another service, which cannot commit
//    with the database. A claim with a lease brackets the call: idem_begin ->
//    call -> idem_complete, or idem_release on a transient error (the key is
//    free again at once), or idem_fail on a permanent one (the key is dead:
//    every redelivery is dead-lettered). Each step is its own autocommit
//    statement and the call runs outside any transaction, so `db` may be a
//    pg.Pool: the protocol keeps no session state.
//
//      const outcome = await callOnce(pool, 'payments', orderId, payload,
//        (attempt) => payments.charge(...));
//
//    The token that idem_begin hands out is the only credential for
//    completing the claim, and it belongs to this one invocation: it lives in
//    a local variable, never in a map keyed by message key, because two
//    deliveries of the same message may be in flight in one process at once,
//    and a token stored per key would let one complete the other's claim.
//
//    A crash between the call and idem_complete leaves the claim in progress
//    until its lease runs out; then a redelivery claims it again (attempt + 1)
//    and calls the service again. The external effect is at least once unless
//    the service is idempotent itself or a reconciliation function settles
//    such claims (README: "What exactly-once does and does not mean here").
'use strict';

// SQLSTATEs a consumer acts on.
const FINGERPRINT_MISMATCH = 'IDM01'; // the key was seen with another payload
const NOT_HOLDER = '55000'; // the token no longer holds the claim (taken over)

/** The call failed and had no effect; trying again later may succeed. */
class TransientError extends Error {}
/** The call failed for good (a declined card): never try this message again. */
class PermanentError extends Error {}

// Pattern 1. Both CTEs run exactly once per statement; the claim in a CTE,
// never in the UPDATE's WHERE clause (README: idem_try_insert). `credited`
// tells "duplicate" apart from "new key, unknown account".
const CREDIT_ONCE = `
WITH claim AS (SELECT idem_try_insert($1, $2, $3::interval) AS new),
     credit AS (UPDATE accounts SET balance = balance + $4
                FROM claim
                WHERE claim.new AND accounts.id = $5
                RETURNING accounts.id)
SELECT claim.new, (SELECT count(*) FROM credit)::int AS credited FROM claim`;

/**
 * Adds amount to the account's balance unless key was applied before. Runs
 * in the caller's transaction and commits nothing: the claim commits with
 * whatever else the caller writes, or vanishes with its rollback. Resolves
 * to true if this call applied the credit, false for a duplicate.
 */
async function creditOnce(client, scope, key, account, amount, ttl = null) {
  const { rows } = await client.query(CREDIT_ONCE, [scope, key, ttl, amount, account]);
  const { new: isNew, credited } = rows[0];
  if (isNew && credited !== 1) {
    // Without this the claim would commit with no credit: a lost message.
    throw new Error(`account ${account} does not exist`);
  }
  return isNew;
}

/**
 * Runs fn() between BEGIN and COMMIT on one client (not a pool: every
 * statement of a transaction must use the same connection); ROLLBACK if it
 * throws.
 */
async function inTransaction(client, fn) {
  await client.query('BEGIN');
  let result;
  try {
    result = await fn();
  } catch (e) {
    await client.query('ROLLBACK').catch(() => {}); // a dead connection rolls back anyway
    throw e;
  }
  await client.query('COMMIT');
  return result;
}

/**
 * Calls call(attempt) at most once per claim of (scope, key). Resolves to
 * { action, result, attempt, detail }, action being what to tell the broker:
 *   'done'        the call was made now and its result recorded: ack
 *   'replayed'    done before; result is the recorded one: ack
 *   'retry_later' another consumer holds the key, or the call failed
 *                 transiently and the claim was released: nack, redeliver later
 *   'dead_letter' the key is dead (a permanent error, now or before): ack to
 *                 the dead-letter queue
 *   'rejected'    the key was used before with another payload: a producer
 *                 bug, dead-letter it
 *   'superseded'  the call was made, but the lease ran out meanwhile and
 *                 another consumer took the key over; its delivery now owns
 *                 the message: ack this one
 *
 * call gets the claim's attempt number (a fencing number: it only grows; pass
 * it on if the other side can refuse stale attempts) and returns the result to
 * record, anything JSON can hold. It throws TransientError or PermanentError
 * for failures that had no effect. Any other error leaves the claim alone (the
 * effect may or may not have happened) and is rethrown: the key stays claimed
 * until its lease runs out, then a redelivery claims it again. Choose a lease
 * longer than the slowest call.
 */
async function callOnce(db, scope, key, payload, call, { lease = '30 seconds', ttl = null } = {}) {
  let claim;
  try {
    ({ rows: [claim] } = await db.query(
      `SELECT status, attempt, result, token, last_error
         FROM idem_begin($1, $2, lease => $3::interval,
                         fingerprint => idem_fingerprint($4::jsonb), ttl => $5::interval)`,
      [scope, key, lease, JSON.stringify(payload), ttl]));
  } catch (e) {
    if (e.code === FINGERPRINT_MISMATCH) return { action: 'rejected', detail: e.message };
    throw e;
  }
  const { status, attempt, token } = claim;
  switch (status) {
    case 'completed': return { action: 'replayed', result: claim.result, attempt };
    case 'in_progress': return { action: 'retry_later', attempt };
    case 'dead': return { action: 'dead_letter', attempt, detail: claim.last_error };
    case 'fingerprint_mismatch': return { action: 'rejected', attempt }; // scope answers, not raises
    case 'acquired': break;
    default: throw new Error(`idem_begin: unexpected status ${status}`);
  }

  let result;
  try {
    result = await call(attempt); // outside any transaction
  } catch (e) {
    if (e instanceof TransientError) {
      await ignoreNotHolder(db.query('SELECT idem_release($1, $2, $3)', [scope, key, token]));
      return { action: 'retry_later', attempt, detail: e.message };
    }
    if (e instanceof PermanentError) {
      const held = await ignoreNotHolder(db.query(
        'SELECT idem_fail($1, $2, $3, $4, retryable => false)', [scope, key, token, e.message]));
      return { action: held ? 'dead_letter' : 'superseded', attempt, detail: e.message };
    }
    throw e;
  }

  const held = await ignoreNotHolder(db.query('SELECT idem_complete($1, $2, $3, $4::jsonb)',
    [scope, key, token, JSON.stringify(result)]));
  return { action: held ? 'done' : 'superseded', result, attempt };
}

// Resolves to false if the token no longer held the claim (another consumer
// took it over while we called), true if the statement ran.
async function ignoreNotHolder(query) {
  try {
    await query;
    return true;
  } catch (e) {
    if (e.code === NOT_HOLDER) return false;
    throw e;
  }
}

/**
 * The record of (scope, key): { status, attempt, result, last_error,
 * expires_at }. Read-only; status is 'absent' for no record.
 */
async function lookup(db, scope, key) {
  const { rows } = await db.query(
    'SELECT status, attempt, result, last_error, expires_at FROM idem_lookup($1, $2)',
    [scope, key]);
  return rows[0];
}

module.exports = {
  TransientError, PermanentError, FINGERPRINT_MISMATCH, NOT_HOLDER,
  creditOnce, inTransaction, callOnce, lookup,
};
