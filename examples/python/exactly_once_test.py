#!/usr/bin/env python3
"""Exactly-once test of idem_consumer.py under redeliveries and crashes.

An in-process broker deals every message 2 or 3 times to WORKERS threads,
each with its own connections: as "twins" (two copies handed to two workers
that start together at a barrier) and/or as a later redelivery. Workers
crash on purpose, and the checks at the end compare what happened with
what exactly-once means:

test_transactional_pattern (credit_once: claim and credit in one statement)
  Faults, each on the first delivery that claimed its message:
  rollback after the credit, a connection closed inside the transaction (a
  crash: the broker redelivers), and a crash after COMMIT before the ack
  (the redelivery must be a duplicate). Checked: every account's balance is
  the sum of its distinct messages, each message was applied by exactly one
  committed transaction, every key is 'completed', and a final redelivery
  of every message changes nothing.

test_claim_protocol (call_once around a fake payment service)
  The service is not idempotent: every call it receives is a charge,
  recorded in payment_requests by (idempotency_key, attempt) through the
  service's own autocommit connection. Faults: the service answers 503 once
  (the consumer releases the claim), declines some cards (idem_fail, not
  retryable), a worker crashes after the charge and before idem_complete
  (its lease runs out and a redelivery claims the key again), and a worker
  stalls after the charge until its claim was taken over, then tries to
  complete with its stale token (it must be refused): twice while the new
  holder is still calling the service (its call is slowed down), twice after
  the new holder completed. Checked per message:
  - the record is 'completed' (or 'dead' for a declined card);
  - no attempt called the service twice (one holder per attempt);
  - the charges are exactly one per message plus one per crash or stall
    after the charge, and the extra ("orphan") charges are exactly those of
    the crashed and stalled attempts, which a reconciliation would refund;
  - the stored result is the charge of the attempt that holds the record,
    the latest attempt, and the one the completing consumer got;
  - every stalled worker's idem_complete was refused (55000);
  - afterwards every redelivery replays the stored result without calling
    the service, and a copy with another payload is rejected (IDM01).

Connection: libpq's environment (PGHOST, PGPORT, PGUSER, PGDATABASE), as a
role with the consumer grants (examples/run sets it up). SEED=n replays a
schedule; the key prefix is new each run, so the test can run repeatedly.
"""

import heapq
import itertools
import os
import random
import sys
import threading
import time
import unittest
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Optional

import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import idem_consumer as ic  # noqa: E402

SEED = int(os.environ.get("SEED", random.randrange(1 << 30)))
WORKERS = 6
MESSAGES = 150
ACCOUNTS = 8
LEASE = "2 seconds"  # short, so that crashed claims are taken over soon
RETRY_DELAY = 0.1  # nack: redeliver after this long
VISIBILITY_TIMEOUT = 0.3  # a crashed worker's delivery comes back after this
RUN_DEADLINE = 60.0  # seconds for the broker to drain
RUN = uuid.uuid4().hex[:8]  # key prefix of this run


class WorkerCrash(Exception):
    """A worker dies here: its connections are dropped, its delivery unacked."""


class InjectedRollback(Exception):
    """The handler fails after its write; the transaction rolls back."""


# --- the broker ---------------------------------------------------------------


@dataclass
class Message:
    n: int
    key: str
    account: int
    amount: int
    card: str = "ok"

    @property
    def payload(self):
        return {"order": self.n, "account": self.account, "amount": self.amount,
                "card": self.card}


class Twin:
    """Two copies of one message that start at the same moment."""

    def __init__(self):
        self.barrier = threading.Barrier(2)

    def meet(self):
        try:
            self.barrier.wait(timeout=5)
        except threading.BrokenBarrierError:
            pass  # only timing is lost, not correctness


@dataclass
class Delivery:
    msg: Message
    twin: Optional[Twin] = None
    payload: Any = None  # what this copy carries


