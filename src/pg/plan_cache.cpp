// A backend-local hash table of prepared SPI statements: each entry points
// at the current Statement for one signature hash.
//
// Invalidation: a relcache callback marks every statement tied to the
// invalidated relation stale (all of them when PostgreSQL invalidates the
// whole relcache), and a pg_namespace callback marks all of them stale: a
// statement names its table by schema and name, and renaming a schema sends
// no relcache invalidation for its tables, while PostgreSQL's own plan cache
// would parse the old names again. Each callback also counts; a statement
// whose build saw the count change is installed stale, since what it read
// may be older than the invalidation. The plans themselves are also
// revalidated by PostgreSQL's plan cache; our own invalidation exists for
// what the plan does not know, such as the column types the caller
// converted JSON values to, and the names it was written with.
//
// Lifetimes. A statement is built apart, in a context of its own under the
// caller's (so an error halfway frees it, and leaves the table as it was),
// and installed in one step once its plan is kept. Calls nest: a trigger
// of the target, or an index expression the build reads, may call pg_idem
// again, and that call may replace the entry the outer call is running or
// building. So a statement is never changed or freed once installed: its
// replacement retires it, and retired statements are freed by the first
// lookup of a later transaction, when no call can still be running them;
// so are stale ones still in the table (of a dropped table, say).
// A hash shared by two signatures is no different: they take turns in the
// entry, at the cost of a rebuild.
extern "C" {
#include "postgres.h"

#include "common/hashfn.h"
#include "executor/spi.h"
#include "nodes/pg_list.h"
#include "storage/proc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
}

#include "pg/compat.hpp"
#include "pg/guard.hpp"
#include "pg/plan_cache.hpp"
#include "pg/relation_invalidation.hpp"

#include <cstring>

namespace idem
{

namespace
{

struct Entry {
	uint64 hash; // the hash key
	Statement *current;
};

HTAB *statements = NULL;
MemoryContext statements_context = NULL;
uint64 invalidations = 0;

// Statements replaced since the first lookup of the current transaction,
// freed by the first lookup of a later one; then too, if an invalidation
// came, the stale statements still in the table are dropped (those of a
// dropped table would otherwise stay for good).
List *retired = NIL;
bool stale_to_drop = false;
LocalTransactionId last_lookup_in = InvalidLocalTransactionId;

void invalidate_relation(Oid relid)
{
	invalidations++;
	stale_to_drop = true;
	if (statements == NULL)
		return;
	HASH_SEQ_STATUS seq;
	hash_seq_init(&seq, statements);
	Entry *entry;
	while ((entry = static_cast<Entry *>(hash_seq_search(&seq))) != NULL) {
		if (relid == InvalidOid || entry->current->relid == relid)
			entry->current->valid = false;
	}
}

void invalidate_all(Datum, int, uint32)
{
	invalidate_relation(InvalidOid);
}

void free_statement(Statement *st)
{
	SPI_freeplan(st->plan);
	MemoryContextDelete(st->context);
}

// At the first lookup of a transaction, when no call holds any statement.
void free_unused()
{
	ListCell *lc;
	foreach (lc, retired)
		free_statement(static_cast<Statement *>(lfirst(lc)));
	list_free(retired);
	retired = NIL;
	if (!stale_to_drop)
		return;
	stale_to_drop = false;
	HASH_SEQ_STATUS seq;
	hash_seq_init(&seq, statements);
	Entry *entry;
	while ((entry = static_cast<Entry *>(hash_seq_search(&seq))) != NULL) {
		if (entry->current->valid)
			continue;
		free_statement(entry->current);
		hash_search(statements, &entry->hash, HASH_REMOVE, NULL);
	}
}

void retire(Statement *st)
{
	MemoryContext old = MemoryContextSwitchTo(statements_context);
	retired = lappend(retired, st);
	MemoryContextSwitchTo(old);
}

void create_table()
{
	statements_context =
	    AllocSetContextCreate(CacheMemoryContext, "pg_idem statements", ALLOCSET_SMALL_SIZES);
	HASHCTL ctl;
	memset(&ctl, 0, sizeof ctl);
	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(Entry);
	ctl.hcxt = statements_context;
	statements = hash_create("pg_idem statements", 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

} // namespace

// PostgreSQL calls this through the guard (guard.hpp).
extern "C" void idem_plan_cache_invalidate_all(Datum arg, int cache_id, uint32 hash)
{
	guard([&] { invalidate_all(arg, cache_id, hash); });
}

Statement *statement_lookup(const char *signature, size_t signature_len, Oid relid)
{
	if (statements == NULL)
		create_table();
	if (compat::my_local_transaction_id() != last_lookup_in) {
		free_unused();
		last_lookup_in = compat::my_local_transaction_id();
	}

	uint64 hash = hash_bytes_extended(reinterpret_cast<const unsigned char *>(signature),
	                                  int(signature_len), 0);
	Entry *entry = static_cast<Entry *>(hash_search(statements, &hash, HASH_FIND, NULL));
	if (entry != NULL) {
		Statement *st = entry->current;
		if (st->valid && st->signature_len == signature_len &&
		    memcmp(st->signature, signature, signature_len) == 0)
			return st;
	}

	MemoryContext context =
	    AllocSetContextCreate(CurrentMemoryContext, "pg_idem statement", ALLOCSET_SMALL_SIZES);
	Statement *st = static_cast<Statement *>(MemoryContextAllocZero(context, sizeof *st));
	st->hash = hash;
	st->signature = static_cast<char *>(MemoryContextAlloc(context, signature_len + 1));
	memcpy(st->signature, signature, signature_len);
	st->signature_len = signature_len;
	st->relid = relid;
	st->built_after = invalidations;
	st->valid = true;
	st->context = context;
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
	// Below, only running out of memory could fail, and then it would only
	// leak this statement: the entry keeps what it had.
	st->plan = plan;
	st->valid = st->built_after == invalidations;
	MemoryContextSetParent(st->context, statements_context);
	bool found;
	Entry *entry = static_cast<Entry *>(hash_search(statements, &st->hash, HASH_ENTER, &found));
	if (found)
		retire(entry->current);
	entry->current = st;
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
	on_relation_invalidation(invalidate_relation);
	CacheRegisterSyscacheCallback(NAMESPACEOID, idem_plan_cache_invalidate_all, 0);
}

} // namespace idem
