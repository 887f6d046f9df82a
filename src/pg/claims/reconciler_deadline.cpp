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