class Broker:
    """At-least-once delivery with manual acks. The second copy of a twin is
    handed to the very next get(), so a worker waiting at a twin's barrier
    is always met by the next free worker. Drained when nothing is queued or
    in flight."""

    def __init__(self, deadline):
        self.cv = threading.Condition()
        self.queue = []  # heap of (due, seq, [deliveries])
        self.seq = itertools.count()
        self.next_up = None
        self.in_flight = 0
        self.deadline = deadline
        self.timed_out = False
        self.aborted = False

    def abort(self):
        """An unexpected error: the test fails, so stop at once."""
        with self.cv:
            self.aborted = True
            self.cv.notify_all()

    def publish(self, due, *deliveries):
        with self.cv:
            heapq.heappush(self.queue, (due, next(self.seq), list(deliveries)))
            self.cv.notify_all()

    def get(self):
        with self.cv:
            while True:
                now = time.monotonic()
                if self.aborted:
                    return None
                if now > self.deadline:
                    self.timed_out = True
                    self.cv.notify_all()
                    return None
                if self.next_up is not None:
                    d, self.next_up = self.next_up, None
                    self.in_flight += 1
                    return d
                if self.queue and self.queue[0][0] <= now:
                    group = heapq.heappop(self.queue)[2]
                    if len(group) > 1:
                        self.next_up = group[1]
                        self.cv.notify_all()
                    self.in_flight += 1
                    return group[0]
                if not self.queue and self.in_flight == 0:
                    self.cv.notify_all()
                    return None
                wait = self.queue[0][0] - now if self.queue else 0.5
                self.cv.wait(min(wait, 0.5))

    def ack(self, d):
        with self.cv:
            self.in_flight -= 1
            self.cv.notify_all()

    def nack(self, d, delay):
        with self.cv:
            self.in_flight -= 1
            heapq.heappush(self.queue, (time.monotonic() + delay, next(self.seq), [d]))
            self.cv.notify_all()


def schedule(broker, messages, rng):
    """Every message 2 or 3 times: twins, a later redelivery, or both."""
    start = time.monotonic()
    twins = 0
    for i, m in enumerate(messages):
        due = start + i * 0.008
        shape = rng.choice(["twin", "later", "twin+later"])
        if "twin" in shape:
            t = Twin()
            broker.publish(due, Delivery(m, t, m.payload), Delivery(m, t, m.payload))
            twins += 1
        else:
            broker.publish(due, Delivery(m, None, m.payload))
        if "later" in shape:
            broker.publish(due + rng.uniform(0.05, 1.5), Delivery(m, None, m.payload))
    return twins


