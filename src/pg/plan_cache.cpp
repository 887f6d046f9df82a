// A backend-local hash table of prepared SPI statements.
//
// Invalidation: a relcache callback marks every statement tied to the
// invalidated relation stale (all of them when PostgreSQL invalidates the
// whole relcache), and a pg_namespace callback marks all of them stale: a
// statement names its table by schema and name, and renaming a schema sends
// no relcache invalidation for its tables, while PostgreSQL's own plan cache
// would parse the old names again. A rebuild first sets `valid` and only
// then reads the catalogs, so an invalidation that arrives while it reads
// leaves the entry stale rather than wrongly fresh. The plans themselves are
// also revalidated by PostgreSQL's plan cache; our own invalidation exists
// for what the plan does not know, such as the column types the caller
// converted JSON values to, and the names it was written with.
//
// Lifetimes. A call may run a statement's plan while the plan's own
// execution (a trigger on the target, say) makes another call that finds
// the statement stale and rebuilds it. So a rebuild never frees the old
// plan and description: it retires them, and they are freed by the first
// lookup of a later transaction, when no call of this one can still be
// running them. A build that raises an error (an unknown column, say)
// leaves an entry without a plan; builds never nest (they read catalogs and
// prepare, and run no user code), so the next lookup removes it, and a
// stream of calls with ever new, failing signatures does not grow the
// table.
extern "C" {
#include "postgres.h"

#include "executor/spi.h"
#include "common/hashfn.h"
#include "nodes/pg_list.h"
#include "storage/proc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
}

#include "pg/plan_cache.hpp"

#include <cstring>

namespace idem {

namespace {

HTAB *statements = NULL;
MemoryContext statements_context = NULL;

// Plans and contexts replaced in transaction `retired_in` (a local
// transaction id), freed by the first lookup of a later one.
List *retired_plans = NIL;
List *retired_contexts = NIL;
LocalTransactionId retired_in = InvalidLocalTransactionId;

// The entry whose build has not finished: after the next lookup starts,
// its build failed.
Statement *building = NULL;

void invalidate_relation(Datum, Oid relid)
{
	if (statements == NULL)
		return;
	HASH_SEQ_STATUS seq;
	hash_seq_init(&seq, statements);
	Statement *st;
	while ((st = static_cast<Statement *>(hash_seq_search(&seq))) != NULL) {
		if (relid == InvalidOid || st->relid == relid)
			st->valid = false;
	}
}

void invalidate_all(Datum, int, uint32) { invalidate_relation(0, InvalidOid); }

void retire(Statement *st)
{
	MemoryContext old = MemoryContextSwitchTo(statements_context);
	if (st->plan != NULL)
		retired_plans = lappend(retired_plans, st->plan);
	retired_contexts = lappend(retired_contexts, st->context);
	MemoryContextSwitchTo(old);
	retired_in = MyProc->lxid;
	st->plan = NULL;
	st->context = NULL;
	st->info = NULL;
	st->signature = NULL;
	st->signature_len = 0;
}

void free_retired()
{
	if (retired_contexts == NIL || retired_in == MyProc->lxid)
		return;
	ListCell *lc;
	foreach (lc, retired_plans)
		SPI_freeplan(static_cast<SPIPlanPtr>(lfirst(lc)));
	foreach (lc, retired_contexts)
		MemoryContextDelete(static_cast<MemoryContext>(lfirst(lc)));
	list_free(retired_plans);
	list_free(retired_contexts);
	retired_plans = NIL;
	retired_contexts = NIL;
}

// Removes the entry of a build that raised an error. Nothing runs what it
// built: its plan is not made yet, and what it had before was retired.
void remove_failed_build()
{
	Statement *failed = building;
	building = NULL;
	if (failed == NULL)
		return;
	MemoryContextDelete(failed->context);
	uint64 hash = failed->hash;
	hash_search(statements, &hash, HASH_REMOVE, NULL);
}

void create_table()
{
	statements_context =
	    AllocSetContextCreate(CacheMemoryContext, "pg_idem statements", ALLOCSET_SMALL_SIZES);
	HASHCTL ctl;
	memset(&ctl, 0, sizeof ctl);
	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(Statement);
	ctl.hcxt = statements_context;
	statements = hash_create("pg_idem statements", 64, &ctl,
				 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

} // namespace

Statement *statement_lookup(const char *signature, size_t signature_len, Oid relid)
{
	if (statements == NULL)
		create_table();
	remove_failed_build();
	free_retired();

	uint64 hash = hash_bytes_extended(reinterpret_cast<const unsigned char *>(signature),
					  int(signature_len), 0);
	bool found;
	Statement *st = static_cast<Statement *>(hash_search(statements, &hash, HASH_ENTER, &found));
	if (!found) {
		st->hash = hash;
		st->signature = NULL;
		st->signature_len = 0;
		st->relid = relid;
		st->valid = false;
		st->plan = NULL;
		st->info = NULL;
		st->context = NULL;
	}
	// Two signatures sharing a hash take turns in one entry: a collision
	// costs a rebuild, never the wrong statement.
	bool same = st->signature_len == signature_len &&
		    memcmp(st->signature, signature, signature_len) == 0;
	if (same && statement_ready(st))
		return st;

	if (st->context != NULL)
		retire(st);
	st->context =
	    AllocSetContextCreate(statements_context, "pg_idem statement", ALLOCSET_SMALL_SIZES);
	st->signature = static_cast<char *>(MemoryContextAlloc(st->context, signature_len + 1));
	memcpy(st->signature, signature, signature_len);
	st->signature_len = signature_len;
	st->relid = relid;
	st->valid = true;
	building = st;
	return st;
}

void statement_prepare(Statement *st, const char *sql, int nargs, Oid *argtypes)
{
	SPIPlanPtr plan = SPI_prepare(sql, nargs, argtypes);
	if (plan == NULL)
		elog(ERROR, "pg_idem: SPI_prepare failed for \"%s\": %s", sql,
		     SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "pg_idem: SPI_keepplan failed");
	st->plan = plan;
	building = NULL;
}

Statement *statement_for(const char *signature, Oid relid, const char *table_name,
			 const char *sql_format, int nargs, Oid *argtypes)
{
	Statement *st = statement_lookup(signature, strlen(signature), relid);
	if (!statement_ready(st))
		statement_prepare(st, psprintf(sql_format, table_name), nargs, argtypes);
	return st;
}

void plan_cache_register_callbacks()
{
	CacheRegisterRelcacheCallback(invalidate_relation, 0);
	CacheRegisterSyscacheCallback(NAMESPACEOID, invalidate_all, 0);
}

} // namespace idem
