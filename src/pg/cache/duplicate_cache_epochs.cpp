// Table epochs of the duplicate cache (duplicate_cache.cpp has the rules
// that keep a cached answer exact).
//
// Table epochs. A TRUNCATE or a DROP of a table named idem_records (DROP
// EXTENSION, DROP TABLE, DROP SCHEMA ... CASCADE) removes every record at
// once, without the row triggers; an ALTER TABLE of it may rewrite every
// record (a column's new type, USING anything) or rename it; a CREATE (OR
// REPLACE), ALTER (ENABLE, DISABLE, RENAME) or DROP of one of its triggers,
// or a new definition of a function they run, may stop changes from
// reaching the cache. The object access hook notes each in the transaction
// that does it (and the trigger idem_records_truncating a TRUNCATE, also
// one that logical replication applies, which no hook sees); that
// transaction then bumps its database's epoch just before it commits or
// prepares, so every entry made before stops answering. A TRUNCATE or DROP
// holds its ACCESS EXCLUSIVE lock by then, and a trigger's change its SHARE
// ROW EXCLUSIVE, until it ends, so no entry can be made in between: a
// filler holds ROW EXCLUSIVE on idem_records while it reads the record and
// inserts the entry. (A function's new definition takes no such lock: a
// transaction that held its lock on idem_records since before that commit
// may still fill with what it knew. Replacing pg_idem's functions while
// claims run is not supported.) Before that
// commit a hit answers what the table still holds for everyone else; and
// the transaction itself, which already sees the table emptied, does not
// use the cache at all from the hook on. (The hook may run before the lock
// is granted, which is why the bump waits for the commit.) A DROP DATABASE
// bumps at once, and again when it commits: WITH (FORCE) ends the other
// backends of the database only after the hook.
//
// Each database has an epoch in shared memory (cache_bump_epoch); an entry
// answers only in the epoch it was made in.
extern "C" {
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database_d.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "miscadmin.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
}

#include "pg/cache/duplicate_cache.hpp"
#include "pg/cache/duplicate_cache_internal.hpp"
#include "pg/guard.hpp"

#include <cstring>

