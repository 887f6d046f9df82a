// The duplicate cache and idem_records' triggers (duplicate_cache.cpp has
// the rules that keep a cached answer exact).
//
// Plain SQL DML on idem_records (also through a parent table, or
// replicated) never passes through pg_idem's C paths, which call
// cache_invalidate after each change they make. Three triggers on the
// table (pg_idem--0.1--0.2.sql) keep the cache exact for it:
//   idem_records_changed, AFTER UPDATE OR DELETE, per row: forgets the key
//     of the old row (and of the new one, should an UPDATE change key_id),
//     after the change, as cache_invalidate requires;
//   idem_records_changing, BEFORE UPDATE OR DELETE, per row: keeps this
//     transaction off the cache until it ends, since it could otherwise
//     meet an entry between a row's change and the end of the statement,
//     when the AFTER one fires; unless the change is pg_idem's own
//     (cache_own_change_begin), which invalidates at once;
//   idem_records_truncating, BEFORE TRUNCATE: the same, and the epoch is
//     bumped at commit (even for a TRUNCATE that logical replication
//     applies, which no object access hook sees; duplicate_cache_epochs.cpp).
// A filler makes entries only for a table that has the three as the install
// script makes them, enabled ALWAYS, running pg_idem's own functions
// (cache_guarded_by_triggers): a database still on 0.1's SQL, or one whose
// operator disabled or replaced one, is never cached. The verdict is kept
// per backend until the table's relcache entry or any function's catalog
// row is invalidated.
extern "C" {
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_language_d.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "nodes/primnodes.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/syscache.h"
}

#include "core/record_key.hpp"
#include "pg/cache/duplicate_cache.hpp"
#include "pg/cache/duplicate_cache_internal.hpp"
#include "pg/extension_objects.hpp"
#include "pg/guard.hpp"
#include "pg/records/records_layout.hpp"
#include "pg/relation_invalidation.hpp"

#include <cstring>

