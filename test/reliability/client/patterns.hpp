// How a consumer processes one delivery with each of pg_idem's patterns,
// and the faults it injects between the claim and the commit.
//
// A consumer acknowledges a delivery only when it saw the COMMIT of the
// transaction that processed it succeed (the command tag COMMIT: a COMMIT of
// a failed transaction "succeeds" with the tag ROLLBACK), or, in the claim
// protocol, when idem_begin answered that the key is completed. Everything
// else is a nack: the broker delivers the message again. A connection lost
// during COMMIT is a nack too: the transaction may or may not have
// committed, and only pg_idem can make the redelivery harmless.
#pragma once

#include "broker.hpp"
#include "connection.hpp"

#include <functional>
#include <string>

namespace reliability
{

enum class Pattern { TryInsert, TryInsertRow, Versioned, Claim };

bool parse_pattern(const std::string &name, Pattern *p);

// Faults injected after the claim and before the commit. Each pattern draws
// from its own list (faults_of).
enum Fault {
	kNoFault,
	kRollbackAfterClaim,    // ROLLBACK right after the claiming statement
	kErrorInStatement,      // the claiming statement itself fails after the claim
	kErrorAfterClaim,       // a later statement fails; then ROLLBACK
	kErrorAtCommit,         // a deferred foreign key makes COMMIT fail
	kDisconnect,            // the consumer drops its connection mid-transaction
	kSavepointRollback,     // ROLLBACK TO a savepoint before the claim, then COMMIT
	kClaimRolledBack,       // claim protocol: idem_begin inside a transaction that rolls back
	kAbandon,               // claim protocol: claimed, never completed (the lease runs out)
	kFailRetryable,         // claim protocol: idem_fail(retryable), claimed again at once
	kRollbackAfterComplete, // claim protocol: idem_complete, then ROLLBACK
	kRelease,               // claim protocol: idem_release, claimed again at once
	kWrongToken,            // claim protocol: idem_complete with a wrong or NULL token (must be
	                        // refused), then with the right one, and COMMIT: acknowledged
	kFaults
};
extern const char *const kFaultNames[kFaults];
std::vector<Fault> faults_of(Pattern p);

// Why a delivery ended as it did.
enum Reason {
	kCommitted,      // acked: COMMIT succeeded (or the claim answered completed)
	kInjected,       // nacked: an injected fault
	kConnectionLost, // nacked: the connection went away mid-transaction
	kCommitUnknown,  // nacked: the connection went away during COMMIT (or an autocommit claim)
	kInProgress,     // nacked: the claim protocol says another holder has the key
	kNotYet,         // nacked: versioned, the account is not yet at the previous version
	kRefused,        // nacked: claim protocol, idem_complete refused our (stale) token
	kUnexpected,     // nacked: an error nobody injected
	kReasons
};
extern const char *const kReasonNames[kReasons];

struct Outcome {
	Reason reason = kCommitted;
	bool applied = false;     // acked, and this transaction applied the effect
	bool fault_fired = false; // the injected fault was carried out
	std::string error;        // for kUnexpected: SQLSTATE and message
	bool acked() const { return reason == kCommitted; }
};

struct Consumer {
	Connection *conn;
	int id;
	// Called right before the claiming statement is sent, at most once
	// (not at all if the delivery fails before): the two copies of a twin
	// delivery meet there.
	std::function<void()> before_claim;
};

Outcome consume(Pattern p, Consumer &c, const Order &o, Fault f);

} // namespace reliability
