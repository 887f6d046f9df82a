// Scope settings: the backend-local cache and idem_configure.
//
// The cache maps a scope to its settings, including "not configured", so an
// unconfigured scope costs one hash lookup per claim. idem_configure writes
// idem_scopes and calls CacheInvalidateRelcacheByRelid on it, which at
// commit reaches every backend's relcache callback; the callback drops the
// whole cache. Nothing else may write idem_scopes (PUBLIC has no privilege).
extern "C" {
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/xlog.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
}

#include "core/record_key.hpp"
#include "pg/compat.hpp"
#include "pg/extension_objects.hpp"
#include "pg/guard.hpp"
#include "pg/plan_cache.hpp"
#include "pg/records/records.hpp"
#include "pg/relation_invalidation.hpp"
#include "pg/scopes/scope_grants.hpp"
#include "pg/scopes/scopes.hpp"
#include "pg/settings.hpp"

#include <cstring>

namespace idem
{

namespace
{

struct CachedScope {
	char scope[max_scope_bytes + 1]; // hash key (text has no NUL bytes)
	ScopeSettings settings;
};

HTAB *cache = NULL;
Oid cache_scopes_relid = InvalidOid; // the idem_scopes the cache was read from
bool cache_stale = false;
constexpr long max_cached_scopes = 10000;

// Invalidation callbacks may not touch catalogs or free what a caller may be
// using: mark the cache stale, and drop it at the next safe point.
void mark_stale(Oid relid)
{
	if (relid == InvalidOid || relid == cache_scopes_relid)
		cache_stale = true;
}

HTAB *scope_cache()
{
	if (cache != NULL && (cache_stale || hash_get_num_entries(cache) >= max_cached_scopes)) {
		hash_destroy(cache);
		cache = NULL;
	}
	if (cache == NULL) {
		HASHCTL ctl;
		memset(&ctl, 0, sizeof ctl);
		ctl.keysize = max_scope_bytes + 1;
		ctl.entrysize = sizeof(CachedScope);
		ctl.hcxt = CacheMemoryContext;
		cache = hash_create("pg_idem scopes", 64, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		cache_stale = false;
	}
	return cache;
}

Statement *settings_statement(const ExtensionObjects &objects)
{
	// The reconciliation function by the OID it was bound to, in the cluster
	// where that OID means it ($2); elsewhere by its signature (0 when no
	// function has it: refused, as a dropped one).
	Oid types[] = {TEXTOID, INT8OID};
	if (!objects.scopes_by_signature) // 0.2's SQL or older: a regprocedure
		return statement_for("scopes:select:0.2", objects.scopes, objects.scopes_name,
		                     "SELECT ttl, lease, max_attempts, on_fingerprint_mismatch, "
		                     "reconcile_function, takeover_on_disconnect, configured_by "
		                     "FROM %s WHERE scope OPERATOR(pg_catalog.=) $1 AND $2 IS NOT NULL",
		                     2, types);
	return statement_for(
	    "scopes:select", objects.scopes, objects.scopes_name,
	    "SELECT ttl, lease, max_attempts, on_fingerprint_mismatch, "
	    "CASE WHEN reconcile_function IS NULL THEN NULL "
	    "WHEN reconcile_bound_in OPERATOR(pg_catalog.=) $2 "
	    "THEN reconcile_function_oid "
	    "ELSE COALESCE(pg_catalog.to_regprocedure(reconcile_function)::pg_catalog.oid, "
	    "0) END, "
	    "takeover_on_disconnect, configured_by "
	    "FROM %s WHERE scope OPERATOR(pg_catalog.=) $1",
	    2, types);
}

ScopeSettings read_settings(const ExtensionObjects &objects, text *scope)
{
	ScopeSettings s;
	memset(&s, 0, sizeof s);
	s.max_attempts = default_max_attempts;
	s.mismatch_is_error = true;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	// Settings are configuration, not data: read with the latest snapshot,
	// not the transaction's. A REPEATABLE READ transaction would otherwise
	// read (and keep in the cache, whose invalidation it has just taken in)
	// settings that a commit since its start replaced.
	Datum values[] = {PointerGetDatum(scope), Int64GetDatum(int64(GetSystemIdentifier()))};
	int rc = SPI_execute_snapshot(settings_statement(objects)->plan, values, NULL,
	                              GetLatestSnapshot(), InvalidSnapshot, true, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "pg_idem: unexpected SPI result %s", SPI_result_code_string(rc));
	if (SPI_processed == 1) {
		HeapTuple row = SPI_tuptable->vals[0];
		TupleDesc desc = SPI_tuptable->tupdesc;
		bool isnull;
		Datum d = SPI_getbinval(row, desc, 1, &isnull);
		if ((s.has_ttl = !isnull))
			s.ttl = *DatumGetIntervalP(d);
		d = SPI_getbinval(row, desc, 2, &isnull);
		if ((s.has_lease = !isnull))
			s.lease = *DatumGetIntervalP(d);
		d = SPI_getbinval(row, desc, 3, &isnull);
		if (!isnull)
			s.max_attempts = DatumGetInt32(d);
		d = SPI_getbinval(row, desc, 4, &isnull);
		if (!isnull)
			s.mismatch_is_error = strcmp(TextDatumGetCString(d), "status") != 0;
		d = SPI_getbinval(row, desc, 5, &isnull);
		if ((s.has_reconciler = !isnull))
			s.reconcile_function = DatumGetObjectId(d);
		d = SPI_getbinval(row, desc, 6, &isnull);
		if (!isnull)
			s.takeover_on_disconnect = DatumGetBool(d);
		d = SPI_getbinval(row, desc, 7, &isnull);
		s.configured_by = DatumGetObjectId(d);
	}
	SPI_finish();
	return s;
}

} // namespace

ScopeSettings scope_settings(text *scope)
{
	const ExtensionObjects &objects = extension_objects();
	char key[max_scope_bytes + 1];
	size_t len = VARSIZE_ANY_EXHDR(scope);
	memcpy(key, VARDATA_ANY(scope), len);
	key[len] = '\0';

	HTAB *htab = scope_cache();
	bool found;
	CachedScope *entry = static_cast<CachedScope *>(hash_search(htab, key, HASH_FIND, &found));
	if (found && cache_scopes_relid == objects.scopes)
		return entry->settings;

	ScopeSettings settings = read_settings(objects, scope);
	// Reading may have processed invalidations: only cache what is current.
	htab = scope_cache();
	cache_scopes_relid = objects.scopes;
	entry = static_cast<CachedScope *>(hash_search(htab, key, HASH_ENTER, &found));
	entry->settings = settings;
	return settings;
}

double interval_microseconds(const Interval *interval)
{
	return double(interval->month) * DAYS_PER_MONTH * USECS_PER_DAY +
	       double(interval->day) * USECS_PER_DAY + double(interval->time);
}

void check_positive_interval(const char *fn, const char *what, Interval *interval)
{
	// Positive on every date: a mixed interval such as '1 month -30 days'
	// is positive from some dates and not from others (it is -1 day from
	// February 1), and a record must never be born expired.
	bool positive = interval->month >= 0 && interval->day >= 0 && interval->time >= 0 &&
	                (interval->month > 0 || interval->day > 0 || interval->time > 0);
	if (!positive)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: %s must be positive", fn, what),
		        errdetail("The %s given was %s.", what,
		                  DatumGetCString(
		                      DirectFunctionCall1(interval_out, IntervalPGetDatum(interval)))),
		        errhint("Its months, days and time must each be zero or more."));
	// Far beyond any use, and so that now + it stays a timestamp.
	if (interval_microseconds(interval) > max_interval_microseconds)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: %s must be at most %d years", fn, what, max_interval_years),
		        errdetail("The %s given was %s.", what,
		                  DatumGetCString(
		                      DirectFunctionCall1(interval_out, IntervalPGetDatum(interval)))));
}

