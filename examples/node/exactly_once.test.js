// Exactly-once test of idem_consumer.js under redeliveries and crashes; the
// same scenarios and checks as examples/python/exactly_once_test.py.
//
// An in-process broker deals every message 2 or 3 times to WORKERS
// concurrent workers, each with its own connections: as "twins" (two copies
// handed to two workers that start together) and/or as a later redelivery.
// Workers crash on purpose, and the checks at the end compare what happened
// with what exactly-once means:
//
// 'transactional pattern' (creditOnce: claim and credit in one statement)
//   Faults, each on the first delivery that claimed its message: rollback
//   after the credit, a connection closed inside the transaction (a crash:
//   the broker redelivers), a crash after COMMIT before the ack (the
//   redelivery must be a duplicate). Checked: every balance is the sum of its
//   distinct messages, each message was applied by exactly one committed
//   transaction, every key is 'completed', a final redelivery of every
//   message changes nothing.
//
// 'claim protocol' (callOnce around a fake payment service that is not
//   idempotent: every call is a charge, recorded in payment_requests by
//   (idempotency_key, attempt) through the service's own connection)
//   Faults: the service answers 503 once (the consumer releases the claim),
//   declines some cards (idem_fail, not retryable), a worker crashes after
//   the charge and before idem_complete (its lease runs out and a redelivery
//   claims the key again), a worker stalls after the charge until its claim
//   was taken over and then completes with its stale token (refused): twice
//   while the new holder is still calling (its call is slowed down), twice
//   after the new holder completed.
//   Checked per message: 'completed' (or 'dead' for a declined card); no
//   attempt called the service twice; the charges are one per message plus
//   exactly those of the crashed and stalled attempts (orphans a
//   reconciliation would refund); the stored result is the charge of the
//   attempt that holds the record, the latest, and the one its consumer got;
//   every stale completion was refused; afterwards every redelivery replays
//   the stored result without a call, and a copy with another payload is
//   rejected (IDM01).
//
// Connection: libpq's environment (PGHOST, PGPORT, PGUSER, PGDATABASE), as a
// role with the consumer grants (examples/run sets it up). SEED=n replays a
// schedule; the key prefix is new each run. Run: node --test exactly_once.test.js
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const pg = require('pg');
const idem = require('./idem_consumer');

const SEED = Number(process.env.SEED ?? crypto.randomInt(2 ** 30));
const WORKERS = 6;
const MESSAGES = 150;
const ACCOUNTS = 8;
const LEASE = '2 seconds'; // short, so that crashed claims are taken over soon
const RETRY_DELAY = 100; // ms: a nacked delivery comes back after this
const VISIBILITY_TIMEOUT = 300; // ms: a crashed worker's delivery comes back after this
const RUN_DEADLINE = 60000; // ms for the broker to drain
const RUN = crypto.randomBytes(4).toString('hex'); // key prefix of this run

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

class WorkerCrash extends Error {} // the worker dies: connections dropped, delivery unacked
class InjectedRollback extends Error {}

// mulberry32: a small seeded generator, so that SEED replays a schedule.
function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (n) => Math.floor(next() * n),
    pick: (xs) => xs[Math.floor(next() * xs.length)],
    uniform: (lo, hi) => lo + next() * (hi - lo),
  };
}

// Every connection a test opened is closed when the tests end, also after a
// failure (an open connection would keep node running).
const openClients = new Set();
test.after(() => Promise.all([...openClients].map((c) => c.end().catch(() => {}))));

async function connect() {
  const client = new pg.Client();
  client.on('error', () => {}); // a connection we dropped on purpose
  openClients.add(client);
  client.once('end', () => openClients.delete(client));
  await client.connect();
  return client;
}

// --- the broker -------------------------------------------------------------

class Twin { // two copies of one message that start at the same moment
  constructor() { this.arrived = 0; this.waiting = []; }
  meet() {
    if (++this.arrived >= 2) {
      this.waiting.forEach((resolve) => resolve());
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      setTimeout(resolve, 5000).unref(); // only timing is lost, not correctness
    });
  }
}

