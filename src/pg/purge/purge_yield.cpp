// Yielding to durable commits: the purge worker's answer to write-ahead log
// contention (pg_idem.purge_yield).
//
// A purge writes WAL for every record it deletes (about 60 bytes, plus a
// full-page image for the first change to each page after a checkpoint,
// which the worker compresses). Its own commits are asynchronous
// (purge_worker.cpp), but WAL is one sequence: a consumer's durable commit
// waits until everything inserted before it is written and flushed, the
// purge's WAL included. Where consumers are bound by that flush
// (synchronous_commit = on, a slow disk, a synchronous standby), their
// commits get slower about in proportion to the extra bytes, so a purge at
// full speed through a backlog halves their throughput.
//
// So after each batch the worker looks at what the backends wait for (each
// PGPROC's wait_event_info, the word pg_stat_activity shows, read without a
// lock as pg_stat_activity does: a stale value costs one pause more or
// less). If one waits for the WAL write lock, a WAL write or sync, or a
// synchronous standby, the worker keeps its WAL to a quarter of everyone
// else's over a window of about a second: its own bytes (pgWalUsage) against
// the advance of the WAL insert position minus its own. When it is over,
// it pauses until the others' WAL, at their current rate, makes room.
// Without waiting commits (synchronous_commit = off, an idle server) it
// runs at full speed.
//
// A quarter is above what keeping up costs: deleting a record writes about
// a sixth of what inserting it (and the business change beside it) wrote.
// A pause is at most 100 ms, so the purge always progresses, also while
// the only waiter is a commit stuck on an absent synchronous standby and
// nobody else writes.
extern "C" {
#include "postgres.h"

#include "access/xlog.h"
#include "executor/instrument.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

#include "pg/purge/purge_yield.hpp"

namespace idem
{

namespace
{

constexpr double own_share = 0.25;
constexpr int64 window_us = 1000 * 1000;
constexpr long max_pause_ms = 100;

bool waits_for_wal(uint32 wait_event_info)
{
	return wait_event_info == (PG_WAIT_LWLOCK | uint32(WALWriteLock->tranche)) ||
	       wait_event_info == WAIT_EVENT_WAL_SYNC || wait_event_info == WAIT_EVENT_WAL_WRITE ||
	       wait_event_info == WAIT_EVENT_SYNC_REP;
}

// Whether some backend waits, right now, for its commit's WAL. The first
// MaxBackends entries of allProcs are the backends (clients, background
// workers, autovacuum); the auxiliary processes after them (the WAL writer
// among them) do not commit.
bool commits_waiting_for_wal()
{
	for (int i = 0; i < MaxBackends; i++) {
		PGPROC *proc = &ProcGlobal->allProcs[i];
		if (proc == MyProc || proc->pid == 0)
			continue;
		if (waits_for_wal(*static_cast<volatile uint32 *>(&proc->wait_event_info)))
			return true;
	}
	return false;
}

} // namespace

long yield_pause_ms(WalShare *share)
{
	TimestampTz now = GetCurrentTimestamp();
	XLogRecPtr insert = GetXLogInsertRecPtr();
	int64 own = pgWalUsage.wal_bytes;
	if (share->since == 0 || now - share->since > window_us) {
		// A new window; the batch just done counts in it as the others'
		// WAL of its time would, so measure from here.
		share->since = now;
		share->insert_since = insert;
		share->own_since = own;
		return 0;
	}
	if (!commits_waiting_for_wal())
		return 0;
	double own_bytes = double(own - share->own_since);
	double others = double(insert - share->insert_since) - own_bytes;
	if (others < 0)
		others = 0;
	double allowed = own_share * others;
	if (own_bytes <= allowed)
		return 0;
	double elapsed_ms = double(now - share->since) / 1000.0;
	double others_per_ms = elapsed_ms > 0 ? others / elapsed_ms : 0;
	// The others' bytes still needed for ours to be a quarter of theirs.
	double needed = own_bytes / own_share - others;
	long pause = others_per_ms > 0 ? long(needed / others_per_ms) + 1 : max_pause_ms;
	return pause > max_pause_ms ? max_pause_ms : pause;
}

} // namespace idem
