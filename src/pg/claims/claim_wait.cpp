// See claim_wait.hpp.
//
// Locking: each condition variable has its own spinlock inside PostgreSQL's
// ConditionVariable; nothing else is shared. Wakeups are remembered in a
// backend-local bitmap and broadcast from the transaction callback after
// COMMIT, so a waiter that re-checks sees the committed record. Prepared
// transactions are not remembered (their commit may happen in any session):
// their waiters notice on the next timer tick.
extern "C" {
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/wait_event.h"
}

#include "core/record_key.hpp"
#include "pg/claims/claim_wait.hpp"
#include "pg/compat.hpp"
#include "pg/guard.hpp"

#include <cstring>

namespace idem
{

namespace
{

constexpr int buckets = 128;
// Without shared memory, or as a safety net for missed wakeups, a waiter
// re-checks at least this often.
constexpr long recheck_ms = 10;
constexpr long safety_recheck_ms = 1000;

struct SharedWaits {
	ConditionVariable cv[buckets];
};

SharedWaits *shared = NULL;
uint64 pending[buckets / 64];
bool callback_registered = false;
bool sleeping = false;

int bucket_of(const bytea *key_id)
{
	return int(key_id_hash(reinterpret_cast<const uint8_t *>(VARDATA_ANY(key_id)),
	                       VARSIZE_ANY_EXHDR(key_id)) %
	           buckets);
}

void at_transaction_end(XactEvent event, void *)
{
	if (event == XACT_EVENT_COMMIT && shared != NULL) {
		for (int b = 0; b < buckets; b++)
			if (pending[b / 64] & (uint64(1) << (b % 64)))
				ConditionVariableBroadcast(&shared->cv[b]);
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE ||
	    event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT)
		memset(pending, 0, sizeof pending);
}

} // namespace

// PostgreSQL calls these through the guard (guard.hpp).
extern "C" void idem_claim_wait_at_transaction_end(XactEvent event, void *arg)
{
	guard([&] { at_transaction_end(event, arg); });
}

void claim_wait_request_shmem()
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(SharedWaits)));
}

void claim_wait_init_shmem()
{
	bool found;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = static_cast<SharedWaits *>(
	    ShmemInitStruct("pg_idem claim waits", sizeof(SharedWaits), &found));
	if (!found)
		for (int b = 0; b < buckets; b++)
			ConditionVariableInit(&shared->cv[b]);
	LWLockRelease(AddinShmemInitLock);
}

void claim_wake_at_commit(const bytea *key_id)
{
	if (shared == NULL)
		return;
	if (!callback_registered) {
		RegisterXactCallback(idem_claim_wait_at_transaction_end, NULL);
		callback_registered = true;
	}
	int b = bucket_of(key_id);
	pending[b / 64] |= uint64(1) << (b % 64);
}

void claim_sleep(const bytea *key_id, long timeout_ms)
{
	if (timeout_ms <= 0)
		return;
	if (shared != NULL) {
		sleeping = true;
		ConditionVariableTimedSleep(&shared->cv[bucket_of(key_id)],
		                            timeout_ms < safety_recheck_ms ? timeout_ms : safety_recheck_ms,
		                            PG_WAIT_EXTENSION);
		return;
	}
	(void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
	                timeout_ms < recheck_ms ? timeout_ms : recheck_ms, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

void claim_sleep_done()
{
	if (sleeping) {
		ConditionVariableCancelSleep();
		sleeping = false;
	}
}

} // namespace idem