// At-least-once delivery with manual acks. The second copy of a twin is handed
// to the very next get(). Drained when nothing is queued or in flight.
class Broker {
  constructor() {
    this.queue = []; // [{ due, seq, group }], sorted by (due, seq)
    this.seq = 0;
    this.nextUp = null;
    this.inFlight = 0;
    this.deadline = Date.now() + RUN_DEADLINE;
    this.timedOut = false;
    this.aborted = false;
    this.wakers = new Set();
  }

  abort() { // an unexpected error: the test fails, so stop at once
    this.aborted = true;
    this.wake();
  }

  publish(due, ...group) {
    const entry = { due, seq: this.seq++, group };
    let i = this.queue.length;
    while (i > 0 && this.queue[i - 1].due > due) i--;
    this.queue.splice(i, 0, entry);
    this.wake();
  }

  wake() {
    for (const w of this.wakers) w();
    this.wakers.clear();
  }

  async get() {
    for (;;) {
      const now = Date.now();
      if (this.aborted) return null;
      if (now > this.deadline) {
        this.timedOut = true;
        this.wake();
        return null;
      }
      if (this.nextUp) {
        const d = this.nextUp;
        this.nextUp = null;
        this.inFlight++;
        return d;
      }
      if (this.queue.length && this.queue[0].due <= now) {
        const { group } = this.queue.shift();
        if (group.length > 1) {
          this.nextUp = group[1];
          this.wake();
        }
        this.inFlight++;
        return group[0];
      }
      if (!this.queue.length && this.inFlight === 0) {
        this.wake();
        return null;
      }
      const wait = this.queue.length ? this.queue[0].due - now : 500;
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, Math.min(Math.max(wait, 1), 500));
        this.wakers.add(() => { clearTimeout(timer); resolve(); });
      });
    }
  }

  ack() {
    this.inFlight--;
    this.wake();
  }

  nack(d, delay) {
    this.inFlight--;
    this.publish(Date.now() + delay, d);
  }
}

// Every message 2 or 3 times: twins, a later redelivery, or both.
function schedule(broker, messages, r) {
  const start = Date.now();
  let twins = 0;
  messages.forEach((m, i) => {
    const due = start + i * 8;
    const shape = r.pick(['twin', 'later', 'twin+later']);
    if (shape.includes('twin')) {
      const t = new Twin();
      broker.publish(due, { msg: m, twin: t, payload: m.payload }, { msg: m, twin: t, payload: m.payload });
      twins++;
    } else {
      broker.publish(due, { msg: m, payload: m.payload });
    }
    if (shape.includes('later')) broker.publish(due + r.uniform(50, 1500), { msg: m, payload: m.payload });
  });
  return twins;
}

// Faults planned per message key, each fired once, by the first delivery that
// reaches it.
class Faults {
  constructor(plan) { this.plan = new Map(plan); this.fired = new Map(); }
  take(key, attempt = null) {
    const fault = this.plan.get(key);
    if (!fault) return null;
    this.plan.delete(key);
    if (!this.fired.has(fault)) this.fired.set(fault, []);
    this.fired.get(fault).push([key, attempt]);
    return fault;
  }
  count(fault) { return (this.fired.get(fault) ?? []).length; }
}

function planFaults(messages, r, counts) {
  const keys = messages.map((m) => m.key);
  for (let i = keys.length - 1; i > 0; i--) { // shuffle
    const j = r.int(i + 1);
    [keys[i], keys[j]] = [keys[j], keys[i]];
  }
  const plan = [];
  for (const [fault, count] of Object.entries(counts)) {
    for (let i = 0; i < count; i++) plan.push([keys.pop(), fault]);
  }
  return plan;
}

