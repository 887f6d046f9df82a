// The differences between the PostgreSQL versions pg_idem supports (15, 17
// and 18), in one place.
//
// Every #if on PG_VERSION_NUM lives here, so that the rest of src/pg/ is
// written once. Each section below is one upstream change, named with the
// major version that made it. A call site uses either the newer API itself
// (backported here to the older versions, when it means the same there) or
// a helper in idem::compat that means the same on every version. When a
// version stops being supported, the sections it needs are deleted.
//
// Include after postgres.h.
#pragma once

extern "C" {
#include "access/genam.h"
#include "access/heapam.h"
#include "commands/vacuum.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/autovacuum.h"
#include "storage/bufmgr.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/backend_status.h"
#include "utils/guc.h"
#include "utils/rel.h"

#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif

#if PG_VERSION_NUM < 160000
#include "catalog/pg_namespace_d.h"
#include "catalog/pg_proc_d.h"
#endif

#if PG_VERSION_NUM >= 170000
#include "storage/procnumber.h"
#else
#include "storage/backendid.h"
#endif
}

// [16] pg_proc_aclcheck, pg_namespace_aclcheck and the like were replaced by
// object_aclcheck(classid, objectid, roleid, mode). Backported for the two
// catalogs pg_idem checks.
#if PG_VERSION_NUM < 160000
inline AclResult object_aclcheck(Oid classid, Oid objectid, Oid roleid, AclMode mode)
{
	switch (classid) {
	case ProcedureRelationId:
		return pg_proc_aclcheck(objectid, roleid, mode);
	case NamespaceRelationId:
		return pg_namespace_aclcheck(objectid, roleid, mode);
	default:
		elog(ERROR, "pg_idem: object_aclcheck for catalog %u is not backported", classid);
		pg_unreachable();
	}
}
#endif

// [17] pgstat_fetch_stat_local_beentry was renamed
// pgstat_get_local_beentry_by_index. Both take a 1-based index into the
// backend status snapshot (1 .. pgstat_fetch_stat_numbackends()).
#if PG_VERSION_NUM < 170000
inline LocalPgBackendStatus *pgstat_get_local_beentry_by_index(int idx)
{
	return pgstat_fetch_stat_local_beentry(idx);
}
#endif

