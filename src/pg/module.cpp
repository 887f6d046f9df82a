// Library entry point: the module magic, the configuration parameters and the
// cache invalidation callbacks that the other files rely on.
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "utils/guc.h"
}

#include "pg/plan_cache.hpp"
#include "pg/records.hpp"
#include "pg/settings.hpp"

#include <climits>

extern "C" {
PG_MODULE_MAGIC;
void _PG_init(void);
}

namespace idem {
int default_ttl_seconds = 7 * 24 * 60 * 60;
}

extern "C" void _PG_init(void)
{
	DefineCustomIntVariable("pg_idem.default_ttl",
				"Lifetime of an idempotency record when neither the call nor its "
				"scope gives one.",
				"A record past its expiry counts as absent, purged or not.",
				&idem::default_ttl_seconds, 7 * 24 * 60 * 60, 1, INT_MAX, PGC_SIGHUP,
				GUC_UNIT_S, NULL, NULL, NULL);

	MarkGUCPrefixReserved("pg_idem");

	idem::records_register_callbacks();
	idem::plan_cache_register_callbacks();
}
