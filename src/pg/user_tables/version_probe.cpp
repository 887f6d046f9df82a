// See version_probe.hpp.
extern "C" {
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_am_d.h"
#include "catalog/pg_type_d.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/typcache.h"
}

#include "pg/citus_tables.hpp"
#include "pg/compat.hpp"
#include "pg/user_tables/version_probe.hpp"

namespace idem
{

void describe_version_probe(Relation rel, Oid index, const TargetColumn *keys, int nkeys,
                            const TargetColumn &version, VersionProbe *probe, MemoryContext cxt)
{
	probe->index = InvalidOid;
	// A Citus table's rows are in its shards, not in the heap seen here.
	if (rel->rd_rel->relkind != RELKIND_RELATION || citus_manages(RelationGetRelid(rel)))
		return;
	Relation ind = index_open(index, AccessShareLock);
	int ncolumns = ind->rd_index->indnkeyatts;
	if (ind->rd_rel->relam == BTREE_AM_OID && ncolumns == nkeys) {
		probe->nkeys = nkeys;
		probe->key_of = static_cast<int *>(MemoryContextAlloc(cxt, sizeof(int) * nkeys));
		probe->equals =
		    static_cast<RegProcedure *>(MemoryContextAlloc(cxt, sizeof(RegProcedure) * nkeys));
		probe->collations = static_cast<Oid *>(MemoryContextAlloc(cxt, sizeof(Oid) * nkeys));
		for (int i = 0; i < ncolumns; i++) {
			// Every index column is a key column (the index covers the key)
			// and there are as many: each key column is an index column.
			for (int k = 0; k < nkeys; k++)
				if (keys[k].attnum == ind->rd_index->indkey.values[i])
					probe->key_of[i] = k;
			TypeCacheEntry *tc = lookup_type_cache(keys[probe->key_of[i]].type, TYPECACHE_EQ_OPR);
			probe->equals[i] = get_opcode(tc->eq_opr);
			probe->collations[i] = ind->rd_indcollation[i];
		}
		probe->version_attnum = version.attnum;
		probe->version_type = version.type;
		probe->index = index;
	}
	index_close(ind, AccessShareLock);
}

bool probe_version(const VersionProbe &probe, Oid relid, const Datum *key_values, bool *exists,
                   int64 *version, bool *isnull)
{
	if (!OidIsValid(probe.index))
		return false;
	// The caller holds RowExclusiveLock on the table since the call began.
	Relation rel = table_open(relid, NoLock);
	if (rel->rd_rel->relrowsecurity ||
	    pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK) {
		table_close(rel, NoLock);
		return false;
	}
	Relation index = index_open(probe.index, AccessShareLock);
	ScanKeyData keys[INDEX_MAX_KEYS];
	for (int i = 0; i < probe.nkeys; i++)
		ScanKeyEntryInitialize(&keys[i], 0, AttrNumber(i + 1), BTEqualStrategyNumber, InvalidOid,
		                       probe.collations[i], probe.equals[i], key_values[probe.key_of[i]]);

	// The snapshot SPI takes for a statement that is not read-only: after a
	// command counter increment, the transaction's snapshot (a new one in
	// READ COMMITTED) with the current command id.
	CommandCounterIncrement();
	PushActiveSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
	// An index built over broken HOT chains may not serve snapshots older
	// than it (indcheckxmin): it can lead to a row's version that such a
	// snapshot sees under another key. The planner skips it, and so does
	// this read.
	if (index->rd_index->indcheckxmin &&
	    !TransactionIdPrecedes(HeapTupleHeaderGetXmin(index->rd_indextuple->t_data),
	                           TransactionXmin)) {
		PopActiveSnapshot();
		index_close(index, AccessShareLock);
		table_close(rel, NoLock);
		return false;
	}
	IndexScanDesc scan = compat::index_beginscan(rel, index, GetActiveSnapshot(), probe.nkeys, 0);
	index_rescan(scan, keys, probe.nkeys, NULL, 0);
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	*exists = index_getnext_slot(scan, ForwardScanDirection, slot);
	*isnull = false;
	*version = 0;
	if (*exists) {
		Datum value = slot_getattr(slot, probe.version_attnum, isnull);
		if (!*isnull)
			*version = probe.version_type == INT2OID   ? DatumGetInt16(value)
			           : probe.version_type == INT4OID ? DatumGetInt32(value)
			                                           : DatumGetInt64(value);
	}
	ExecDropSingleTupleTableSlot(slot);
	index_endscan(scan);
	PopActiveSnapshot();
	index_close(index, AccessShareLock);
	table_close(rel, NoLock);
	return true;
}

} // namespace idem
