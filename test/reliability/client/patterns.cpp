// The four consumers, one per pg_idem pattern, with their injected faults.
// See patterns.hpp for what acknowledged means. Every effect is written
// together with a row in `applied` (no unique key), so that an order applied
// twice shows up there as well as in the balances.
#include "patterns.hpp"

namespace reliability
{

const char *const kFaultNames[kFaults] = {
    "none",
    "rollback after the claim",
    "error inside the claiming statement",
    "error in a later statement",
    "error at COMMIT (deferred foreign key)",
    "connection dropped mid-transaction",
    "rollback to a savepoint before the claim, then COMMIT",
    "claim rolled back",
    "claim abandoned (lease runs out)",
    "idem_fail, retryable",
    "rollback after idem_complete",
    "idem_release",
    "a wrong or NULL token refused first",
};

const char *const kReasonNames[kReasons] = {
    "committed",
    "injected fault",
    "connection lost",
    "COMMIT outcome unknown",
    "claim in progress elsewhere",
    "version not reached yet",
    "completion refused (our token was stale)",
    "unexpected error",
};

bool parse_pattern(const std::string &name, Pattern *p)
{
	if (name == "try_insert")
		*p = Pattern::TryInsert;
	else if (name == "try_insert_row")
		*p = Pattern::TryInsertRow;
	else if (name == "versioned")
		*p = Pattern::Versioned;
	else if (name == "claim")
		*p = Pattern::Claim;
	else
		return false;
	return true;
}

std::vector<Fault> faults_of(Pattern p)
{
	if (p == Pattern::Claim)
		return {kClaimRolledBack,  kAbandon,         kFailRetryable, kRollbackAfterClaim,
		        kErrorInStatement, kErrorAfterClaim, kDisconnect,    kRollbackAfterComplete,
		        kErrorAtCommit,    kRelease,         kWrongToken};
	return {kRollbackAfterClaim, kErrorInStatement, kErrorAfterClaim,
	        kErrorAtCommit,      kDisconnect,       kSavepointRollback};
}

namespace
{

// The README's CTE form: the claim is evaluated exactly once, and the
// balance update and the `applied` row depend on its answer.
// reliability_fault(true) raises after the claim, inside the statement.
const std::string kTryInsertSql =
    "WITH d AS (SELECT idem_try_insert('storm', $1::text) AS first),\n"
    "     u AS (UPDATE accounts SET balance = balance + $3::bigint\n"
    "           FROM d WHERE d.first AND id = $2::int),\n"
    "     l AS (INSERT INTO applied (order_id, consumer)\n"
    "           SELECT $4::bigint, $5::int FROM d WHERE d.first)\n"
    "SELECT d.first, reliability_fault($6::boolean) FROM d";

const std::string kTryInsertRowSql =
    "WITH d AS (SELECT idem_try_insert_row('orders',\n"
    "               jsonb_build_object('order_id', $4::bigint, 'account', $1::int,\n"
    "                                  'amount', $2::bigint, 'consumer', $5::int)) AS first),\n"
    "     u AS (UPDATE accounts SET balance = balance + $2::bigint\n"
    "           FROM d WHERE d.first AND id = $1::int),\n"
    "     l AS (INSERT INTO applied (order_id, consumer)\n"
    "           SELECT $4::bigint, $5::int FROM d WHERE d.first)\n"
    "SELECT d.first, reliability_fault($3::boolean) FROM d";

// The message says: this order makes the account's version $2 + 1 and its
// balance $3.
const std::string kVersionedSql =
    "WITH v AS (SELECT idem_versioned_update('accounts', jsonb_build_object('id', $1::int),\n"
    "               $2::bigint, jsonb_build_object('balance', $3::bigint)) AS applied),\n"
    "     l AS (INSERT INTO applied (order_id, consumer)\n"
    "           SELECT $4::bigint, $5::int FROM v WHERE v.applied)\n"
    "SELECT v.applied, reliability_fault($6::boolean) FROM v";
const std::string kVersionSql = "SELECT version FROM accounts WHERE id = $1::int";

// The fingerprint is the message's payload as the consumer sees it, in a
// form of its own (pg_idem compares fingerprints as opaque text): every
// redelivery of an order carries the same one.
const std::string kBeginSql = "SELECT status, attempt, token FROM idem_begin('claim', $1::text, "
                              "fingerprint => $2::text)";
const std::string kEffectSql =
    "WITH u AS (UPDATE accounts SET balance = balance + $2::bigint WHERE id = $1::int),\n"
    "     l AS (INSERT INTO applied (order_id, consumer) VALUES ($3::bigint, $4::int))\n"
    "SELECT reliability_fault($5::boolean)";
const std::string kCompleteSql = "SELECT idem_complete('claim', $1::text, $2::uuid)";
const std::string kFailSql =
    "SELECT idem_fail('claim', $1::text, $2::uuid, 'injected fault', true)";
const std::string kReleaseSql = "SELECT idem_release('claim', $1::text, $2::uuid)";
// A token that is not the holder's: a fresh random one, or NULL.
const std::string kWrongCompleteSql =
    "SELECT idem_complete('claim', $1::text, CASE WHEN $2::boolean THEN gen_random_uuid() END)";

const std::string kFaultSql = "SELECT reliability_fault(true)";
const std::string kCommitTrapSql = "INSERT INTO commit_trap VALUES (0)";

Outcome nack(Reason r)
{
	Outcome o;
	o.reason = r;
	return o;
}

Outcome injected()
{
	Outcome o = nack(kInjected);
	o.fault_fired = true;
	return o;
}

Outcome unexpected(const std::string &what)
{
	Outcome o = nack(kUnexpected);
	o.error = what;
	return o;
}

const char *flag(bool b)
{
	return b ? "true" : "false";
}

// A statement failed. An injected error (SQLSTATE RL001) is expected only
// where the fault was planned.
Outcome on_error(Connection &c, const Reply &r, bool in_transaction, bool fault_planned)
{
	if (r.lost)
		return nack(in_transaction ? kConnectionLost : kCommitUnknown);
	if (in_transaction)
		c.exec("ROLLBACK");
	if (fault_planned && r.sqlstate == "RL001")
		return injected();
	return unexpected(r.sqlstate + " " + r.error);
}

Outcome rollback_injected(Connection &c)
{
	Reply r = c.exec("ROLLBACK");
	if (!r.ok && !r.lost)
		return unexpected("ROLLBACK failed: " + r.sqlstate + " " + r.error);
	return injected(); // lost or not, nothing of it committed
}

Outcome commit(Connection &c, bool applied)
{
	Reply r = c.exec("COMMIT");
	if (r.ok && r.tag == "COMMIT") {
		Outcome o;
		o.applied = applied;
		return o;
	}
	if (r.lost)
		return nack(kCommitUnknown);
	if (r.ok)
		return unexpected("COMMIT answered " + r.tag);
	return unexpected("COMMIT failed: " + r.sqlstate + " " + r.error);
}

// After the claim (and, in all but the claim protocol, the effect, which is
// in the same statement): carry out the fault, or commit.
Outcome finish(Connection &c, Fault f, bool applied)
{
	switch (f) {
	case kRollbackAfterClaim:
	case kRollbackAfterComplete:
		return rollback_injected(c);
	case kErrorAfterClaim: {
		Reply r = c.exec(kFaultSql);
		if (r.ok)
			return unexpected("reliability_fault(true) did not raise");
		return on_error(c, r, true, true);
	}
	case kSavepointRollback: {
		Reply r = c.exec("ROLLBACK TO SAVEPOINT before_claim");
		if (!r.ok)
			return on_error(c, r, true, false);
		Outcome o = commit(c, false);
		// Committed, but without the claim: the message was not processed.
		return o.acked() ? injected() : o;
	}
	case kErrorAtCommit: {
		Reply r = c.exec(kCommitTrapSql);
		if (!r.ok)
			return on_error(c, r, true, false);
		r = c.exec("COMMIT");
		if (!r.ok && r.sqlstate == "23503")
			return injected();
		if (r.lost)
			return nack(kCommitUnknown);
		return unexpected("COMMIT with a violated deferred foreign key answered " +
		                  (r.ok ? r.tag : r.sqlstate + " " + r.error));
	}
	case kDisconnect:
		c.close();
		return injected();
	default:
		return commit(c, applied);
	}
}

// idem_try_insert, idem_try_insert_row, idem_versioned_update: BEGIN, one
// statement that claims and applies, then the fault or COMMIT.
Outcome one_statement(Consumer &c, Pattern p, const Order &o, Fault f)
{
	Connection &cn = *c.conn;
	std::string account = std::to_string(o.account), amount = std::to_string(o.amount),
	            order = std::to_string(o.id), consumer = std::to_string(c.id);
	const char *boom = flag(f == kErrorInStatement);
	Reply r = cn.exec("BEGIN");
	if (!r.ok)
		return on_error(cn, r, false, false);
	if (f == kSavepointRollback) {
		r = cn.exec("SAVEPOINT before_claim");
		if (!r.ok)
			return on_error(cn, r, true, false);
	}
	c.before_claim();
	if (p == Pattern::TryInsert)
		r = cn.exec(kTryInsertSql, {order, account, amount, order, consumer, boom});
	else if (p == Pattern::TryInsertRow)
		r = cn.exec(kTryInsertRowSql, {account, amount, boom, order, consumer});
	else
		r = cn.exec(kVersionedSql, {account, std::to_string(o.version - 1),
		                            std::to_string(o.balance_after), order, consumer, boom});
	if (!r.ok && p == Pattern::Versioned && r.sqlstate == "55000") {
		// A message ahead of its predecessor: it must wait for it.
		cn.exec("ROLLBACK");
		return nack(kNotYet);
	}
	if (!r.ok)
		return on_error(cn, r, true, f == kErrorInStatement);
	const auto &answer = r.value(0, 0);
	if (!answer) {
		cn.exec("ROLLBACK");
		return unexpected("the claiming statement answered NULL");
	}
	bool applied = *answer == "t";
	if (p == Pattern::Versioned && !applied) {
		// false: a replay, so the account is at this version or beyond.
		r = cn.exec(kVersionSql, {account});
		if (!r.ok || !r.value(0, 0))
			return on_error(cn, r, true, false);
		if (std::stoll(*r.value(0, 0)) < o.version) {
			cn.exec("ROLLBACK");
			return unexpected("idem_versioned_update answered false for a version not reached");
		}
	}
	return finish(cn, f, applied);
}

// The claim protocol: idem_begin in a transaction of its own, which hands the
// holder a token; the effect and idem_complete with that token in the next
// one, so that the effect commits with the completion; a rollback there
// leaves the claim in progress until its lease runs out and a redelivery
// takes it over (whose idem_complete then refuses the old token).
Outcome claim(Consumer &c, const Order &o, Fault f)
{
	Connection &cn = *c.conn;
	std::string key = std::to_string(o.id);
	std::string fingerprint = "order " + key + ": account " + std::to_string(o.account) +
	                          ", amount " + std::to_string(o.amount);
	Reply r;
	if (f == kClaimRolledBack) {
		r = cn.exec("BEGIN");
		if (!r.ok)
			return on_error(cn, r, false, false);
		c.before_claim();
		r = cn.exec(kBeginSql, {key, fingerprint});
		if (!r.ok)
			return on_error(cn, r, true, false);
		return rollback_injected(cn);
	}
	c.before_claim();
	r = cn.exec(kBeginSql, {key, fingerprint});
	if (!r.ok)
		return on_error(cn, r, false, false); // lost: the claim may have committed
	std::string status = r.value(0, 0).value_or("NULL");
	std::optional<std::string> token = r.value(0, 2); // a copy: r is reused below
	// The token is the holder's credential: handed out with 'acquired' only.
	if (status != "acquired" && token)
		return unexpected("idem_begin answered " + status + " with a token");
	if (status == "completed")
		return Outcome{}; // done before: acknowledge
	if (status == "in_progress")
		return nack(kInProgress);
	if (status != "acquired")
		return unexpected("idem_begin answered " + status);
	if (!token || !r.value(0, 1))
		return unexpected("idem_begin answered acquired without a token or an attempt");
	if (f == kAbandon)
		return injected();
	if (f == kFailRetryable || f == kRelease) {
		if (f == kFailRetryable)
			r = cn.exec(kFailSql, {key, *token});
		else
			r = cn.exec(kReleaseSql, {key, *token});
		if (!r.ok)
			return on_error(cn, r, false, false);
		return injected();
	}
	r = cn.exec("BEGIN");
	if (!r.ok)
		return on_error(cn, r, false, false);
	r = cn.exec(kEffectSql, {std::to_string(o.account), std::to_string(o.amount), key,
	                         std::to_string(c.id), flag(f == kErrorInStatement)});
	if (!r.ok)
		return on_error(cn, r, true, f == kErrorInStatement);
	if (f == kRollbackAfterClaim || f == kErrorAfterClaim || f == kDisconnect)
		return finish(cn, f, true);
	if (f == kWrongToken) {
		// A token that does not hold the key must be refused (SQLSTATE
		// 55000) and change nothing; the holder's token then completes.
		r = cn.exec("SAVEPOINT wrong_token");
		if (!r.ok)
			return on_error(cn, r, true, false);
		r = cn.exec(kWrongCompleteSql, {key, flag(o.id % 2 == 0)});
		if (r.ok) {
			cn.exec("ROLLBACK");
			return unexpected(std::string("idem_complete accepted a ") +
			                  (o.id % 2 == 0 ? "random" : "NULL") + " token");
		}
		if (r.lost || r.sqlstate != "55000")
			return on_error(cn, r, true, false);
		r = cn.exec("ROLLBACK TO SAVEPOINT wrong_token");
		if (!r.ok)
			return on_error(cn, r, true, false);
	}
	r = cn.exec(kCompleteSql, {key, *token});
	if (!r.ok) {
		if (r.sqlstate == "55000" && !r.lost) { // our lease was taken over
			cn.exec("ROLLBACK");
			return nack(kRefused);
		}
		return on_error(cn, r, true, false);
	}
	Outcome out =
	    finish(cn, f == kRollbackAfterComplete || f == kErrorAtCommit ? f : kNoFault, true);
	if (f == kWrongToken)
		out.fault_fired = true;
	return out;
}

} // namespace

Outcome consume(Pattern p, Consumer &c, const Order &o, Fault f)
{
	if (p == Pattern::Claim)
		return claim(c, o, f);
	return one_statement(c, p, o, f);
}

} // namespace reliability