namespace idem
{

namespace
{

// Whether the triggers of the idem_records `guard_relid` keep the cache
// exact (cache_guarded_by_triggers): -1 until worked out. Forgotten when that
// table's relcache entry is invalidated (any CREATE, ALTER or DROP TRIGGER
// on it) or any function's catalog row changes.
int guard_verdict = -1;
Oid guard_relid = InvalidOid;
// Bumped with each reset of guard_verdict: the catalog lookups that work
// it out may process invalidations, and a reset meanwhile must win.
uint64 guard_resets = 0;

// Whether `function` is pg_idem's C function `symbol`, as the install
// script makes it (CREATE OR REPLACE FUNCTION keeps its OID).
bool is_own_function(Oid function, const char *symbol)
{
	HeapTuple row = SearchSysCache1(PROCOID, ObjectIdGetDatum(function));
	if (!HeapTupleIsValid(row))
		return false;
	bool ours = reinterpret_cast<Form_pg_proc>(GETSTRUCT(row))->prolang == ClanguageId;
	bool isnull;
	Datum src = SysCacheGetAttr(PROCOID, row, Anum_pg_proc_prosrc, &isnull);
	if (ours && !isnull) {
		char *name = TextDatumGetCString(src);
		ours = strcmp(name, symbol) == 0;
		pfree(name);
	}
	ReleaseSysCache(row);
	return ours && !isnull;
}

// Whether trigger `t` is one of idem_records' as the install script makes
// it: enabled ALWAYS, not deferred, no column list or arguments, pg_idem's
// function, and WHEN (idem_cache_enabled()) or none, `row`-level or not,
// BEFORE or not, for UPDATE OR DELETE or for TRUNCATE.
bool made_as_installed(const Trigger &t, const ExtensionObjects &loc, bool row, bool before,
                       bool truncate)
{
	int16 type = t.tgtype;
	if (t.tgenabled != TRIGGER_FIRES_ALWAYS || t.tgdeferrable || t.tginitdeferred ||
	    t.tgnattr != 0 || t.tgnargs != 0 || t.tgfoid != loc.records_trigger_function ||
	    bool(TRIGGER_FOR_ROW(type)) != row || bool(TRIGGER_FOR_BEFORE(type)) != before ||
	    !(truncate ? TRIGGER_FOR_TRUNCATE(type)
	               : TRIGGER_FOR_UPDATE(type) && TRIGGER_FOR_DELETE(type)))
		return false;
	if (t.tgqual == NULL)
		return true;
	Node *when = static_cast<Node *>(stringToNode(t.tgqual));
	return IsA(when, FuncExpr) &&
	       reinterpret_cast<FuncExpr *>(when)->funcid == loc.cache_enabled_function &&
	       reinterpret_cast<FuncExpr *>(when)->args == NIL;
}

// Whether `id` is the key id whose record pg_idem's own SQL is changing.
bool own_change_of(const bytea *id)
{
	size_t len = VARSIZE_ANY_EXHDR(id);
	return cache_xact.own_change.len > 0 && len == cache_xact.own_change.len &&
	       memcmp(VARDATA_ANY(id), cache_xact.own_change.id, len) == 0;
}

// An error between cache_own_change_begin and _end that a savepoint
// catches must not leave the key exempt from idem_records_changing; what
// the change did is undone, but the transaction stays off the cache.
void end_own_change_on_abort(SubXactEvent event, SubTransactionId, SubTransactionId, void *)
{
	if (event == SUBXACT_EVENT_ABORT_SUB && cache_xact.own_change.len > 0) {
		cache_xact.own_change.len = 0;
		cache_xact.records_changed = true;
	}
}

void forget_guard_verdict(Oid relid)
{
	if (relid == InvalidOid || relid == guard_relid) {
		guard_verdict = -1;
		guard_resets++;
	}
}

void forget_guard_verdict_of_functions(Datum, int, uint32)
{
	guard_verdict = -1;
	guard_resets++;
}

} // namespace

// PostgreSQL calls these through the guard (guard.hpp).
extern "C" void idem_cache_subtransaction_end(SubXactEvent event, SubTransactionId sub,
                                              SubTransactionId parent, void *arg)
{
	guard([&] { end_own_change_on_abort(event, sub, parent, arg); });
}

extern "C" void idem_cache_forget_guard_verdict_of_functions(Datum arg, int cache_id, uint32 hash)
{
	guard([&] { forget_guard_verdict_of_functions(arg, cache_id, hash); });
}

// Whether `rel` has the three triggers of idem_records as the install script
// makes them (made_as_installed), with pg_idem's functions, so that every
// change made in SQL reaches the cache. A database still on 0.1's SQL has
// none, and an operator may disable or replace them: such records are
// never cached. Read under the filler's ROW EXCLUSIVE lock on rel, which
// CREATE, ALTER and DROP TRIGGER wait for; each of those, and a new
// definition of either function, bumps the epoch at commit
// (replaces_records in duplicate_cache_epochs.cpp), so no entry made
// before answers after. Worked out once per relcache entry (guard_verdict).
bool cache_guarded_by_triggers(Relation rel)
{
	if (guard_verdict >= 0 && guard_relid == RelationGetRelid(rel))
		return guard_verdict == 1;
	uint64 resets = guard_resets;
	const ExtensionObjects &loc = extension_objects();
	const TriggerDesc *desc = rel->trigdesc;
	bool changed = false;
	bool changing = false;
	bool truncating = false;
	for (int i = 0; desc != NULL && i < desc->numtriggers; i++) {
		const Trigger &t = desc->triggers[i];
		if (strcmp(t.tgname, "idem_records_changed") == 0)
			changed = made_as_installed(t, loc, true, false, false);
		else if (strcmp(t.tgname, "idem_records_changing") == 0)
			changing = made_as_installed(t, loc, true, true, false);
		else if (strcmp(t.tgname, "idem_records_truncating") == 0)
			truncating = made_as_installed(t, loc, false, true, true);
	}
	bool guarded = changed && changing && truncating &&
	               records_layout_as_installed(RelationGetDescr(rel), loc) &&
	               is_own_function(loc.records_trigger_function, "idem_records_changed") &&
	               is_own_function(loc.cache_enabled_function, "idem_cache_enabled");
	// Changed meanwhile: what was read may be stale, so keep nothing, and
	// work it out again next time.
	if (guard_resets != resets)
		return false;
	guard_relid = RelationGetRelid(rel);
	guard_verdict = guarded ? 1 : 0;
	return guarded;
}

OwnChange cache_own_change_begin(const bytea *id)
{
	OwnChange interrupted = cache_xact.own_change;
	size_t len = VARSIZE_ANY_EXHDR(id);
	Assert(len > 0 && len <= max_key_id_bytes);
	memcpy(cache_xact.own_change.id, VARDATA_ANY(id), len);
	cache_xact.own_change.len = len;
	return interrupted;
}

void cache_own_change_end(const OwnChange &interrupted)
{
	cache_xact.own_change = interrupted;
}

void cache_triggers_register_callbacks()
{
	RegisterSubXactCallback(idem_cache_subtransaction_end, NULL);
	on_relation_invalidation(forget_guard_verdict);
	CacheRegisterSyscacheCallback(PROCOID, idem_cache_forget_guard_verdict_of_functions, 0);
}

} // namespace idem

// The function of idem_records' three triggers (file header).
IDEM_SQL_FUNCTION(idem_records_changed)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR, errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
		        errmsg("idem_records_changed: not called as a trigger"));
	TriggerData *trigger = reinterpret_cast<TriggerData *>(fcinfo->context);
	TriggerEvent event = trigger->tg_event;
	TupleDesc desc = RelationGetDescr(trigger->tg_relation);
	bool isnull;
	if (TRIGGER_FIRED_BY_TRUNCATE(event)) {
		idem::cache_xact.records_replaced = true;
		return PointerGetDatum(NULL);
	}
	if (TRIGGER_FIRED_BEFORE(event)) {
		Datum id = heap_getattr(trigger->tg_trigtuple, 1, desc, &isnull);
		if (isnull || !idem::own_change_of(DatumGetByteaPP(id)))
			idem::cache_xact.records_changed = true;
		return PointerGetDatum(TRIGGER_FIRED_BY_UPDATE(event) ? trigger->tg_newtuple
		                                                      : trigger->tg_trigtuple);
	}
	if (idem::cache_exists()) {
		HeapTuple rows[] = {trigger->tg_trigtuple, trigger->tg_newtuple};
		for (HeapTuple row : rows) {
			if (row == NULL)
				continue;
			Datum id = heap_getattr(row, 1, desc, &isnull);
			if (!isnull)
				idem::cache_invalidate(DatumGetByteaPP(id));
		}
	}
	return PointerGetDatum(NULL);
}

// idem_cache_enabled(): whether the duplicate cache exists on this server.
IDEM_SQL_FUNCTION(idem_cache_enabled)
{
	PG_RETURN_BOOL(idem::cache_exists());
}
