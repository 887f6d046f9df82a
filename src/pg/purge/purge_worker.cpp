// The purge worker: one background worker per database named in
// pg_idem.purge_databases, started when pg_idem is in
// shared_preload_libraries (modelled on worker_spi and pg_cron).
//
// Each round deletes expired records in batches of pg_idem.purge_batch_size,
// each batch its own transaction (purge.cpp: it deletes only rows nobody
// holds, and never waits),
// sleeping between batches as pg_idem.purge_rate_limit requires, and
// pausing while durable commits wait for the WAL (purge_yield.cpp); then, if
// pg_idem.purge_reconcile is on, reconciles a batch of expired leases. It
// naps pg_idem.purge_naptime between rounds on its latch. After a round it
// vacuums idem_records itself when autovacuum's own test says it is due
// (purge_vacuum.cpp). Its commits are asynchronous and its full-page images
// compressed (see below).
//
// As a PostgreSQL process: SIGHUP reloads the settings; SIGTERM ends it at
// the next interrupt check, also inside a batch (the batch rolls back), and
// the postmaster starts it again 10 s later, as after a crash (to stop it
// for good, empty pg_idem.purge_databases and restart); an error ends only
// the round it happened in; where the extension is not installed (or is
// dropped while it runs) it logs once and waits. It shows in
// pg_stat_activity as "pg_idem purge" with wait event Extension.
extern "C" {
#include "postgres.h"

#include "access/xact.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"
#include "utils/wait_event.h"

PGDLLEXPORT void idem_purge_worker_main(Datum arg);
}

#include "pg/compat.hpp"
#include "pg/guard.hpp"
#include "pg/purge/purge.hpp"
#include "pg/purge/purge_status.hpp"
#include "pg/purge/purge_vacuum.hpp"
#include "pg/purge/purge_worker.hpp"
#include "pg/purge/purge_yield.hpp"
#include "pg/settings.hpp"

#include <cstring>

