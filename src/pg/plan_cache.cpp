// A backend-local hash table of prepared SPI statements.
//
// Invalidation: a relcache callback marks every statement tied to the
// invalidated relation stale (all of them when PostgreSQL invalidates the
// whole relcache). A rebuild first sets `valid` and only then reads the
// catalogs, so an invalidation that arrives while it reads leaves the entry
// stale rather than wrongly fresh; an error halfway leaves `plan` NULL, which
// also means stale. The plans themselves are also revalidated by PostgreSQL's
// plan cache; our own invalidation exists for what the plan does not know,
// such as the column types the caller converted JSON values to.
extern "C" {
#include "postgres.h"

#include "executor/spi.h"
#include "common/hashfn.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
}

#include "pg/plan_cache.hpp"

#include <cstring>

namespace idem {

namespace {

HTAB *statements = NULL;
MemoryContext statements_context = NULL;

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

	uint64 hash = hash_bytes_extended(reinterpret_cast<const unsigned char *>(signature),
					  int(signature_len), 0);
	bool found;
	Statement *st = static_cast<Statement *>(hash_search(statements, &hash, HASH_ENTER, &found));
	if (!found) {
		st->signature = NULL;
		st->signature_len = 0;
		st->relid = relid;
		st->valid = false;
		st->plan = NULL;
		st->info = NULL;
		st->context = AllocSetContextCreate(statements_context, "pg_idem statement",
						    ALLOCSET_SMALL_SIZES);
	}
	// Two signatures sharing a hash take turns in one entry: a collision
	// costs a rebuild, never the wrong statement.
	bool same = st->signature_len == signature_len &&
		    memcmp(st->signature, signature, signature_len) == 0;
	if (same && statement_ready(st))
		return st;

	if (st->plan != NULL) {
		SPIPlanPtr old = st->plan;
		st->plan = NULL;
		SPI_freeplan(old);
	}
	MemoryContextReset(st->context);
	st->info = NULL;
	st->signature = static_cast<char *>(MemoryContextAlloc(st->context, signature_len + 1));
	memcpy(st->signature, signature, signature_len);
	st->signature_len = signature_len;
	st->relid = relid;
	st->valid = true;
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
}

Statement *statement_for(const char *signature, Oid relid, const char *table_name,
			 const char *sql_format, int nargs, Oid *argtypes)
{
	Statement *st = statement_lookup(signature, strlen(signature), relid);
	if (!statement_ready(st))
		statement_prepare(st, psprintf(sql_format, table_name), nargs, argtypes);
	return st;
}

void plan_cache_register_callbacks() { CacheRegisterRelcacheCallback(invalidate_relation, 0); }

} // namespace idem
