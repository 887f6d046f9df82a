// See purge_status.hpp.
//
// Locking: a fixed array of slots, one per served database, each with its
// own spinlock. A worker only ever writes its own slot (a few counters after
// a round); readers copy a slot under its spinlock. Counters restart at zero
// with the server.
extern "C" {
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
}

#include "pg/purge/purge_status.hpp"

#include <cstring>

namespace idem
{

namespace
{

constexpr int max_slots = 64;

struct Slot {
	slock_t mutex;
	Oid database; // InvalidOid: free
	PurgeWorkerStatus status;
};

struct SharedStatus {
	Slot slots[max_slots];
};

SharedStatus *shared = NULL;

Slot *slot_of(Oid database, bool claim)
{
	if (shared == NULL)
		return NULL;
	for (int i = 0; i < max_slots; i++)
		if (shared->slots[i].database == database)
			return &shared->slots[i];
	if (!claim)
		return NULL;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	Slot *free_slot = NULL;
	for (int i = 0; i < max_slots && free_slot == NULL; i++)
		if (shared->slots[i].database == database || shared->slots[i].database == InvalidOid)
			free_slot = &shared->slots[i];
	if (free_slot != NULL)
		free_slot->database = database;
	LWLockRelease(AddinShmemInitLock);
	return free_slot;
}

} // namespace

void purge_status_request_shmem()
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(SharedStatus)));
}

void purge_status_init_shmem()
{
	bool found;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = static_cast<SharedStatus *>(
	    ShmemInitStruct("pg_idem purge status", sizeof(SharedStatus), &found));
	if (!found) {
		memset(shared, 0, sizeof(SharedStatus));
		for (int i = 0; i < max_slots; i++)
			SpinLockInit(&shared->slots[i].mutex);
	}
	LWLockRelease(AddinShmemInitLock);
}

void purge_status_attach(Oid database, int pid)
{
	Slot *slot = slot_of(database, true);
	if (slot == NULL)
		return;
	SpinLockAcquire(&slot->mutex);
	slot->status.pid = pid;
	SpinLockRelease(&slot->mutex);
}

void purge_status_record(Oid database, const PurgeRound &round)
{
	Slot *slot = slot_of(database, true);
	if (slot == NULL)
		return;
	SpinLockAcquire(&slot->mutex);
	PurgeWorkerStatus &s = slot->status;
	s.last = round;
	s.rounds++;
	s.purged_total += round.rows;
	s.reconciled_completed += round.reconciled_completed;
	s.reconciled_failed += round.reconciled_failed;
	s.reconciled_unknown += round.reconciled_unknown;
	SpinLockRelease(&slot->mutex);
}

PurgeWorkerStatus purge_status_read(Oid database)
{
	PurgeWorkerStatus status;
	memset(&status, 0, sizeof status);
	Slot *slot = slot_of(database, false);
	if (slot == NULL)
		return status;
	SpinLockAcquire(&slot->mutex);
	status = slot->status;
	SpinLockRelease(&slot->mutex);
	status.found = true;
	return status;
}

} // namespace idem
