// A time limit on each call of a scope's reconciliation function
// (pg_idem.reconcile_timeout). The function is the configuring role's code,
// and reconciliation asks it while the round holds locks and other scopes'
// claims wait for their turn: without a limit, one role's function that
// sleeps or waits would hold every scope's reconciliation, and the purge
// worker's round with it.
//
// When the limit runs out the call is canceled as a statement cancel
// would (ERRCODE_QUERY_CANCELED); reconciler_deadline_end tells that cancel
// from any other, which must still end the whole reconciliation.
// Include after postgres.h.
#pragma once

namespace idem
{

// Starts the limit for one call; within a call already limited (the
// function called idem_reconcile), the outer limit holds.
void reconciler_deadline_start();

// Ends it, after the call returned or raised an error; every start has its
// end. True if the limit ran out during the outermost call: its cancel,
// raised or still pending, was this limit's (a pending one is withdrawn).
// A nested call's end returns false, so that the outer limit's cancel ends
// the nested round and reaches the outer call.
bool reconciler_deadline_end();

} // namespace idem
