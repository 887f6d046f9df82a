// idem_try_insert(scope, key, ttl, route): the unique-constraint pattern on the
// managed table. What happens when a duplicate arrives is in records.cpp;
// this file turns the SQL arguments into a claim, for a caller granted the
// scope (scope_grants.hpp).
extern "C" {
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
}

#include "pg/as_owner.hpp"
#include "pg/guard.hpp"
#include "pg/scopes/scope_grants.hpp"
#include "pg/records/records.hpp"
#include "pg/records/routes.hpp"
#include "pg/scopes/scopes.hpp"
#include "pg/stats/stats.hpp"

IDEM_SQL_FUNCTION_AS_OWNER(idem_try_insert)
{
	static const char fn[] = "idem_try_insert";
	idem::RecordRef ref = idem::record_ref(fn, PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
	                                       PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1));
	idem::check_scope(fn, caller, ref.scope);
	idem::take_route(fn, fcinfo, 3, ref);
	// The record is written below SQL, so the checks a plain INSERT gets
	// from the executor are made here.
	PreventCommandIfReadOnly(fn);
	PreventCommandDuringRecovery(fn);
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	TimestampTz expires_at = idem::record_expiry(
	    fn, now, PG_ARGISNULL(2) ? NULL : PG_GETARG_INTERVAL_P(2), idem::scope_settings(ref.scope));
	idem::CacheAnswer cache;
	bool first = idem::records_try_insert(ref, now, expires_at, &cache);
	idem::StatsDelta delta;
	memset(&delta, 0, sizeof delta);
	delta.n[first ? idem::stat_claims : idem::stat_duplicates] = 1;
	delta.n[idem::stat_cache_hits] = cache == idem::CacheAnswer::hit ? 1 : 0;
	delta.n[idem::stat_cache_misses] = cache == idem::CacheAnswer::miss ? 1 : 0;
	idem::stats_add(ref.scope, delta);
	PG_RETURN_BOOL(first);
}