namespace idem
{

// Reset by bump_at_commit when the transaction ends.
CacheTransaction cache_xact = {false, false, {0, {}}};

namespace
{

// A database this transaction dropped: its epoch is bumped at the drop and
// again at commit, after the backends still connected to it are gone.
Oid dropped_database = InvalidOid;

object_access_hook_type previous_object_access = NULL;

// The row of object `oid` in `catalog` (found by its OID index `index` on
// column `oid_column`) as the running command sees it, its own uncommitted
// changes included (SnapshotSelf): an object access hook runs before the
// command counter increment that would show them to the catalog snapshot.
// Returns whether there is one, after calling `read` with it.
template <typename Read>
bool read_current_row(Oid catalog, Oid index, AttrNumber oid_column, Oid oid, Read read)
{
	Relation rel = table_open(catalog, AccessShareLock);
	ScanKeyData key;
	ScanKeyInit(&key, oid_column, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(oid));
	SysScanDesc scan = systable_beginscan(rel, index, true, SnapshotSelf, 1, &key);
	HeapTuple row = systable_getnext(scan);
	bool found = HeapTupleIsValid(row);
	if (found)
		read(row);
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

// Whether relid is a table named idem_records, in any schema, before the
// running command or after it (a rename away or back): a user's own table
// of that name only costs the entries of its database.
bool named_records(Oid relid)
{
	char *before = get_rel_name(relid);
	bool named = before != NULL && strcmp(before, "idem_records") == 0;
	if (before != NULL)
		pfree(before);
	read_current_row(
	    RelationRelationId, ClassOidIndexId, Anum_pg_class_oid, relid, [&](HeapTuple row) {
		    const char *now = NameStr(reinterpret_cast<Form_pg_class>(GETSTRUCT(row))->relname);
		    named = named || strcmp(now, "idem_records") == 0;
	    });
	return named;
}

bool trigger_function_name(const char *name)
{
	return strcmp(name, "idem_records_changed") == 0 || strcmp(name, "idem_cache_enabled") == 0;
}

// Whether `function` is named like one of the functions idem_records'
// triggers run, before the running command or after it.
bool named_trigger_function(Oid function)
{
	char *before = get_func_name(function);
	bool named = before != NULL && trigger_function_name(before);
	if (before != NULL)
		pfree(before);
	read_current_row(
	    ProcedureRelationId, ProcedureOidIndexId, Anum_pg_proc_oid, function, [&](HeapTuple row) {
		    named = named || trigger_function_name(
		                         NameStr(reinterpret_cast<Form_pg_proc>(GETSTRUCT(row))->proname));
	    });
	return named;
}

// Whether `access` may change an idem_records without its row triggers: a
// TRUNCATE, DROP or ALTER TABLE of it (a rename, a column added, dropped or
// given a new type USING anything), a CREATE (OR REPLACE), ALTER (ENABLE,
// DISABLE, RENAME) or DROP of one of its triggers (a trigger that cannot be
// found counts), or a new definition of a function named like those its
// triggers run.
bool replaces_records(ObjectAccessType access, Oid class_id, Oid object_id)
{
	bool defines = access == OAT_POST_CREATE || access == OAT_POST_ALTER || access == OAT_DROP;
	if (class_id == RelationRelationId)
		return (access == OAT_TRUNCATE || defines) && named_records(object_id);
	if (class_id == TriggerRelationId && defines) {
		Oid table = InvalidOid;
		read_current_row(TriggerRelationId, TriggerOidIndexId, Anum_pg_trigger_oid, object_id,
		                 [&](HeapTuple row) {
			                 table = reinterpret_cast<Form_pg_trigger>(GETSTRUCT(row))->tgrelid;
		                 });
		return !OidIsValid(table) || named_records(table);
	}
	if (class_id == ProcedureRelationId && defines)
		return named_trigger_function(object_id);
	return false;
}

void note_emptying(ObjectAccessType access, Oid class_id, Oid object_id, int sub_id, void *arg)
{
	if (previous_object_access != NULL)
		previous_object_access(access, class_id, object_id, sub_id, arg);
	if (!cache_exists())
		return;
	if (access == OAT_DROP && class_id == DatabaseRelationId) {
		cache_bump_epoch(object_id);
		dropped_database = object_id;
	} else if (replaces_records(access, class_id, object_id))
		cache_xact.records_replaced = true;
}

void bump_at_commit(XactEvent event, void *)
{
	switch (event) {
	case XACT_EVENT_PRE_COMMIT:
	case XACT_EVENT_PARALLEL_PRE_COMMIT:
	case XACT_EVENT_PRE_PREPARE:
		if (cache_xact.records_replaced && cache_exists())
			cache_bump_epoch(MyDatabaseId);
		if (OidIsValid(dropped_database) && cache_exists())
			cache_bump_epoch(dropped_database);
		break;
	case XACT_EVENT_COMMIT:
	case XACT_EVENT_PARALLEL_COMMIT:
	case XACT_EVENT_ABORT:
	case XACT_EVENT_PARALLEL_ABORT:
	case XACT_EVENT_PREPARE:
		cache_xact.records_replaced = false;
		cache_xact.records_changed = false;
		cache_xact.own_change.len = 0;
		dropped_database = InvalidOid;
		break;
	}
}

} // namespace

// PostgreSQL calls these through the guard (guard.hpp).
extern "C" void idem_cache_object_access(ObjectAccessType access, Oid class_id, Oid object_id,
                                         int sub_id, void *arg)
{
	guard([&] { note_emptying(access, class_id, object_id, sub_id, arg); });
}

extern "C" void idem_cache_at_transaction_end(XactEvent event, void *arg)
{
	guard([&] { bump_at_commit(event, arg); });
}

void cache_register_hooks()
{
	previous_object_access = object_access_hook;
	object_access_hook = idem_cache_object_access;
	RegisterXactCallback(idem_cache_at_transaction_end, NULL);
	cache_triggers_register_callbacks();
}

} // namespace idem
