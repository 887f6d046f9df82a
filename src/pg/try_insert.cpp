// idem_try_insert(scope, key, ttl): the unique-constraint pattern on the
// managed table. What happens when a duplicate arrives is in records.cpp;
// this file turns the SQL arguments into a claim and decides the TTL.
extern "C" {
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
}

#include "pg/guard.hpp"
#include "pg/records.hpp"
#include "pg/settings.hpp"

namespace {

// The expiry of a record claimed at `now`: the call's TTL, else the default.
TimestampTz record_expiry(const char *fn, TimestampTz now, Interval *ttl)
{
	if (ttl == NULL)
		return now + int64(idem::default_ttl_seconds) * USECS_PER_SEC;

	TimestampTz expires_at = DatumGetTimestampTz(DirectFunctionCall2(
	    timestamptz_pl_interval, TimestampTzGetDatum(now), IntervalPGetDatum(ttl)));
	if (expires_at <= now)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			errmsg("%s: ttl must be positive", fn),
			errdetail("The ttl given was %s.",
				  DatumGetCString(DirectFunctionCall1(
				      interval_out, IntervalPGetDatum(ttl)))));
	return expires_at;
}

} // namespace

IDEM_SQL_FUNCTION(idem_try_insert)
{
	static const char fn[] = "idem_try_insert";
	idem::RecordRef ref = idem::record_ref(fn, PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
					       PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1));
	// The record is written below SQL, so the checks a plain INSERT gets
	// from the executor are made here.
	PreventCommandIfReadOnly(fn);
	PreventCommandDuringRecovery(fn);
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	TimestampTz expires_at = record_expiry(fn, now, PG_ARGISNULL(2) ? NULL : PG_GETARG_INTERVAL_P(2));
	PG_RETURN_BOOL(idem::records_try_insert(ref, now, expires_at));
}