def run_workers(broker, make_worker):
    """WORKERS threads, each running make_worker(i, errors) until the broker
    is drained (or aborted); returns the errors they met."""
    errors = []
    threads = [threading.Thread(target=make_worker(i, errors), daemon=True)
               for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(RUN_DEADLINE + 30)
    if any(t.is_alive() for t in threads):
        errors.append("a worker did not stop")
    if broker.timed_out:
        errors.append(f"the broker did not drain within {RUN_DEADLINE} s")
    return errors


class Faults:
    """Faults planned per message key, each fired once, by the first
    delivery that reaches it."""

    def __init__(self, plan):
        self.lock = threading.Lock()
        self.plan = dict(plan)
        self.fired = defaultdict(list)  # fault -> [(key, attempt or None)]

    def take(self, key, attempt=None):
        with self.lock:
            fault = self.plan.pop(key, None)
            if fault:
                self.fired[fault].append((key, attempt))
            return fault


def plan_faults(messages, rng, counts):
    keys = [m.key for m in messages]
    rng.shuffle(keys)
    plan = {}
    for fault, count in counts.items():
        for _ in range(count):
            plan[keys.pop()] = fault
    return plan


# --- the tests ----------------------------------------------------------------


class ExactlyOnce(unittest.TestCase):

    def messages(self, rng, scope):
        return [Message(n, f"{RUN}:{scope}:{n}", 1 + rng.randrange(ACCOUNTS),
                        1 + rng.randrange(1000))
                for n in range(MESSAGES)]

    def test_transactional_pattern(self):
        rng = random.Random(SEED)
        scope = "example-credits"
        messages = self.messages(rng, "credit")
        faults = Faults(plan_faults(messages, rng,
                                    {"rollback": 8, "kill": 8, "ack_lost": 8}))
        with psycopg.connect(autocommit=True) as admin:
            admin.execute("DELETE FROM accounts")
            admin.execute("INSERT INTO accounts (id) SELECT generate_series(1, %s)", (ACCOUNTS,))

        applied = Counter()  # key -> committed transactions that applied it
        skipped = Counter()
        lock = threading.Lock()
        broker = Broker(time.monotonic() + RUN_DEADLINE)
        twins = schedule(broker, messages, rng)

        def handle(conn, d):
            m = d.msg
            fault = None
            with conn.transaction():
                new = ic.credit_once(conn, scope, m.key, m.account, m.amount)
                time.sleep(0.002)  # the rest of the message's work, in the transaction
                if new:
                    fault = faults.take(m.key)
                    if fault == "rollback":
                        raise InjectedRollback()
                    if fault == "kill":
                        conn.close()  # the process dies: the server rolls back
                        raise WorkerCrash()
            with lock:
                (applied if new else skipped)[m.key] += 1
            if fault == "ack_lost":
                raise WorkerCrash()  # committed, never acked: redelivered

        def make_worker(i, errors):
            def loop():
                conn = psycopg.connect()
                while (d := broker.get()) is not None:
                    if d.twin:
                        d.twin.meet()
                        d.twin = None  # a redelivery of this copy comes alone
                    try:
                        handle(conn, d)
                        broker.ack(d)
                    except InjectedRollback:
                        broker.nack(d, RETRY_DELAY)
                    except WorkerCrash:
                        conn.close()
                        broker.nack(d, VISIBILITY_TIMEOUT)
                        conn = psycopg.connect()  # the worker's replacement
                    except Exception as e:  # noqa: BLE001 - any other error fails the test
                        errors.append(f"worker {i}, {d.msg.key}: {e!r}")
                        broker.abort()
                conn.close()
            return loop

        problems = run_workers(broker, make_worker)

        expected = Counter()
        for m in messages:
            expected[m.account] += m.amount
        with psycopg.connect(autocommit=True) as conn:
            balances = dict(conn.execute("SELECT id, balance FROM accounts").fetchall())
            for acc in range(1, ACCOUNTS + 1):
                if balances.get(acc) != expected[acc]:
                    problems.append(f"account {acc}: balance {balances.get(acc)}, "
                                    f"expected {expected[acc]}")
            wrong = [(m.key, applied[m.key]) for m in messages if applied[m.key] != 1]
            if wrong:
                problems.append(f"{len(wrong)} messages not applied exactly once "
                                f"(key, times): {wrong[:5]}")
            statuses = Counter(ic.lookup(conn, scope, m.key)[0] for m in messages)
            if statuses != Counter({"completed": MESSAGES}):
                problems.append(f"record statuses {dict(statuses)}, expected all completed")
            for fault in ("rollback", "kill", "ack_lost"):
                if len(faults.fired[fault]) != 8:
                    problems.append(f"fault {fault} fired {len(faults.fired[fault])} times, not 8")

            # Every message once more, after the fact: all duplicates.
            replayed_new = 0
            for m in messages:
                with conn.transaction():
                    replayed_new += ic.credit_once(conn, scope, m.key, m.account, m.amount)
            if replayed_new:
                problems.append(f"{replayed_new} late redeliveries were applied again")
            after = dict(conn.execute("SELECT id, balance FROM accounts").fetchall())
            if after != balances:
                problems.append("late redeliveries changed balances")

        print(f"\ntransactional (seed {SEED}): {MESSAGES} messages, "
              f"{sum(applied.values()) + sum(skipped.values())} committed deliveries, "
              f"{sum(skipped.values())} duplicates skipped, {twins} twins, faults "
              f"{ {f: len(v) for f, v in faults.fired.items()} }; balances "
              f"{'==' if balances == dict(expected) else '!='} exactly-once sums",
              file=sys.stderr)
        self.assertEqual([], problems, "\n".join(problems))

    def test_claim_protocol(self):
        rng = random.Random(SEED + 1)
        scope = "example-payments"
        messages = self.messages(rng, "pay")
        plan = plan_faults(messages, rng, {"unavailable": 10, "crash": 6, "stall": 2,
                                           "stall_late": 2, "declined": 6})
        for m in messages:
            if plan.get(m.key) == "declined":
                m.card = "declined"  # the service declines it every time
                del plan[m.key]
        faults = Faults(plan)
        outcomes = defaultdict(Counter)  # key -> action -> count
        done_results = {}  # key -> result the consumer recorded with idem_complete
        superseded = []  # (key, attempt) of completions refused as stale
        slow_takeover = set()  # keys whose next holder calls slowly
        lock = threading.Lock()
        broker = Broker(time.monotonic() + RUN_DEADLINE)
        twins = schedule(broker, messages, rng)

        def handle(db, service, d):
            m = d.msg

            def call(attempt):
                fault = faults.take(m.key, attempt)
                result = service.charge(m.key, attempt, m.amount, m.card,
                                        unavailable=fault == "unavailable")
                if fault == "crash":
                    raise WorkerCrash()  # charged, never completed
                if fault == "stall":
                    slow_takeover.add(m.key)
                    wait_for_takeover(db, scope, m.key, attempt, completed=False)
                if fault == "stall_late":
                    wait_for_takeover(db, scope, m.key, attempt, completed=True)
                if not fault and m.key in slow_takeover:
                    time.sleep(0.3)  # the stalled holder wakes up meanwhile
                return result

            out = ic.call_once(db, scope, m.key, d.payload, call, lease=LEASE, ttl="1 day")
            with lock:
                outcomes[m.key][out.action] += 1
                if out.action == "done":
                    done_results[m.key] = (out.attempt, out.result)
                if out.action == "superseded":
                    superseded.append((m.key, out.attempt))
            return out.action != "retry_later"

        def make_worker(i, errors):
            def loop():
                db, service = psycopg.connect(autocommit=True), PaymentService()
                while (d := broker.get()) is not None:
                    if d.twin:
                        d.twin.meet()
                        d.twin = None  # a redelivery of this copy comes alone
                    try:
                        if handle(db, service, d):
                            broker.ack(d)
                        else:
                            broker.nack(d, RETRY_DELAY)
                    except WorkerCrash:
                        db.close()
                        service.close()
                        broker.nack(d, VISIBILITY_TIMEOUT)
                        db, service = psycopg.connect(autocommit=True), PaymentService()
                    except Exception as e:  # noqa: BLE001 - any other error fails the test
                        errors.append(f"worker {i}, {d.msg.key}: {e!r}")
                        broker.abort()
                db.close()
                service.close()
            return loop

        problems = run_workers(broker, make_worker)

        declined = {m.key for m in messages if m.card == "declined"}
        crashed = {k: a for k, a in faults.fired["crash"]}
        stalled = {k: a for k, a in faults.fired["stall"] + faults.fired["stall_late"]}
        with psycopg.connect(autocommit=True) as conn:
            rows = conn.execute(
                "SELECT idempotency_key, attempt, amount, outcome, charge_id, requests"
                " FROM payment_requests WHERE idempotency_key LIKE %s",
                (f"{RUN}:pay:%",)).fetchall()
            calls = defaultdict(list)
            for key, attempt, amount, outcome, charge_id, requests in rows:
                calls[key].append((attempt, amount, outcome, charge_id))
                if requests != 1:
                    problems.append(f"{key} attempt {attempt}: the service was called "
                                    f"{requests} times for one attempt")
            statuses = Counter()
            stored = {}
            for m in messages:
                status, attempt, result, last_error, expires_at = ic.lookup(conn, scope, m.key)
                statuses[status] += 1
                charges = {a: (amt, cid) for a, amt, o, cid in calls[m.key] if o == "charged"}
                if m.key in declined:
                    if status != "dead" or last_error != "card declined":
                        problems.append(f"{m.key}: {status}/{last_error!r}, expected dead")
                    declines = [c for c in calls[m.key] if c[2] == "declined"]
                    if charges or len(declines) != 1:
                        problems.append(f"{m.key}: declined card called {calls[m.key]}")
                    continue
                if status != "completed":
                    problems.append(f"{m.key}: status {status}, expected completed")
                    continue
                stored[m.key] = result
                orphans = {a for a in charges if a != attempt}
                expected_orphans = {a for k, a in list(crashed.items()) + list(stalled.items())
                                    if k == m.key}
                if orphans != expected_orphans:
                    problems.append(f"{m.key}: charged by attempts {sorted(charges)}, "
                                    f"completed by {attempt}; crashed/stalled after "
                                    f"charging: {sorted(expected_orphans)}")
                if attempt not in charges or result != {
                        "charge_id": charges[attempt][1], "attempt": attempt,
                        "amount": m.amount}:
                    problems.append(f"{m.key}: stored result {result} is not the charge of "
                                    f"attempt {attempt}: {charges.get(attempt)}")
                if attempt != max((a for a, *_ in calls[m.key]), default=None):
                    problems.append(f"{m.key}: completed by attempt {attempt}, but the "
                                    f"service saw {sorted(a for a, *_ in calls[m.key])}")
                if done_results.get(m.key) != (attempt, result):
                    problems.append(f"{m.key}: the completing consumer got "
                                    f"{done_results.get(m.key)}, the record holds "
                                    f"{(attempt, result)}")
                if expires_at < datetime.now(timezone.utc) + timedelta(hours=23):
                    problems.append(f"{m.key}: expires_at {expires_at}, ttl was 1 day")
            for fault, want in (("unavailable", 10), ("crash", 6), ("stall", 2),
                                ("stall_late", 2)):
                if len(faults.fired[fault]) != want:
                    problems.append(f"fault {fault} fired {len(faults.fired[fault])} times, "
                                    f"not {want}")
            unavailable = sum(1 for r in rows if r[3] == "unavailable")
            if unavailable != 10:
                problems.append(f"{unavailable} calls answered 503, not 10")
            if sorted(superseded) != sorted(stalled.items()):
                problems.append(f"stale completions refused: {sorted(superseded)}, "
                                f"stalled: {sorted(stalled.items())}")
            if not any(o["retry_later"] for o in outcomes.values()):
                problems.append("no delivery ever found its message in progress")

            # Afterwards: each message again, and a tampered copy of some.
            def no_call(attempt):
                problems.append("a late redelivery called the service")
                return {}
            for m in messages:
                out = ic.call_once(conn, scope, m.key, m.payload, no_call, lease=LEASE)
                want = "dead_letter" if m.key in declined else "replayed"
                if out.action != want or (want == "replayed" and out.result != stored.get(m.key)):
                    problems.append(f"{m.key}: late redelivery {out}, expected {want}")
            for m in [m for m in messages if m.key not in declined][:5]:
                tampered = dict(m.payload, amount=m.amount + 1)
                out = ic.call_once(conn, scope, m.key, tampered, no_call, lease=LEASE)
                if out.action != "rejected":
                    problems.append(f"{m.key}: a copy with another payload got {out}")
            charged_total = sum(1 for r in rows if r[3] == "charged")

        print(f"\nclaim protocol (seed {SEED}): {MESSAGES} messages, {twins} twins, "
              f"{charged_total} charges ({len(crashed) + len(stalled)} orphans of crashed "
              f"or stalled attempts), statuses {dict(statuses)}, deliveries "
              f"{dict(sum(outcomes.values(), Counter()))}",
              file=sys.stderr)
        self.assertEqual([], problems, "\n".join(problems[:40]))


def wait_for_takeover(db, scope, key, attempt, completed):
    """A stalled worker (a long GC pause, a frozen VM) wakes up only once its
    lease ran out and another worker claimed the key (and, if completed,
    also completed it)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status, now_attempt, *_ = ic.lookup(db, scope, key)
        if now_attempt > attempt and (status == "completed" or not completed):
            return
        time.sleep(0.02)


class PaymentService:
    """A payment API that is not idempotent: every call it receives for a
    card that is not declined is a new charge. Its books are the table
    payment_requests, written through its own autocommit connection; the
    caller's idempotency key and attempt only label the request (a second
    request for the same attempt is counted, not deduplicated)."""

    def __init__(self):
        self.conn = psycopg.connect(autocommit=True)

    def charge(self, key, attempt, amount, card, unavailable=False):
        outcome = ("unavailable" if unavailable else
                   "declined" if card == "declined" else "charged")
        charge_id = f"ch_{uuid.uuid4().hex[:16]}" if outcome == "charged" else None
        self.conn.execute(
            "INSERT INTO payment_requests (idempotency_key, attempt, amount, outcome, charge_id)"
            " VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT (idempotency_key, attempt)"
            " DO UPDATE SET requests = payment_requests.requests + 1",
            (key, attempt, amount, outcome, charge_id))
        if outcome == "unavailable":
            raise ic.TransientError("payment service unavailable (503)")
        if outcome == "declined":
            raise ic.PermanentError("card declined")
        # Member order differs from jsonb's: it comes back reordered.
        return {"charge_id": charge_id, "attempt": attempt, "amount": amount}

    def close(self):
        self.conn.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
