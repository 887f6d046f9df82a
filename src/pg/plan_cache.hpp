// Prepared statements that live as long as the backend, so that no call
// parses or plans SQL after the first. Include after postgres.h.
#pragma once

extern "C" {
#include "executor/spi.h"
}

#include <cstddef>
#include <cstdint>

namespace idem
{

// One prepared statement and the facts it was built from. It is tied to one
// relation: any relcache invalidation of that relation (ALTER TABLE, DROP,
// a change of its indexes or policies), or a renamed schema, makes it
// stale, and the next lookup builds a new one. Once installed it never
// changes (but for `valid`), and a statement a call holds stays alive until
// the transaction ends, whatever other calls install meanwhile.
struct Statement {
	uint64 hash;     // of the caller's signature string
	char *signature; // the signature itself, compared on every hit
	size_t signature_len;
	Oid relid;             // the relation whose invalidation makes it stale
	uint64 built_after;    // the invalidation count when its build began
	bool valid;            // cleared by the invalidation callbacks
	SPIPlanPtr plan;       // NULL until prepared
	MemoryContext context; // owns this struct, the signature and `info`
	void *info;            // the caller's description of the statement
};

// The statement for `signature` (any bytes that identify its SQL and
// shape), ready to run; or, when statement_ready() is false, a new one for
// the caller to build: fill `info` in `context`, then statement_prepare(),
// which installs it. A build that raises an error leaves nothing behind.
Statement *statement_lookup(const char *signature, size_t signature_len, Oid relid);

inline bool statement_ready(const Statement *st)
{
	return st->plan != NULL;
}

// Prepares `sql` inside the caller's SPI connection, keeps the plan and
// installs the statement for its signature.
void statement_prepare(Statement *st, const char *sql, int nargs, Oid *argtypes);

// The common case in one call: the statement for `signature`, tied to
// `relid`, prepared the first time from `sql_format` with its one %s
// replaced by `table_name`. Inside the caller's SPI connection.
Statement *statement_for(const char *signature, Oid relid, const char *table_name,
                         const char *sql_format, int nargs, Oid *argtypes);

void plan_cache_register_callbacks();

} // namespace idem