TimestampTz record_expiry(const char *fn, TimestampTz now, Interval *call_ttl,
                          const ScopeSettings &settings)
{
	Interval *ttl = call_ttl;
	if (ttl != NULL)
		check_positive_interval(fn, "ttl", ttl);
	else if (settings.has_ttl)
		ttl = const_cast<Interval *>(&settings.ttl);
	else
		return now + int64(default_ttl_seconds) * USECS_PER_SEC;
	return DatumGetTimestampTz(DirectFunctionCall2(
	    timestamptz_pl_interval, TimestampTzGetDatum(now), IntervalPGetDatum(ttl)));
}

Interval scope_ttl(const ScopeSettings &settings)
{
	if (settings.has_ttl)
		return settings.ttl;
	Interval ttl;
	ttl.month = 0;
	ttl.day = 0;
	ttl.time = int64(default_ttl_seconds) * USECS_PER_SEC;
	return ttl;
}

void bind_reconcile_functions_here(const ExtensionObjects &objects)
{
	if (!objects.scopes_by_signature)
		return;
	Oid types[] = {INT8OID};
	Datum values[] = {Int64GetDatum(int64(GetSystemIdentifier()))};
	Statement *unbound = statement_for("scopes:unbound", objects.scopes, objects.scopes_name,
	                                   "SELECT 1 FROM %s WHERE reconcile_function IS NOT NULL "
	                                   "AND (reconcile_bound_in IS NULL "
	                                   "OR reconcile_bound_in OPERATOR(pg_catalog.<>) $1) LIMIT 1",
	                                   1, types);
	if (SPI_execute_plan(unbound->plan, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "pg_idem: reading idem_scopes failed");
	if (SPI_processed == 0)
		return;
	Statement *bind =
	    statement_for("scopes:bind", objects.scopes, objects.scopes_name,
	                  "UPDATE %s SET reconcile_function_oid = "
	                  "pg_catalog.to_regprocedure(reconcile_function)::pg_catalog.oid, "
	                  "reconcile_bound_in = $1 "
	                  "WHERE reconcile_function IS NOT NULL AND (reconcile_bound_in IS NULL "
	                  "OR reconcile_bound_in OPERATOR(pg_catalog.<>) $1) "
	                  "AND pg_catalog.to_regprocedure(reconcile_function) IS NOT NULL",
	                  1, types);
	if (SPI_execute_plan(bind->plan, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "pg_idem: binding reconciliation functions failed");
	if (SPI_processed > 0)
		CacheInvalidateRelcacheByRelid(objects.scopes);
}

void scopes_register_callbacks()
{
	on_relation_invalidation(mark_stale);
}

bool reconcile_function_fits(Oid func)
{
	HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(func));
	if (!HeapTupleIsValid(tuple))
		return false;
	Form_pg_proc proc = reinterpret_cast<Form_pg_proc>(GETSTRUCT(tuple));
	bool ok = proc->prokind == PROKIND_FUNCTION && !proc->proretset &&
	          proc->prorettype == BOOLOID && proc->pronargs == 2 &&
	          proc->proargtypes.values[0] == TEXTOID && proc->proargtypes.values[1] == TEXTOID;
	ReleaseSysCache(tuple);
	return ok;
}

namespace
{

Oid function_owner(Oid func)
{
	HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(func));
	if (!HeapTupleIsValid(tuple))
		return InvalidOid;
	Oid owner = reinterpret_cast<Form_pg_proc>(GETSTRUCT(tuple))->proowner;
	ReleaseSysCache(tuple);
	return owner;
}

} // namespace

