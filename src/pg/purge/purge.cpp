// idem_purge and idem_purge_status, and the batch both they and the purge
// worker (purge_worker.cpp) run.
//
// A batch finds up to n expired records that are not in progress,
//   SELECT ctid, scope, key_id FROM idem_records WHERE expires_at <= now()
//   AND status <> 'in_progress' LIMIT n
// (through the BRIN index on expires_at while expired records sit together),
// then deletes each with table_tuple_delete(wait = false). That delete
// succeeds only if the version the search saw is still the latest and nobody
// holds it: a row that a consumer has renewed, claimed or locked since, or
// that another purge is deleting, is skipped, never waited for. So a purge
// never blocks a consumer, two purges never count a row twice, and a row
// costs one WAL record (its delete) instead of two (a row lock, then the
// delete). A consumer that meets a record in a batch being deleted waits for
// that batch's commit, then finds the key free. The heap delete keeps
// TOAST, the table statistics and logical decoding right, but fires no
// trigger: what idem_records' trigger (idem_records_changed) would do, drop
// the key from the duplicate cache, is done here for each deleted row.
extern "C" {
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

#include "pg/cache/duplicate_cache.hpp"
#include "pg/extension_objects.hpp"
#include "pg/as_owner.hpp"
#include "pg/guard.hpp"
#include "pg/scopes/scope_grants.hpp"
#include "pg/plan_cache.hpp"
#include "pg/purge/purge.hpp"
#include "pg/records/routes.hpp"
#include "pg/claims/reconcile.hpp"
#include "pg/stats/stats.hpp"

#include <cstring>

namespace idem
{

namespace
{

// A purge statement in two forms: for every scope (the worker's, also on
// 0.2's SQL; `only_for` invalid), and for the scopes `only_for` may use.
// `sql_format` has the records table's name and then the form's added
// condition, which passes `only_for` as $`role_param`.
Statement *purge_statement(const char *signature, Oid only_for, const char *sql_format,
                           int role_param, Oid *types)
{
	const ExtensionObjects &objects = extension_objects();
	bool every_scope = !OidIsValid(only_for);
	const char *sig = every_scope ? signature : psprintf("%s:granted", signature);
	Statement *st = statement_lookup(sig, strlen(sig), objects.records);
	if (!statement_ready(st))
		statement_prepare(st,
		                  psprintf(sql_format, objects.records_name,
		                           every_scope
		                               ? ""
		                               : psprintf(" AND %s.idem_scope_usable_by(scope, $%d)",
		                                          objects.schema_name, role_param)),
		                  every_scope ? role_param - 1 : role_param, types);
	return st;
}

// purge_batch on distributed records (routes.hpp): one DELETE that Citus
// runs on every shard in parallel, from the coordinator only (a worker's
// purge would only race it). Citus has no LIMIT for it, so a batch is every
// expired record; it waits for a record a consumer holds instead of
// skipping it, and the consumer that waits for it finds the key free.
int64 purge_distributed(Oid only_for)
{
	if (!records_coordinator())
		return 0;
	Oid types[] = {OIDOID};
	Statement *st = purge_statement("purge:distributed", only_for,
	                                "DELETE FROM %s "
	                                "WHERE expires_at OPERATOR(pg_catalog.<=) pg_catalog.now() "
	                                "AND status OPERATOR(pg_catalog.<>) 'in_progress'%s "
	                                "RETURNING scope",
	                                1, types);
	Datum values[] = {ObjectIdGetDatum(only_for)};
	bool isnull;
	if (SPI_execute_plan(st->plan, values, NULL, false, 0) != SPI_OK_DELETE_RETURNING)
		elog(ERROR, "pg_idem: purge failed");
	if (stats_enabled()) {
		StatsTally tally;
		stats_tally_init(&tally);
		for (uint64 i = 0; i < SPI_processed; i++)
			stats_tally_add(&tally,
			                DatumGetTextPP(SPI_getbinval(SPI_tuptable->vals[i],
			                                             SPI_tuptable->tupdesc, 1, &isnull)),
			                stat_purged);
		stats_tally_flush(&tally);
	}
	CommandCounterIncrement();
	return int64(SPI_processed);
}

} // namespace

int64 purge_batch(int max_rows, Oid only_for)
{
	if (records_distributed())
		return purge_distributed(only_for);
	const ExtensionObjects &objects = extension_objects();
	Oid types[] = {INT4OID, OIDOID};
	Statement *st = purge_statement("purge:candidates", only_for,
	                                "SELECT ctid, scope, key_id FROM %s "
	                                "WHERE expires_at OPERATOR(pg_catalog.<=) pg_catalog.now() "
	                                "AND status OPERATOR(pg_catalog.<>) 'in_progress'%s LIMIT $1",
	                                2, types);
	Datum values[] = {Int32GetDatum(max_rows), ObjectIdGetDatum(only_for)};
	if (SPI_execute_plan(st->plan, values, NULL, false, max_rows) != SPI_OK_SELECT)
		elog(ERROR, "pg_idem: purge search failed");

	Relation records = table_open(objects.records, RowExclusiveLock);
	CommandId cid = GetCurrentCommandId(true);
	int64 purged = 0;
	// The scope of each deleted row, for idem_stats once the batch is done.
	const text **purged_scopes = NULL;
	if (stats_enabled())
		purged_scopes = static_cast<const text **>(palloc(sizeof(text *) * (SPI_processed + 1)));
	for (uint64 i = 0; i < SPI_processed; i++) {
		bool isnull;
		HeapTuple row = SPI_tuptable->vals[i];
		ItemPointer tid = reinterpret_cast<ItemPointer>(
		    DatumGetPointer(SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &isnull)));
		TM_FailureData failure;
		// The candidate's version passed the search's test; TM_Ok means it is
		// still the latest and now deleted. Anything else (renewed, locked,
		// deleted by someone else) is left alone.
		if (table_tuple_delete(records, tid, cid, GetActiveSnapshot(), InvalidSnapshot, false,
		                       &failure, false) != TM_Ok)
			continue;
		cache_invalidate(DatumGetByteaPP(SPI_getbinval(row, SPI_tuptable->tupdesc, 3, &isnull)));
		if (purged_scopes != NULL)
			purged_scopes[purged] =
			    DatumGetTextPP(SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &isnull));
		purged++;
	}
	table_close(records, NoLock);
	if (purged_scopes != NULL) {
		// Rows of a scope tend to expire together: a few entries per batch.
		StatsTally tally;
		stats_tally_init(&tally);
		for (int64 i = 0; i < purged; i++)
			stats_tally_add(&tally, purged_scopes[i], stat_purged);
		stats_tally_flush(&tally);
	}
	CommandCounterIncrement();
	return purged;
}

