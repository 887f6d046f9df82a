// Reconciliation of claims whose lease ran out: the one C++ entry point that
// idem_reconcile and the purge worker's round both call (reconcile.cpp).
// Include after postgres.h.
#pragma once

namespace idem
{

// What reconciliation did with one claim.
enum class ReconcileOutcome {
	completed,     // the function said the effect happened
	failed,        // it said it did not; the key may be claimed again
	dead,          // it said it did not, and the attempts are used up
	unknown,       // it did not know (NULL), or raised an error: left as it is
	no_reconciler, // the scope's function is gone or may no longer run
};

// The outcome as idem_reconcile's `outcome` column spells it.
const char *reconcile_outcome_name(ReconcileOutcome outcome);

// One claim looked at, in the order they were settled (the scopes in turn,
// each scope's oldest lease first).
struct Reconciled {
	text *scope;
	text *key;
	int attempts;
	ReconcileOutcome outcome;
};

// Settles up to max_rows claims whose lease ran out, of `scope` (NULL: of
// every scope `caller` may use), as the file header of reconcile.cpp says.
// Runs inside the caller's SPI connection, as the extension's owner, in the
// current transaction; counts what it settled for idem_stats. Returns how
// many claims it looked at and sets *rows to them (palloc'd in the current
// memory context).
int reconcile_expired_leases(const text *scope, int max_rows, Oid caller, Reconciled **rows);

} // namespace idem