bool reconciler_runs_safely_as(Oid func, Oid role)
{
	Oid owner = function_owner(func);
	return OidIsValid(owner) && SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(role)) &&
	       has_privs_of_role(owner, role);
}

namespace
{

// A reconciliation function must be fn(scope text, key text) RETURNS boolean,
// the configuring role must be allowed to call it, and its owner must not
// gain the role's privileges by changing it.
void check_reconcile_function(const char *fn, Oid func, Oid role)
{
	if (!reconcile_function_fits(func))
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: reconciliation function %s has the wrong signature", fn,
		               format_procedure(func)),
		        errhint("It must be a function (scope text, key text) RETURNS boolean that "
		                "says whether the effect happened."));
	if (object_aclcheck(ProcedureRelationId, func, role, ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR, errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
		        errmsg("%s: permission denied for function %s", fn, format_procedure(func)));
	if (!reconciler_runs_safely_as(func, role))
		ereport(ERROR, errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
		        errmsg("%s: reconciliation function %s is owned by role \"%s\", which does "
		               "not have the privileges of role \"%s\"",
		               fn, format_procedure(func), GetUserNameFromId(function_owner(func), false),
		               GetUserNameFromId(role, false)),
		        errdetail("The function runs as the role that configures the scope, and its "
		                  "owner can change its body at any time."),
		        errhint("Configure the scope as the function's owner, or give the function "
		                "to a role that has the privileges of \"%s\".",
		                GetUserNameFromId(role, false)));
}

} // namespace

} // namespace idem

