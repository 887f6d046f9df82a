// idem_try_insert(scope, key, ttl): the unique-constraint pattern on the
// managed table. What happens when a duplicate arrives is in records.cpp;
// this file turns the SQL arguments into a claim.
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
#include "pg/scopes.hpp"
#include "pg/stats.hpp"

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
	TimestampTz expires_at =
	    idem::record_expiry(fn, now, PG_ARGISNULL(2) ? NULL : PG_GETARG_INTERVAL_P(2),
				idem::scope_settings(ref.scope));
	bool first = idem::records_try_insert(ref, now, expires_at);
	idem::stats_count(ref.scope, first ? idem::stat_claims : idem::stat_duplicates);
	PG_RETURN_BOOL(first);
}
