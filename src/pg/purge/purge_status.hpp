// What each purge worker did last, in shared memory, for idem_purge_status.
// Exists only when pg_idem is preloaded. Include after postgres.h.
#pragma once

extern "C" {
#include "datatype/timestamp.h"
}

namespace idem
{

struct PurgeRound {
	TimestampTz at;
	int64 rows;
	double ms;
	int64 reconciled_completed;
	int64 reconciled_failed;
	int64 reconciled_unknown;
};

void purge_status_request_shmem();
void purge_status_init_shmem();

// A worker takes the slot of its database when it starts.
void purge_status_attach(Oid database, int pid);
// Adds a finished round to the worker's slot.
void purge_status_record(Oid database, const PurgeRound &round);

struct PurgeWorkerStatus {
	bool found;
	int pid;
	PurgeRound last;
	int64 rounds;
	int64 purged_total;
	int64 reconciled_completed;
	int64 reconciled_failed;
	int64 reconciled_unknown;
};

// The worker of `database`, if preloading put one there.
PurgeWorkerStatus purge_status_read(Oid database);

} // namespace idem