// idem_configure(scope, ttl, lease, max_attempts, on_fingerprint_mismatch,
//                reconcile_function, takeover_on_disconnect) RETURNS idem_scopes
// Sets every setting of the scope at once; a NULL means "the default".
IDEM_SQL_FUNCTION(idem_configure)
{
	static const char fn[] = "idem_configure";
	// Validates the scope like every other function (the key is a dummy).
	text *scope = PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0);
	idem::record_ref(fn, scope, cstring_to_text("-"));
	if (!PG_ARGISNULL(1))
		idem::check_positive_interval(fn, "ttl", PG_GETARG_INTERVAL_P(1));
	if (!PG_ARGISNULL(2))
		idem::check_positive_interval(fn, "lease", PG_GETARG_INTERVAL_P(2));
	if (!PG_ARGISNULL(3) && PG_GETARG_INT32(3) < 1)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: max_attempts must be at least 1", fn));
	if (!PG_ARGISNULL(4)) {
		char *policy = text_to_cstring(PG_GETARG_TEXT_PP(4));
		if (strcmp(policy, "error") != 0 && strcmp(policy, "status") != 0)
			ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			        errmsg("%s: on_fingerprint_mismatch must be 'error' or 'status'", fn),
			        errdetail("The value given was \"%s\".", policy));
	}
	// The role that configures the scope is the one its reconciliation
	// function will run as: the current user, which is the role whose code
	// runs here. (This function is SECURITY INVOKER for that reason: the
	// outer user of a SECURITY DEFINER function is the session's user, which
	// inside a SECURITY DEFINER caller or a maintenance command such as
	// ANALYZE running an index expression is someone else, even a
	// superuser.) The write itself runs as the owner of idem_scopes, below.
	Oid configured_by = GetUserId();
	// Under pg_idem 0.1's SQL the function is still SECURITY DEFINER, and
	// the current user would be its owner: refuse until the update.
	HeapTuple proc = SearchSysCache1(PROCOID, ObjectIdGetDatum(fcinfo->flinfo->fn_oid));
	bool definer =
	    HeapTupleIsValid(proc) && reinterpret_cast<Form_pg_proc>(GETSTRUCT(proc))->prosecdef;
	if (HeapTupleIsValid(proc))
		ReleaseSysCache(proc);
	if (definer)
		ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		        errmsg("%s: this database has pg_idem 0.1's SQL objects", fn),
		        errhint("Run ALTER EXTENSION pg_idem UPDATE."));
	const idem::ExtensionObjects &objects = idem::extension_objects();
	if (!objects.scopes_by_signature)
		ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		        errmsg("%s: this database has the SQL of pg_idem 0.2 or older, and the "
		               "library is 0.3",
		               fn),
		        errhint("Run ALTER EXTENSION pg_idem UPDATE."));
	if (!PG_ARGISNULL(5))
		idem::check_reconcile_function(fn, PG_GETARG_OID(5), configured_by);

	// What SECURITY DEFINER would do, once configured_by is known: run as
	// the table's owner, restricted, until the end of the write. An error
	// restores the caller's identity with the transaction's abort.
	Relation scopes = table_open(objects.scopes, AccessShareLock);
	Oid owner = scopes->rd_rel->relowner;
	table_close(scopes, AccessShareLock);
	Oid caller;
	int caller_context;
	GetUserIdAndSecContext(&caller, &caller_context);
	SetUserIdAndSecContext(owner, caller_context | SECURITY_LOCAL_USERID_CHANGE |
	                                  SECURITY_RESTRICTED_OPERATION);
	// A scope is configured only by a role that may use it (read as the
	// owner, who may read its grants).
	idem::check_scope(fn, configured_by, scope);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	char *sql =
	    psprintf("INSERT INTO %s AS s (scope, ttl, lease, max_attempts, on_fingerprint_mismatch, "
	             "reconcile_function, takeover_on_disconnect, configured_by, configured_at, "
	             "reconcile_function_oid, reconcile_bound_in) "
	             "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, pg_catalog.now(), $9, $10) "
	             "ON CONFLICT (scope) DO UPDATE SET ttl = EXCLUDED.ttl, lease = EXCLUDED.lease, "
	             "max_attempts = EXCLUDED.max_attempts, "
	             "on_fingerprint_mismatch = EXCLUDED.on_fingerprint_mismatch, "
	             "reconcile_function = EXCLUDED.reconcile_function, "
	             "takeover_on_disconnect = EXCLUDED.takeover_on_disconnect, "
	             "configured_by = EXCLUDED.configured_by, configured_at = EXCLUDED.configured_at, "
	             "reconcile_function_oid = EXCLUDED.reconcile_function_oid, "
	             "reconcile_bound_in = EXCLUDED.reconcile_bound_in "
	             "RETURNING s.*",
	             objects.scopes_name);
	// The function by its signature, which survives pg_upgrade, and by the
	// OID it has in this cluster (see bind_reconcile_functions_here).
	Oid types[] = {TEXTOID, INTERVALOID, INTERVALOID, INT4OID, TEXTOID,
	               TEXTOID, BOOLOID,     REGROLEOID,  OIDOID,  INT8OID};
	Datum values[10];
	char nulls[10];
	for (int i = 0; i < 7; i++) {
		values[i] = PG_ARGISNULL(i) ? 0 : PG_GETARG_DATUM(i);
		nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
	}
	if (!PG_ARGISNULL(5))
		values[5] = CStringGetTextDatum(format_procedure_qualified(PG_GETARG_OID(5)));
	values[7] = ObjectIdGetDatum(configured_by);
	nulls[7] = ' ';
	values[8] = PG_ARGISNULL(5) ? 0 : PG_GETARG_DATUM(5);
	nulls[8] = nulls[5];
	values[9] = Int64GetDatum(int64(GetSystemIdentifier()));
	nulls[9] = nulls[5];
	int rc = SPI_execute_with_args(sql, 10, types, values, nulls, false, 1);
	if (rc != SPI_OK_INSERT_RETURNING || SPI_processed != 1)
		elog(ERROR, "pg_idem: unexpected SPI result %s", SPI_result_code_string(rc));
	CacheInvalidateRelcacheByRelid(objects.scopes);
	HeapTupleHeader row = SPI_returntuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc);
	SPI_finish();
	SetUserIdAndSecContext(caller, caller_context);
	PG_RETURN_HEAPTUPLEHEADER(row);
}