namespace idem::compat
{

// [17] MyBackendId (1-based, InvalidBackendId = 0 when there is none) gave
// way to MyProcNumber (0-based, INVALID_PROC_NUMBER = -1). This is the
// backend's 0-based number on every version, or -1 when it has none. Regular
// backends (client backends, background workers, autovacuum, walsenders)
// number 0 .. MaxBackends - 1 on every version, so an array of MaxBackends
// entries in shared memory has one for each; auxiliary processes and
// prepared transactions may number beyond it, so check the bound.
inline int my_backend_index()
{
#if PG_VERSION_NUM >= 170000
	return MyProcNumber == INVALID_PROC_NUMBER ? -1 : int(MyProcNumber);
#else
	return MyBackendId == InvalidBackendId ? -1 : int(MyBackendId) - 1;
#endif
}

// [17] PGPROC.lxid moved into PGPROC.vxid. The backend's current local
// transaction id.
inline LocalTransactionId my_local_transaction_id()
{
#if PG_VERSION_NUM >= 170000
	return MyProc->vxid.lxid;
#else
	return MyProc->lxid;
#endif
}

// [17] transaction_timeout ends any transaction that runs longer with FATAL,
// in every process with a database connection, background workers
// included, taking its value from postgresql.conf and the database's and
// role's settings. Autovacuum switches it off for its own transactions, so
// that a setting meant for clients cannot stop maintenance; this does the
// same for the calling process. Before 17 there is no such timeout.
inline void switch_off_transaction_timeout()
{
#if PG_VERSION_NUM >= 170000
	SetConfigOption("transaction_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
#endif
}

// [18] Autovacuum caps a table's vacuum threshold (base threshold + scale
// factor x reltuples) at autovacuum_vacuum_max_threshold, or at the table's
// reloption of that name (-1: no cap; unset: -2). `threshold` capped so for
// a table with reloptions `opts` (NULL: none); before 18, as it is.
inline double autovacuum_capped_threshold(double threshold, const AutoVacOpts *opts)
{
#if PG_VERSION_NUM >= 180000
	int max = opts && opts->vacuum_max_threshold >= -1 ? opts->vacuum_max_threshold
	                                                   : autovacuum_vac_max_thresh;
	if (max >= 0 && threshold > max)
		return max;
#else
	(void)opts;
#endif
	return threshold;
}

// [16] PgStat_StatTabEntry.n_dead_tuples was renamed dead_tuples.
inline PgStat_Counter dead_tuples(const PgStat_StatTabEntry *entry)
{
#if PG_VERSION_NUM >= 160000
	return entry->dead_tuples;
#else
	return entry->n_dead_tuples;
#endif
}

// [16] heap_update gained TU_UpdateIndexes *update_indexes, which tells which
// indexes need entries for the new version (none, all, or only summarizing
// ones). For a table with no summarizing index (BRIN) that is the same
// answer as !HeapTupleIsHeapOnly(newtup) after TM_Ok, which all versions
// give, so the caller asks that.
inline TM_Result heap_update(Relation relation, ItemPointer otid, HeapTuple newtup, CommandId cid,
                             Snapshot crosscheck, bool wait, TM_FailureData *tmfd,
                             LockTupleMode *lockmode)
{
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes;
	return ::heap_update(relation, otid, newtup, cid, crosscheck, wait, tmfd, lockmode,
	                     &update_indexes);
#else
	return ::heap_update(relation, otid, newtup, cid, crosscheck, wait, tmfd, lockmode);
#endif
}

// Which indexes need entries for the version heap_update made: none (a HOT
// update), all, or [16] only the summarizing ones (BRIN), after a HOT update
// that changed a column only they index.
enum class IndexEntries { none, all, summarizing };

// heap_update that also says which indexes need entries for the new
// version (on TM_Ok). Before 16 a HOT update needs none, and any other all.
inline TM_Result heap_update(Relation relation, ItemPointer otid, HeapTuple newtup, CommandId cid,
                             Snapshot crosscheck, bool wait, TM_FailureData *tmfd,
                             LockTupleMode *lockmode, IndexEntries *entries)
{
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes;
	TM_Result result = ::heap_update(relation, otid, newtup, cid, crosscheck, wait, tmfd, lockmode,
	                                 &update_indexes);
	*entries = update_indexes == TU_All           ? IndexEntries::all
	           : update_indexes == TU_Summarizing ? IndexEntries::summarizing
	                                              : IndexEntries::none;
#else
	TM_Result result = ::heap_update(relation, otid, newtup, cid, crosscheck, wait, tmfd, lockmode);
	*entries = HeapTupleIsHeapOnly(newtup) ? IndexEntries::none : IndexEntries::all;
#endif
	return result;
}

// [17] Index AMs may keep state for the insertions of one statement in
// IndexInfo.ii_AmCache and release it in aminsertcleanup, which
// ExecCloseIndices calls through index_insert_cleanup (BRIN keeps its
// revision map there, with a buffer pin). Before 17 there is nothing to
// clean up.
inline void index_insert_cleanup(Relation index, IndexInfo *info)
{
#if PG_VERSION_NUM >= 170000
	::index_insert_cleanup(index, info);
#else
	(void)index;
	(void)info;
#endif
}

// [16] ExecInsertIndexTuples gained bool onlySummarizing (true after a HOT
// update that changed a summarizing index's column). Here: every index,
// unless `only_summarizing` (which heap_update's IndexEntries::summarizing
// asks for, only on 16 and later).
inline List *ExecInsertIndexTuples(ResultRelInfo *resultRelInfo, TupleTableSlot *slot,
                                   EState *estate, bool update, bool noDupErr, bool *specConflict,
                                   List *arbiterIndexes, bool only_summarizing = false)
{
#if PG_VERSION_NUM >= 160000
	return ::ExecInsertIndexTuples(resultRelInfo, slot, estate, update, noDupErr, specConflict,
	                               arbiterIndexes, only_summarizing);
#else
	Assert(!only_summarizing);
	(void)only_summarizing;
	return ::ExecInsertIndexTuples(resultRelInfo, slot, estate, update, noDupErr, specConflict,
	                               arbiterIndexes);
#endif
}

// [18] index_beginscan gained IndexScanInstrumentation *instrument (for
// EXPLAIN ANALYZE). Here: none.
inline IndexScanDesc index_beginscan(Relation heapRelation, Relation indexRelation,
                                     Snapshot snapshot, int nkeys, int norderbys)
{
#if PG_VERSION_NUM >= 180000
	return ::index_beginscan(heapRelation, indexRelation, snapshot, NULL, nkeys, norderbys);
#else
	return ::index_beginscan(heapRelation, indexRelation, snapshot, nkeys, norderbys);
#endif
}

// [16] VACOPT_PROCESS_MAIN: without it VACUUM processes only the TOAST
// table. Before 16 the main table was always processed, as if it were set.
#if PG_VERSION_NUM >= 160000
constexpr bits32 vacopt_process_main = VACOPT_PROCESS_MAIN;
#else
constexpr bits32 vacopt_process_main = 0;
#endif

// [17, 18] VacuumParams gained fields: toast_parent (17 and 18's minor
// releases; InvalidOid, as VACUUM sets it, which a value-initialised
// VacuumParams already has) and max_eager_freeze_failure_rate (18), which
// VACUUM and autovacuum take from the GUC (a table's reloption overrides it
// inside vacuum_rel). 0 would switch eager scanning off. Call this on a
// value-initialised VacuumParams.
inline void set_vacuum_params_added_after_15(VacuumParams *params)
{
#if PG_VERSION_NUM >= 180000
	params->max_eager_freeze_failure_rate = vacuum_max_eager_freeze_failure_rate;
#else
	(void)params;
#endif
}

// [16] vacuum() gained MemoryContext vac_context (its cross-transaction
// memory, which it made itself under PortalContext before), and no longer
// makes a buffer ring when given a NULL strategy: NULL now means no limit on
// shared buffers. So, as VACUUM and autovacuum do since 16, make the ring of
// vacuum_buffer_usage_limit here, in vac_context. Before 16, vacuum() makes
// both itself (PortalContext must be set). vac_context must outlive the call;
// the caller frees it.
inline void vacuum(List *relations, VacuumParams *params, MemoryContext vac_context,
                   bool isTopLevel)
{
#if PG_VERSION_NUM >= 160000
	MemoryContext caller = MemoryContextSwitchTo(vac_context);
	BufferAccessStrategy strategy = GetAccessStrategyWithSize(BAS_VACUUM, VacuumBufferUsageLimit);
	MemoryContextSwitchTo(caller);
	::vacuum(relations, params, strategy, vac_context, isTopLevel);
#else
	(void)vac_context;
	::vacuum(relations, params, NULL, isTopLevel);
#endif
}

} // namespace idem::compat
