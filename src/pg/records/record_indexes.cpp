// See record_indexes.hpp.
//
// Why not ExecOpenIndices. It builds every index's IndexInfo anew
// (BuildIndexInfo: the index's columns, a copy of its predicate), and
// ExecInsertIndexTuples then prepares the predicate of each partial index
// (ExecPrepareQual: expression_planner and ExecInitQual) in the call's
// executor state; it also opens the primary key that the caller's lookup
// already holds open. For a claim of a new key that was a fifth of what
// pg_idem does besides the table and index writes (idem_records has three
// indexes, one partial). All of it depends on the relation's indexes
// alone, so it is made here once per backend, the same way, in a context
// of this backend: each index's IndexInfo as BuildIndexInfo makes it, with
// its predicate prepared as ExecPrepareQual would (without the executor
// state, which only gives it its memory). A call gets a copy of each
// IndexInfo in its own memory, with ii_Context and ii_AmCache (where an
// index AM keeps what it builds for the insertions of one statement, such
// as BRIN's descriptor) its own, and shares the prepared predicate, which
// an evaluation only writes its result into, as a plan's expressions from
// one row to the next. Index expressions are not prepared here:
// FormIndexDatum prepares them in the call's copy, as before.
//
// A partial index whose predicate the new tuple fails is not opened at all
// (idem_records_in_flight, for every record idem_try_insert writes): the
// tuple makes no entry in it, and what could change the index meanwhile
// (DROP INDEX, REINDEX, CREATE INDEX CONCURRENTLY's steps) also waits for
// or is waited for by the ROW EXCLUSIVE lock the caller holds on the table;
// its predicate cannot change. The tuple's predicate is evaluated again by
// ExecInsertIndexTuples for the partial indexes it does go into.
//
// Which indexes, and the IndexInfos, are those of the relcache when they
// were made: any relcache invalidation of the relation (a new or dropped
// index, an index made ready by CREATE INDEX CONCURRENTLY), of one of its
// indexes, or of every relation makes them stale. They are made again at
// the next open, never in the invalidation callback: it may run while a
// call uses them (a lock taken in an index insertion processes
// invalidations), and they must stay valid until that call is over; a call
// uses them only until close_record_indexes.
extern "C" {
#include "postgres.h"

#include "access/genam.h"
#include "catalog/index.h"
#include "executor/executor.h"
#include "optimizer/optimizer.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/relcache.h"
}

#include "pg/compat.hpp"
#include "pg/records/record_indexes.hpp"
#include "pg/relation_invalidation.hpp"

namespace idem
{

namespace
{

MemoryContext context = NULL; // holds everything below; NULL until first use
Oid table = InvalidOid;       // the relation they are made for
int count = 0;                // its indexes
Oid *index_oids = NULL;
IndexInfo **infos = NULL;
bool stale = true;
uint64 invalidations = 0; // relcache invalidations of any relation

void forget(Oid relid)
{
	invalidations++;
	if (relid == InvalidOid || relid == table)
		stale = true;
	for (int i = 0; i < count && !stale; i++)
		if (index_oids[i] == relid)
			stale = true;
}

// Makes the IndexInfos of `rel`'s indexes. Opening an index can process
// invalidations: if one arrives meanwhile, what is made serves this call,
// and the next makes them again. They stay stale until they are complete,
// so that an error half way leaves nothing that a later call would use.
void make(Relation rel)
{
	if (context == NULL)
		context = AllocSetContextCreate(CacheMemoryContext, "pg_idem record indexes",
		                                ALLOCSET_SMALL_SIZES);
	MemoryContextReset(context);
	table = RelationGetRelid(rel);
	count = 0;
	stale = true;
	uint64 before = invalidations;
	MemoryContext caller = MemoryContextSwitchTo(context);
	List *oids = RelationGetIndexList(rel);
	int n = list_length(oids);
	index_oids = static_cast<Oid *>(palloc(sizeof(Oid) * Max(n, 1)));
	infos = static_cast<IndexInfo **>(palloc(sizeof(IndexInfo *) * Max(n, 1)));
	ListCell *lc;
	foreach (lc, oids) {
		Oid oid = lfirst_oid(lc);
		Relation index = index_open(oid, RowExclusiveLock);
		IndexInfo *info = BuildIndexInfo(index);
		if (info->ii_Predicate != NIL)
			info->ii_PredicateState =
			    ExecInitQual(reinterpret_cast<List *>(
			                     expression_planner(reinterpret_cast<Expr *>(info->ii_Predicate))),
			                 NULL);
		index_close(index, RowExclusiveLock);
		index_oids[count] = oid;
		infos[count] = info;
		count++;
	}
	MemoryContextSwitchTo(caller);
	stale = invalidations != before;
}

} // namespace

void open_record_indexes(ResultRelInfo *rri, Relation pkey, TupleTableSlot *slot, EState *estate)
{
	Relation rel = rri->ri_RelationDesc;
	rri->ri_NumIndices = 0;
	if (!RelationGetForm(rel)->relhasindex)
		return;
	if (stale || table != RelationGetRelid(rel))
		make(rel);
	if (count == 0)
		return;
	RelationPtr descs = static_cast<RelationPtr>(palloc(sizeof(Relation) * count));
	IndexInfo **call_infos = static_cast<IndexInfo **>(palloc(sizeof(IndexInfo *) * count));
	ExprContext *econtext = GetPerTupleExprContext(estate);
	econtext->ecxt_scantuple = slot;
	int n = 0;
	for (int i = 0; i < count; i++) {
		if (slot != NULL && infos[i]->ii_PredicateState != NULL &&
		    !ExecQual(infos[i]->ii_PredicateState, econtext))
			continue;
		descs[n] = index_oids[i] == RelationGetRelid(pkey)
		               ? pkey
		               : index_open(index_oids[i], RowExclusiveLock);
		IndexInfo *info = static_cast<IndexInfo *>(palloc(sizeof(IndexInfo)));
		*info = *infos[i];
		info->ii_Context = CurrentMemoryContext;
		info->ii_AmCache = NULL;
		call_infos[n++] = info;
	}
	ResetExprContext(econtext);
	rri->ri_NumIndices = n;
	rri->ri_IndexRelationDescs = descs;
	rri->ri_IndexRelationInfo = call_infos;
}

void close_record_indexes(ResultRelInfo *rri, Relation pkey)
{
	for (int i = 0; i < rri->ri_NumIndices; i++) {
		Relation index = rri->ri_IndexRelationDescs[i];
		compat::index_insert_cleanup(index, rri->ri_IndexRelationInfo[i]);
		if (index != pkey)
			index_close(index, RowExclusiveLock);
	}
}

void record_indexes_register_callbacks()
{
	on_relation_invalidation(forget);
}

} // namespace idem