function makeMessages(r, scope) {
  return Array.from({ length: MESSAGES }, (_, n) => ({
    n,
    key: `${RUN}:${scope}:${n}`,
    account: 1 + r.int(ACCOUNTS),
    amount: 1 + r.int(1000),
    card: 'ok',
    get payload() { return { order: this.n, account: this.account, amount: this.amount, card: this.card }; },
  }));
}

// Runs WORKERS copies of work(errors) until the broker is drained.
async function runWorkers(broker, work) {
  const errors = [];
  await Promise.all(Array.from({ length: WORKERS }, (_, i) => work(i, errors)));
  if (broker.timedOut) errors.push(`the broker did not drain within ${RUN_DEADLINE} ms`);
  return errors;
}

// --- the tests --------------------------------------------------------------

test('transactional pattern', async () => {
  const r = rng(SEED);
  const scope = 'example-credits';
  const messages = makeMessages(r, 'credit');
  const faults = new Faults(planFaults(messages, r, { rollback: 8, kill: 8, ack_lost: 8 }));
  const admin = await connect();
  await admin.query('DELETE FROM accounts');
  await admin.query('INSERT INTO accounts (id) SELECT generate_series(1, $1::int)', [ACCOUNTS]);

  const applied = new Map(); // key -> committed transactions that applied it
  let skipped = 0;
  const broker = new Broker();
  const twins = schedule(broker, messages, r);

  async function handle(client, d) {
    const m = d.msg;
    let fault = null;
    const isNew = await idem.inTransaction(client, async () => {
      const n = await idem.creditOnce(client, scope, m.key, m.account, m.amount);
      await sleep(2); // the rest of the message's work, in the transaction
      if (n) fault = faults.take(m.key);
      if (fault === 'rollback') throw new InjectedRollback();
      if (fault === 'kill') {
        await client.end(); // the process dies: the server rolls back
        throw new WorkerCrash();
      }
      return n;
    });
    if (isNew) applied.set(m.key, (applied.get(m.key) ?? 0) + 1);
    else skipped++;
    if (fault === 'ack_lost') throw new WorkerCrash(); // committed, never acked
  }

  const problems = await runWorkers(broker, async (i, errors) => {
    let client = await connect();
    for (let d; (d = await broker.get()) !== null;) {
      if (d.twin) {
        await d.twin.meet();
        d.twin = null; // a redelivery of this copy comes alone
      }
      try {
        await handle(client, d);
        broker.ack(d);
      } catch (e) {
        if (e instanceof InjectedRollback) {
          broker.nack(d, RETRY_DELAY);
          continue;
        }
        if (!(e instanceof WorkerCrash)) {
          errors.push(`worker ${i}, ${d.msg.key}: ${e.stack}`);
          broker.abort();
          break;
        }
        await client.end().catch(() => {});
        broker.nack(d, VISIBILITY_TIMEOUT);
        client = await connect(); // the worker's replacement
      }
    }
    await client.end().catch(() => {});
  });

  const expected = new Map();
  for (const m of messages) expected.set(m.account, (expected.get(m.account) ?? 0) + m.amount);
  const balances = async () => new Map((await admin.query('SELECT id, balance::int AS balance FROM accounts'))
    .rows.map((row) => [row.id, row.balance]));
  const before = await balances();
  for (let acc = 1; acc <= ACCOUNTS; acc++) {
    if (before.get(acc) !== (expected.get(acc) ?? 0)) {
      problems.push(`account ${acc}: balance ${before.get(acc)}, expected ${expected.get(acc) ?? 0}`);
    }
  }
  const wrong = messages.filter((m) => applied.get(m.key) !== 1).map((m) => [m.key, applied.get(m.key) ?? 0]);
  if (wrong.length) problems.push(`${wrong.length} messages not applied exactly once (key, times): ${JSON.stringify(wrong.slice(0, 5))}`);
  const statuses = {};
  for (const m of messages) {
    const { status } = await idem.lookup(admin, scope, m.key);
    statuses[status] = (statuses[status] ?? 0) + 1;
  }
  if (statuses.completed !== MESSAGES) problems.push(`record statuses ${JSON.stringify(statuses)}, expected all completed`);
  for (const f of ['rollback', 'kill', 'ack_lost']) {
    if (faults.count(f) !== 8) problems.push(`fault ${f} fired ${faults.count(f)} times, not 8`);
  }

  // Every message once more, after the fact: all duplicates.
  let replayedNew = 0;
  for (const m of messages) {
    if (await idem.inTransaction(admin, () => idem.creditOnce(admin, scope, m.key, m.account, m.amount))) replayedNew++;
  }
  if (replayedNew) problems.push(`${replayedNew} late redeliveries were applied again`);
  const after = await balances();
  if ([...after].some(([acc, b]) => before.get(acc) !== b)) problems.push('late redeliveries changed balances');
  await admin.end();

  let committed = skipped;
  for (const n of applied.values()) committed += n;
  console.log(`transactional (seed ${SEED}): ${MESSAGES} messages, ${committed} committed deliveries, `
    + `${skipped} duplicates skipped, ${twins} twins, faults ${JSON.stringify(Object.fromEntries([...faults.fired].map(([f, v]) => [f, v.length])))}`);
  assert.deepEqual(problems, []);
});

