// idem_retry and idem_forget: what an operator does to one record by hand.
// Both run as the extension owner and are not executable by PUBLIC.
extern "C" {
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
}

#include "pg/claims/claim_wait.hpp"
#include "pg/cache/duplicate_cache.hpp"
#include "pg/extension_objects.hpp"
#include "pg/as_owner.hpp"
#include "pg/guard.hpp"
#include "pg/scopes/scope_grants.hpp"
#include "pg/records/record_statements.hpp"
#include "pg/records/records.hpp"
#include "pg/records/routes.hpp"
#include "pg/scopes/scopes.hpp"

#include <cstring>

namespace
{

// Runs one statement about the record (record_statements.hpp: $1 the key
// id, then $2 and $3 the timestamps, if given), which SPI must answer with
// `expected`; returns the rows it touched.
uint64 on_record(const char *signature, int expected, const char *sql_format,
                 const idem::RecordRef &ref, TimestampTz recorded_at = 0,
                 TimestampTz expires_at = 0)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	Oid types[] = {BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	int nargs = recorded_at != 0 ? 3 : 1;
	idem::RecordStatement st = idem::record_statement(signature, sql_format, nargs, types);
	Datum values[] = {PointerGetDatum(ref.id), TimestampTzGetDatum(recorded_at),
	                  TimestampTzGetDatum(expires_at)};
	idem::OwnChange own = idem::cache_own_change_begin(ref.id);
	uint64 touched = idem::run_record_statement(st, ref, values, NULL, false, 0, expected);
	idem::cache_own_change_end(own);
	SPI_finish();
	return touched;
}

idem::RecordRef operator_ref(const char *fn, FunctionCallInfo fcinfo, Oid caller)
{
	idem::RecordRef ref = idem::record_ref(fn, PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
	                                       PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1));
	idem::check_scope(fn, caller, ref.scope);
	idem::take_route(fn, fcinfo, 2, ref);
	PreventCommandIfReadOnly(fn);
	return ref;
}

} // namespace

// idem_retry(scope, key, route): a dead record becomes failed, with max_attempts
// more attempts, and lives a full TTL from the retry, as one that fails
// does (so no purge takes it, and its attempt count, before the next
// claim). The attempt counter keeps growing, so fencing tokens are never
// reused. Returns false when the record is not dead.
IDEM_SQL_FUNCTION_AS_OWNER(idem_retry)
{
	static const char fn[] = "idem_retry";
	idem::RecordRef ref = operator_ref(fn, fcinfo, caller);
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	TimestampTz expires_at = idem::record_expiry(fn, now, NULL, idem::scope_settings(ref.scope));
	uint64 n = on_record("operator:retry", SPI_OK_UPDATE,
	                     "UPDATE %s SET status = 'failed', attempt_base = attempts, "
	                     "recorded_at = $2, expires_at = $3 "
	                     "WHERE %s AND status OPERATOR(pg_catalog.=) 'dead'",
	                     ref, now, expires_at);
	if (n > 0)
		idem::cache_invalidate(ref.id);
	PG_RETURN_BOOL(n > 0);
}

// idem_forget(scope, key, route): deletes the record; the next message with this
// key is new. Returns false when there was none. A claim in progress is
// refused: its holder's attempt number would be handed out again, and its
// late completion would land on someone else's claim. Such a claim ends by
// its lease (reconciliation, or a takeover); fail it first to forget it.
IDEM_SQL_FUNCTION_AS_OWNER(idem_forget)
{
	static const char fn[] = "idem_forget";
	idem::RecordRef ref = operator_ref(fn, fcinfo, caller);
	uint64 n = on_record("operator:forget", SPI_OK_DELETE,
	                     "DELETE FROM %s WHERE %s "
	                     "AND status OPERATOR(pg_catalog.<>) 'in_progress'",
	                     ref);
	if (n > 0)
		idem::cache_invalidate(ref.id);
	// The status as text, as in reconcile.cpp: the primary key's probe,
	// not a scan of idem_records_in_flight.
	if (n == 0 && on_record("operator:in_progress", SPI_OK_SELECT,
	                        "SELECT 1 FROM %s WHERE %s "
	                        "AND status::pg_catalog.text OPERATOR(pg_catalog.=) 'in_progress' "
	                        "FOR UPDATE",
	                        ref) > 0)
		ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		        errmsg("%s: key \"%s\" in scope \"%s\" is in progress", fn,
		               text_to_cstring(ref.key), text_to_cstring(ref.scope)),
		        errdetail("Forgetting it would let its holder's late completion land on "
		                  "a new claim."),
		        errhint("Let its lease expire and reconcile it, or record it with "
		                "idem_fail, then forget it."));
	if (n > 0)
		idem::claim_wake_at_commit(ref.id);
	PG_RETURN_BOOL(n > 0);
}