void reconcile_batch(int max_rows, PurgeRound *round)
{
	// On a Citus cluster, the coordinator's worker reconciles every shard.
	if (records_distributed() && !records_coordinator())
		return;
	// As idem_reconcile runs (as_owner.hpp), for the worker's role.
	Oid caller;
	int context;
	GetUserIdAndSecContext(&caller, &context);
	SetUserIdAndSecContext(extension_objects().owner, context | SECURITY_LOCAL_USERID_CHANGE);
	Reconciled *rows;
	int n = reconcile_expired_leases(NULL, max_rows, caller, &rows);
	SetUserIdAndSecContext(caller, context);
	for (int i = 0; i < n; i++) {
		switch (rows[i].outcome) {
		case ReconcileOutcome::completed:
			round->reconciled_completed++;
			break;
		case ReconcileOutcome::failed:
		case ReconcileOutcome::dead:
			round->reconciled_failed++;
			break;
		case ReconcileOutcome::unknown:
			round->reconciled_unknown++;
			break;
		case ReconcileOutcome::no_reconciler:
			break;
		}
	}
}

} // namespace idem

// idem_purge(max_rows) RETURNS bigint: a caller that may not use every
// scope purges only the expired records of the scopes it may use.
IDEM_SQL_FUNCTION_AS_OWNER(idem_purge)
{
	static const char fn[] = "idem_purge";
	if (PG_ARGISNULL(0) || PG_GETARG_INT32(0) < 1)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: max_rows must be at least 1", fn));
	PreventCommandIfReadOnly(fn);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	int64 purged = idem::purge_batch(PG_GETARG_INT32(0),
	                                 idem::may_use_every_scope(caller) ? InvalidOid : caller);
	SPI_finish();
	PG_RETURN_INT64(purged);
}

// idem_purge_status(): the worker's last round (when preloaded) and the
// backlog, for the current database. The backlog counts every scope's
// records (it says how much work the worker has, not what any scope
// holds); the function is for operators, and no scope's keys or results
// show.
IDEM_SQL_FUNCTION_AS_OWNER(idem_purge_status)
{
	TupleDesc desc;
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "pg_idem: idem_purge_status must return a composite type");
	desc = BlessTupleDesc(desc);
	Datum values[12];
	bool nulls[12];
	memset(nulls, 0, sizeof nulls);

	idem::PurgeWorkerStatus worker = idem::purge_status_read(MyDatabaseId);
	values[0] = Int32GetDatum(worker.pid);
	values[1] = TimestampTzGetDatum(worker.last.at);
	values[2] = Int64GetDatum(worker.last.rows);
	values[3] = Float8GetDatum(worker.last.ms);
	values[4] = Int64GetDatum(worker.rounds);
	values[5] = Int64GetDatum(worker.purged_total);
	values[6] = Int64GetDatum(worker.reconciled_completed);
	values[7] = Int64GetDatum(worker.reconciled_failed);
	values[8] = Int64GetDatum(worker.reconciled_unknown);
	for (int i = 0; i <= 8; i++)
		nulls[i] = !worker.found || (i >= 1 && i <= 3 && worker.rounds == 0);

	const idem::ExtensionObjects &objects = idem::extension_objects();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	// Two index scans: the BRIN on expires_at, the partial index of claims.
	static const char signature[] = "purge:backlog";
	idem::Statement *st = idem::statement_lookup(signature, sizeof signature, objects.records);
	if (!idem::statement_ready(st))
		idem::statement_prepare(
		    st,
		    psprintf("SELECT e.n, e.age, l.n FROM "
		             "(SELECT pg_catalog.count(*) AS n, pg_catalog.now() "
		             "OPERATOR(pg_catalog.-) pg_catalog.min(expires_at) AS age FROM %s "
		             "WHERE expires_at OPERATOR(pg_catalog.<=) pg_catalog.now() "
		             "AND status OPERATOR(pg_catalog.<>) 'in_progress') e, "
		             "(SELECT pg_catalog.count(*) AS n FROM %s "
		             "WHERE status OPERATOR(pg_catalog.=) 'in_progress' "
		             "AND lease_expires_at OPERATOR(pg_catalog.<=) pg_catalog.now()) l",
		             objects.records_name, objects.records_name),
		    0, NULL);
	if (SPI_execute_plan(st->plan, NULL, NULL, true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "pg_idem: backlog query failed");
	bool isnull;
	HeapTuple row = SPI_tuptable->vals[0];
	values[9] = SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &isnull);
	Datum age = SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &nulls[10]);
	values[10] = nulls[10] ? 0 : SPI_datumTransfer(age, false, sizeof(Interval));
	values[11] = SPI_getbinval(row, SPI_tuptable->tupdesc, 3, &isnull);
	SPI_finish();
	return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls));
}
