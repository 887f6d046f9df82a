// Prepared statements that live as long as the backend, so that no call
// parses or plans SQL after the first. Include after postgres.h.
#pragma once

extern "C" {
#include "executor/spi.h"
}

#include <cstddef>
#include <cstdint>

namespace idem {

// One prepared statement and the facts it was built from. It is tied to one
// relation: any relcache invalidation of that relation (ALTER TABLE, DROP,
// a change of its indexes or policies) makes it stale, and the next lookup
// hands it back for rebuilding.
struct Statement {
	uint64 hash;	       // of the caller's signature string: the hash key
	char *signature;       // the signature itself, compared on every hit
	size_t signature_len;
	Oid relid;	   // the relation whose invalidation makes it stale
	bool valid;	   // cleared by the invalidation callback
	SPIPlanPtr plan;   // NULL until built
	MemoryContext context; // owns `info`; reset on every rebuild
	void *info;	   // the caller's description of the statement
};

// Finds or creates the statement for `signature` (any bytes that identify
// its SQL and shape). Returns it ready to run, or, when statement_ready() is
// false, emptied for the caller to fill `info` in `context` and call
// statement_prepare().
Statement *statement_lookup(const char *signature, size_t signature_len, Oid relid);

inline bool statement_ready(const Statement *st) { return st->valid && st->plan != NULL; }

// Prepares `sql` inside the caller's SPI connection and keeps the plan.
void statement_prepare(Statement *st, const char *sql, int nargs, Oid *argtypes);

// The common case in one call: the statement for `signature`, tied to
// `relid`, prepared the first time from `sql_format` with its one %s
// replaced by `table_name`. Inside the caller's SPI connection.
Statement *statement_for(const char *signature, Oid relid, const char *table_name,
			 const char *sql_format, int nargs, Oid *argtypes);

void plan_cache_register_callbacks();

} // namespace idem
