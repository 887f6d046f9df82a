"""A message consumer that applies each message exactly once with pg_idem.

Copy this module into your consumer and adapt the SQL to your tables. It
needs psycopg 3 (Debian: python3-psycopg) and a role with EXECUTE on
idem_try_insert (pattern 1) or on idem_begin, idem_complete, idem_fail and
idem_release (pattern 2); see the README's Privileges section.

1. credit_once: the effect is a write to your own database. The claim and
   the write are one statement in your transaction, so they commit or roll
   back together: a redelivery after the commit is skipped, and a crash
   before it leaves nothing behind.

       with conn.transaction():
           applied = credit_once(conn, "credits", msg_id, account, amount)

2. call_once: the effect is a call to another service, which cannot commit
   with the database. A claim with a lease brackets the call:
   idem_begin -> call -> idem_complete, or idem_release on a transient error
   (the key is free again at once), or idem_fail on a permanent one (the key
   is dead: every redelivery is dead-lettered). The connection must be in
   autocommit mode: each step is its own short transaction, and the call
   runs outside any transaction.

       outcome = call_once(conn, "payments", order_id, payload,
                           lambda attempt: payments.charge(...))

   The token that idem_begin hands out is the only credential for
   completing the claim, and it belongs to this one invocation: it lives in
   a local variable, never in a map keyed by message key, because two
   deliveries of the same message may be in flight in one process at once,
   and a token stored per key would let one complete the other's claim.

   A crash between the call and idem_complete leaves the claim in progress
   until its lease runs out; then a redelivery claims it again (attempt + 1)
   and calls the service again. The external effect is at least once unless
   the service is idempotent itself or a reconciliation function settles
   such claims (README: "What exactly-once does and does not mean here").
"""

from dataclasses import dataclass
from typing import Any, Callable, Optional

import psycopg
from psycopg.types.json import Jsonb

# SQLSTATEs a consumer acts on.
FINGERPRINT_MISMATCH = "IDM01"  # the key was seen with another payload
NOT_HOLDER = "55000"  # the token no longer holds the claim (taken over)


class TransientError(Exception):
    """The call failed and had no effect; trying again later may succeed."""


class PermanentError(Exception):
    """The call failed for good (a declined card): never try this message again."""


# Pattern 1. Both CTEs run exactly once per statement; the claim in a CTE,
# never in the UPDATE's WHERE clause (README: idem_try_insert). `credited`
# tells "duplicate" apart from "new key, unknown account".
CREDIT_ONCE = """
WITH claim AS (SELECT idem_try_insert(%(scope)s, %(key)s, %(ttl)s::interval) AS new),
     credit AS (UPDATE accounts SET balance = balance + %(amount)s
                FROM claim
                WHERE claim.new AND accounts.id = %(account)s
                RETURNING accounts.id)
SELECT claim.new, (SELECT count(*) FROM credit) AS credited FROM claim
"""


def credit_once(conn: psycopg.Connection, scope: str, key: str, account: int,
                amount: int, ttl: Optional[str] = None) -> bool:
    """Adds amount to the account's balance unless key was applied before.

    Runs in the caller's transaction and commits nothing: the claim commits
    with whatever else the caller writes, or vanishes with its rollback.
    Returns True if this call applied the credit, False for a duplicate.
    """
    new, credited = conn.execute(CREDIT_ONCE, {
        "scope": scope, "key": key, "ttl": ttl, "amount": amount, "account": account,
    }).fetchone()
    if new and credited != 1:
        # Without this the claim would commit with no credit: a lost message.
        raise LookupError(f"account {account} does not exist")
    return new


@dataclass
class Outcome:
    """What the consumer should tell the broker.

    action:
      "done"        the call was made now and its result recorded: ack
      "replayed"    done before; result is the recorded one: ack
      "retry_later" another consumer holds the key, or the call failed
                    transiently and the claim was released: nack, redeliver later
      "dead_letter" the key is dead (a permanent error, now or before): ack
                    to the dead-letter queue
      "rejected"    the key was used before with another payload: ack to
                    the dead-letter queue, it is a producer bug
      "superseded"  the call was made, but the lease ran out meanwhile and
                    another consumer took the key over; that consumer's
                    delivery now owns the message: ack this one
    """
    action: str
    result: Any = None
    attempt: Optional[int] = None
    detail: Optional[str] = None


def call_once(conn: psycopg.Connection, scope: str, key: str, payload: Any,
              call: Callable[[int], Any], lease: str = "30 seconds",
              ttl: Optional[str] = None) -> Outcome:
    """Calls call(attempt) at most once per claim of (scope, key).

    conn must be in autocommit mode. call gets the claim's attempt number
    (a fencing number: it only grows; pass it on if the other side can
    refuse stale attempts) and returns the result to record, anything
    JSON can hold. It raises TransientError or PermanentError for failures
    that had no effect. Any other exception leaves the claim alone (the
    effect may or may not have happened) and is re-raised: the key stays
    claimed until its lease runs out, then a redelivery claims it again.
    Choose a lease longer than the slowest call.
    """
    try:
        claim = conn.execute(
            "SELECT status, attempt, result, token, last_error"
            " FROM idem_begin(%s, %s, lease => %s::interval,"
            " fingerprint => idem_fingerprint(%s::jsonb), ttl => %s::interval)",
            (scope, key, lease, Jsonb(payload), ttl)).fetchone()
    except psycopg.Error as e:
        if e.sqlstate == FINGERPRINT_MISMATCH:
            return Outcome("rejected", detail=str(e))
        raise
    status, attempt, result, token, last_error = claim
    if status == "completed":
        return Outcome("replayed", result, attempt)
    if status == "in_progress":
        return Outcome("retry_later", attempt=attempt)
    if status == "dead":
        return Outcome("dead_letter", attempt=attempt, detail=last_error)
    if status == "fingerprint_mismatch":  # scope configured to answer, not raise
        return Outcome("rejected", attempt=attempt)
    assert status == "acquired", status

    try:
        result = call(attempt)  # outside any transaction
    except TransientError as e:
        try:
            conn.execute("SELECT idem_release(%s, %s, %s)", (scope, key, token))
        except psycopg.Error as release_error:
            if release_error.sqlstate != NOT_HOLDER:
                raise
            # Taken over while we called: the key is someone else's now.
        return Outcome("retry_later", attempt=attempt, detail=str(e))
    except PermanentError as e:
        try:
            conn.execute("SELECT idem_fail(%s, %s, %s, %s, retryable => false)",
                         (scope, key, token, str(e)))
        except psycopg.Error as fail_error:
            if fail_error.sqlstate != NOT_HOLDER:
                raise
            return Outcome("superseded", attempt=attempt, detail=str(e))
        return Outcome("dead_letter", attempt=attempt, detail=str(e))

    try:
        conn.execute("SELECT idem_complete(%s, %s, %s, %s)",
                     (scope, key, token, Jsonb(result)))
    except psycopg.Error as e:
        if e.sqlstate != NOT_HOLDER:
            raise
        return Outcome("superseded", result, attempt, detail=str(e))
    return Outcome("done", result, attempt)


def lookup(conn: psycopg.Connection, scope: str, key: str):
    """The record of (scope, key): (status, attempt, result, last_error,
    expires_at). Read-only; status is 'absent' for no record."""
    return conn.execute(
        "SELECT status, attempt, result, last_error, expires_at FROM idem_lookup(%s, %s)",
        (scope, key)).fetchone()