// A payment API that is not idempotent: every call it receives for a card
// that is not declined is a new charge. Its books are payment_requests,
// written through its own connection; the idempotency key and attempt only
// label the request (a second request for one attempt is counted, not merged).
class PaymentService {
  static async open() {
    const s = new PaymentService();
    s.client = await connect();
    return s;
  }

  async charge(key, attempt, amount, card, unavailable = false) {
    const outcome = unavailable ? 'unavailable' : card === 'declined' ? 'declined' : 'charged';
    const chargeId = outcome === 'charged' ? `ch_${crypto.randomBytes(8).toString('hex')}` : null;
    await this.client.query(
      `INSERT INTO payment_requests (idempotency_key, attempt, amount, outcome, charge_id)
       VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (idempotency_key, attempt) DO UPDATE SET requests = payment_requests.requests + 1`,
      [key, attempt, amount, outcome, chargeId]);
    if (outcome === 'unavailable') throw new idem.TransientError('payment service unavailable (503)');
    if (outcome === 'declined') throw new idem.PermanentError('card declined');
    // Member order differs from jsonb's: it comes back reordered.
    return { charge_id: chargeId, attempt, amount };
  }

  close() { return this.client.end().catch(() => {}); }
}

// A stalled worker (a long GC pause, a frozen VM) wakes up only once its lease
// ran out and another worker claimed the key (and, if completed, completed it).
async function waitForTakeover(db, scope, key, attempt, completed) {
  const deadline = Date.now() + 20000;
  while (Date.now() < deadline) {
    const rec = await idem.lookup(db, scope, key);
    if (rec.attempt > attempt && (rec.status === 'completed' || !completed)) return;
    await sleep(20);
  }
}

