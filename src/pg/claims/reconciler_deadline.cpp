// See reconciler_deadline.hpp.
extern "C" {
#include "postgres.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/timeout.h"
}

#include <csignal>

#include "pg/claims/reconciler_deadline.hpp"
#include "pg/settings.hpp"

namespace idem
{

namespace
{

TimeoutId deadline = MAX_TIMEOUTS; // registered on first use
bool armed = false;
volatile sig_atomic_t passed = false;
// Calls in progress: a reconciliation function may itself call
// idem_reconcile, whose calls run within the outermost call's limit (a
// nested start that armed a fresh limit, and its end that disarmed it, would
// let the outer function run on without one).
int depth = 0;

// In the timeout signal handler: what a statement cancel does.
void on_deadline()
{
	passed = true;
	InterruptPending = true;
	QueryCancelPending = true;
	SetLatch(MyLatch);
}

} // namespace

void reconciler_deadline_start()
{
	if (depth++ > 0)
		return;
	passed = false;
	armed = reconcile_timeout_ms > 0;
	if (!armed)
		return;
	if (deadline == MAX_TIMEOUTS)
		deadline = RegisterTimeout(USER_TIMEOUT, on_deadline);
	enable_timeout_after(deadline, reconcile_timeout_ms);
}

bool reconciler_deadline_end()
{
	if (--depth > 0)
		return false; // the outermost call's limit, still running, is not this call's
	if (armed)
		disable_timeout(deadline, false);
	armed = false;
	if (!passed)
		return false;
	// Ran out after the last check for interrupts: the call is over, and
	// its cancel must not reach what follows. (A cancel the user sent in
	// the same instant is lost with it.)
	QueryCancelPending = false;
	passed = false;
	return true;
}

} // namespace idem