namespace idem
{

namespace
{

// Sleeps on the latch for `ms`. SIGTERM ends the process at once; SIGHUP
// reloads the settings and ends the nap, so that a new naptime or rate
// limit applies now. Other wake-ups go back to sleep.
void nap(long ms)
{
	TimestampTz deadline = GetCurrentTimestamp() + int64(ms) * 1000;
	for (;;) {
		// A cancel (pg_cancel_backend) between rounds has nothing to
		// cancel; it must not end the worker.
		QueryCancelPending = false;
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending) {
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			return;
		}
		long remaining = long((deadline - GetCurrentTimestamp()) / 1000);
		if (remaining <= 0)
			return;
		(void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, remaining,
		                PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

// Runs `step` in a transaction of its own. Returns false, without running
// it, where the extension is not installed.
template <typename Step> bool in_transaction(const char *activity, Step step)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
	bool installed = OidIsValid(get_extension_oid("pg_idem", true));
	if (installed) {
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "pg_idem: SPI_connect failed");
		step();
		SPI_finish();
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
	return installed;
}

// One round: batches until one comes back short, then reconciliation.
// Returns false where the extension is not installed. `round` collects what
// was done, also when an error ends the round early.
bool purge_round(PurgeRound &round)
{
	TimestampTz started = GetCurrentTimestamp();
	WalShare share = {0, 0, 0};
	for (;;) {
		int batch = purge_batch_size;
		int64 purged = 0;
		if (!in_transaction("pg_idem purge: deleting expired records",
		                    [&] { purged = purge_batch(batch); }))
			return false;
		round.rows += purged;
		if (purged < batch)
			break;
		// Rate limit: this batch may take purged / rate seconds.
		nap(purge_rate_limit > 0 ? long(purged * 1000 / purge_rate_limit) : 0);
		long pause = purge_yield ? yield_pause_ms(&share) : 0;
		if (pause > 0) {
			elog(DEBUG1, "pg_idem purge: pausing %ld ms, commits are waiting for the WAL", pause);
			nap(pause);
		}
	}
	if (purge_reconcile)
		in_transaction("pg_idem purge: reconciling expired leases",
		               [&] { reconcile_batch(purge_batch_size, &round); });
	TimestampTz ended = GetCurrentTimestamp();
	round.at = ended;
	round.ms = double(ended - started) / 1000.0;
	// Not part of the round's time: the vacuum is the table's, not the purge's.
	vacuum_records_if_due();
	return true;
}

// Runs a round; an error (a reconciliation function that raises, a table
// dropped under it) is logged and ends only that round, as in pg_cron: the
// worker carries on, and what the round did before the error is counted.
bool guarded_round()
{
	static PurgeRound round; // static: it must survive the longjmp below
	memset(&round, 0, sizeof round);
	volatile bool installed = true;
	MemoryContext context = CurrentMemoryContext;
	PG_TRY();
	{
		installed = purge_round(round);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(context);
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		pgstat_report_activity(STATE_IDLE, NULL);
		round.at = GetCurrentTimestamp();
	}
	PG_END_TRY();
	if (installed)
		purge_status_record(MyDatabaseId, round);
	return installed;
}

// The pid in the status is only shown while the worker runs.
void detach_status(int, Datum)
{
	purge_status_attach(MyDatabaseId, 0);
}

} // namespace

// PostgreSQL calls this through the guard (guard.hpp).
extern "C" void idem_purge_worker_detach_status(int code, Datum arg)
{
	guard([&] { detach_status(code, arg); });
}

void register_purge_workers()
{
	char *list = pstrdup(purge_databases);
	List *names = NIL;
	if (!SplitIdentifierString(list, ',', &names))
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("pg_idem.purge_databases is not a valid list of database names"));
	ListCell *lc;
	foreach (lc, names) {
		const char *db = static_cast<const char *>(lfirst(lc));
		BackgroundWorker worker;
		memset(&worker, 0, sizeof worker);
		worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
		worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
		worker.bgw_restart_time = 10;
		strlcpy(worker.bgw_library_name, "pg_idem", BGW_MAXLEN);
		strlcpy(worker.bgw_function_name, "idem_purge_worker_main", BGW_MAXLEN);
		snprintf(worker.bgw_name, BGW_MAXLEN, "pg_idem purge worker for %s", db);
		strlcpy(worker.bgw_type, "pg_idem purge", BGW_MAXLEN);
		strlcpy(worker.bgw_extra, db, BGW_EXTRALEN);
		RegisterBackgroundWorker(&worker);
	}
}

// A purge dirties pages written long ago, so most of its WAL is full-page
// images (the first change to a page after a checkpoint logs the whole
// page, for some 45 records). Every durable commit of a consumer waits for
// that volume to be flushed too. Compressing the worker's own images cuts
// it; the consumers' WAL is left as the server has it. The server's
// wal_compression, where postgresql.conf sets one, still wins (this is only
// a default).
void compress_own_wal()
{
	static const char *const methods[] = {"lz4", "pglz"};
	for (const char *method : methods)
		if (set_config_option("wal_compression", method, PGC_SUSET, PGC_S_DYNAMIC_DEFAULT,
		                      GUC_ACTION_SET, true, DEBUG1, false) > 0)
			return;
}

} // namespace idem

// The worker's body; it never returns (SIGTERM ends the process).
static void run_purge_worker()
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	char database[BGW_EXTRALEN];
	strlcpy(database, MyBgworkerEntry->bgw_extra, sizeof database);
	BackgroundWorkerInitializeConnection(database, NULL, 0);
	// A purge lost in a crash is redone by the next round, and a consumer's
	// own durable commit flushes the WAL of every purge it saw. So the
	// worker's commits need not wait for their WAL flush, and on a
	// commit-bound server they no longer queue with the consumers' commits.
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	// A vacuum of idem_records, or a batch that reconciles slow leases, may
	// outlast a transaction_timeout meant for clients; ending the worker
	// with FATAL would only restart it into the same round, every time.
	idem::compat::switch_off_transaction_timeout();
	idem::compress_own_wal();
	pgstat_report_appname("pg_idem purge");
	idem::purge_status_attach(MyDatabaseId, MyProcPid);
	before_shmem_exit(idem::idem_purge_worker_detach_status, 0);
	ereport(LOG, errmsg("pg_idem purge worker started for database \"%s\"", database));

	bool said_not_installed = false;
	for (;;) {
		bool installed = idem::guarded_round();
		if (!installed && !said_not_installed)
			ereport(LOG, errmsg("pg_idem purge worker: extension pg_idem is not installed "
			                    "in database \"%s\"; waiting",
			                    database));
		said_not_installed = !installed;
		// Flush the round's table statistics now, not up to a second later
		// (which would be after the nap): autovacuum decides on them.
		pgstat_report_stat(true);
		idem::nap(idem::purge_naptime_ms);
	}
}

extern "C" void idem_purge_worker_main(Datum)
{
	idem::guard(run_purge_worker);
}