test('claim protocol', async () => {
  const r = rng(SEED + 1);
  const scope = 'example-payments';
  const messages = makeMessages(r, 'pay');
  const plan = planFaults(messages, r, { unavailable: 10, crash: 6, stall: 2, stall_late: 2, declined: 6 });
  const declined = new Set();
  for (const [key, fault] of plan) {
    if (fault === 'declined') declined.add(key);
  }
  for (const m of messages) if (declined.has(m.key)) m.card = 'declined'; // declined every time
  const faults = new Faults(plan.filter(([, f]) => f !== 'declined'));
  const outcomes = new Map(); // key -> { action: count }
  const doneResults = new Map(); // key -> { attempt, result } the completing consumer had
  const superseded = []; // [key, attempt] of completions refused as stale
  const slowTakeover = new Set(); // keys whose next holder calls slowly
  const broker = new Broker();
  const twins = schedule(broker, messages, r);

  async function handle(db, service, d) {
    const m = d.msg;
    const out = await idem.callOnce(db, scope, m.key, d.payload, async (attempt) => {
      const fault = faults.take(m.key, attempt);
      const result = await service.charge(m.key, attempt, m.amount, m.card, fault === 'unavailable');
      if (fault === 'crash') throw new WorkerCrash(); // charged, never completed
      if (fault === 'stall') {
        slowTakeover.add(m.key);
        await waitForTakeover(db, scope, m.key, attempt, false);
      }
      if (fault === 'stall_late') await waitForTakeover(db, scope, m.key, attempt, true);
      if (!fault && slowTakeover.has(m.key)) await sleep(300); // the stalled holder wakes up meanwhile
      return result;
    }, { lease: LEASE, ttl: '1 day' });
    const counts = outcomes.get(m.key) ?? {};
    counts[out.action] = (counts[out.action] ?? 0) + 1;
    outcomes.set(m.key, counts);
    if (out.action === 'done') doneResults.set(m.key, { attempt: out.attempt, result: out.result });
    if (out.action === 'superseded') superseded.push([m.key, out.attempt]);
    return out.action !== 'retry_later';
  }

  const problems = await runWorkers(broker, async (i, errors) => {
    let db = await connect();
    let service = await PaymentService.open();
    for (let d; (d = await broker.get()) !== null;) {
      if (d.twin) {
        await d.twin.meet();
        d.twin = null; // a redelivery of this copy comes alone
      }
      try {
        if (await handle(db, service, d)) broker.ack(d);
        else broker.nack(d, RETRY_DELAY);
      } catch (e) {
        if (!(e instanceof WorkerCrash)) {
          errors.push(`worker ${i}, ${d.msg.key}: ${e.stack}`);
          broker.abort();
          break;
        }
        await db.end().catch(() => {});
        await service.close();
        broker.nack(d, VISIBILITY_TIMEOUT);
        db = await connect(); // the worker's replacement
        service = await PaymentService.open();
      }
    }
    await db.end().catch(() => {});
    await service.close();
  });

  const crashed = new Map(faults.fired.get('crash') ?? []);
  const stalled = new Map([...(faults.fired.get('stall') ?? []), ...(faults.fired.get('stall_late') ?? [])]);
  const conn = await connect();
  const { rows } = await conn.query(
    `SELECT idempotency_key AS key, attempt, amount::int AS amount, outcome, charge_id, requests
       FROM payment_requests WHERE idempotency_key LIKE $1`, [`${RUN}:pay:%`]);
  const calls = new Map();
  for (const row of rows) {
    if (!calls.has(row.key)) calls.set(row.key, []);
    calls.get(row.key).push(row);
    if (row.requests !== 1) problems.push(`${row.key} attempt ${row.attempt}: the service was called ${row.requests} times for one attempt`);
  }
  const statuses = {};
  const stored = new Map();
  for (const m of messages) {
    const rec = await idem.lookup(conn, scope, m.key);
    statuses[rec.status] = (statuses[rec.status] ?? 0) + 1;
    const mine = calls.get(m.key) ?? [];
    const charges = new Map(mine.filter((c) => c.outcome === 'charged').map((c) => [c.attempt, c]));
    if (declined.has(m.key)) {
      if (rec.status !== 'dead' || rec.last_error !== 'card declined') problems.push(`${m.key}: ${rec.status}/${rec.last_error}, expected dead`);
      if (charges.size || mine.filter((c) => c.outcome === 'declined').length !== 1) problems.push(`${m.key}: declined card called ${JSON.stringify(mine)}`);
      continue;
    }
    if (rec.status !== 'completed') {
      problems.push(`${m.key}: status ${rec.status}, expected completed`);
      continue;
    }
    stored.set(m.key, rec.result);
    const orphans = [...charges.keys()].filter((a) => a !== rec.attempt).sort((a, b) => a - b);
    const expectedOrphans = [crashed.get(m.key), stalled.get(m.key)].filter((a) => a !== undefined).sort((a, b) => a - b);
    if (JSON.stringify(orphans) !== JSON.stringify(expectedOrphans)) {
      problems.push(`${m.key}: charged by attempts ${[...charges.keys()]}, completed by ${rec.attempt}; crashed/stalled after charging: ${expectedOrphans}`);
    }
    const charge = charges.get(rec.attempt);
    try {
      assert.ok(charge);
      assert.deepEqual(rec.result, { charge_id: charge.charge_id, attempt: rec.attempt, amount: m.amount });
    } catch {
      problems.push(`${m.key}: stored result ${JSON.stringify(rec.result)} is not the charge of attempt ${rec.attempt}: ${JSON.stringify(charge)}`);
    }
    if (rec.attempt !== Math.max(...mine.map((c) => c.attempt))) {
      problems.push(`${m.key}: completed by attempt ${rec.attempt}, but the service saw ${mine.map((c) => c.attempt)}`);
    }
    try {
      assert.deepEqual(doneResults.get(m.key), { attempt: rec.attempt, result: rec.result });
    } catch {
      problems.push(`${m.key}: the completing consumer got ${JSON.stringify(doneResults.get(m.key))}, the record holds ${JSON.stringify(rec)}`);
    }
    if (rec.expires_at < new Date(Date.now() + 23 * 3600 * 1000)) problems.push(`${m.key}: expires_at ${rec.expires_at.toISOString()}, ttl was 1 day`);
  }
  for (const [f, want] of [['unavailable', 10], ['crash', 6], ['stall', 2], ['stall_late', 2]]) {
    if (faults.count(f) !== want) problems.push(`fault ${f} fired ${faults.count(f)} times, not ${want}`);
  }
  const unavailable = rows.filter((row) => row.outcome === 'unavailable').length;
  if (unavailable !== 10) problems.push(`${unavailable} calls answered 503, not 10`);
  const pairs = (xs) => xs.map(([k, a]) => `${k}/${a}`).sort();
  if (JSON.stringify(pairs(superseded)) !== JSON.stringify(pairs([...stalled]))) {
    problems.push(`stale completions refused: ${pairs(superseded)}, stalled: ${pairs([...stalled])}`);
  }
  if (![...outcomes.values()].some((c) => c.retry_later)) problems.push('no delivery ever found its message in progress');

  // Afterwards: each message again, and a tampered copy of some.
  const noCall = async () => {
    problems.push('a late redelivery called the service');
    return {};
  };
  for (const m of messages) {
    const out = await idem.callOnce(conn, scope, m.key, m.payload, noCall, { lease: LEASE });
    const want = declined.has(m.key) ? 'dead_letter' : 'replayed';
    let same = true;
    try {
      if (want === 'replayed') assert.deepEqual(out.result, stored.get(m.key));
    } catch { same = false; }
    if (out.action !== want || !same) problems.push(`${m.key}: late redelivery ${JSON.stringify(out)}, expected ${want}`);
  }
  for (const m of messages.filter((x) => !declined.has(x.key)).slice(0, 5)) {
    const out = await idem.callOnce(conn, scope, m.key, { ...m.payload, amount: m.amount + 1 }, noCall, { lease: LEASE });
    if (out.action !== 'rejected') problems.push(`${m.key}: a copy with another payload got ${JSON.stringify(out)}`);
  }
  await conn.end();

  const actions = {};
  for (const c of outcomes.values()) for (const [a, n] of Object.entries(c)) actions[a] = (actions[a] ?? 0) + n;
  console.log(`claim protocol (seed ${SEED}): ${MESSAGES} messages, ${twins} twins, `
    + `${rows.filter((row) => row.outcome === 'charged').length} charges (${crashed.size + stalled.size} orphans of crashed or stalled attempts), `
    + `statuses ${JSON.stringify(statuses)}, deliveries ${JSON.stringify(actions)}`);
  assert.deepEqual(problems, []);
});
