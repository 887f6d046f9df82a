// Scope grants: the cache of who may use a scope, idem_grant, idem_revoke,
// idem_may_use_scope and the trigger that tells every backend of a change
// (see scope_grants.hpp).
//
// Grants are kept by role name, as pg_hba.conf keeps them, so that they
// survive pg_dump and a restore into a cluster whose roles have other
// OIDs. A renamed role loses its grants (they name the old name); a
// dropped role's grants stay until revoked, and would serve a new role of
// the same name: revoke a role's scopes before dropping it.
extern "C" {
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "catalog/pg_type_d.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
}

#include "core/record_key.hpp"
#include "pg/as_owner.hpp"
#include "pg/compat.hpp"
#include "pg/extension_objects.hpp"
#include "pg/guard.hpp"
#include "pg/plan_cache.hpp"
#include "pg/scopes/scope_grants.hpp"

#include <cstring>

namespace idem
{

namespace
{

// How PUBLIC is stored: no role can be named "public".
constexpr char public_grantee[] = "public";

struct GrantKey {
	Oid role;
	char name[max_scope_bytes + 1]; // zero-padded: the key is hashed as bytes
};

struct CachedAnswer {
	GrantKey key;
	bool allowed;
};

HTAB *cache = NULL;
uint64 cache_generation = 0; // extension_objects_generation() when filled
bool cache_stale = false;
constexpr long max_cached_answers = 10000;

// Invalidation callbacks may not touch catalogs: mark the cache stale, and
// drop it at the next lookup.
void forget_all(Datum, int, uint32)
{
	cache_stale = true;
}

HTAB *answers()
{
	if (cache_generation != extension_objects_generation())
		cache_stale = true;
	if (cache != NULL && (cache_stale || hash_get_num_entries(cache) >= max_cached_answers)) {
		hash_destroy(cache);
		cache = NULL;
	}
	if (cache == NULL) {
		HASHCTL ctl;
		memset(&ctl, 0, sizeof ctl);
		ctl.keysize = sizeof(GrantKey);
		ctl.entrysize = sizeof(CachedAnswer);
		ctl.hcxt = CacheMemoryContext;
		cache =
		    hash_create("pg_idem scope grants", 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		cache_stale = false;
		cache_generation = extension_objects_generation();
	}
	return cache;
}

// Reads the grants of the scope, with the latest snapshot (grants are
// configuration: a REPEATABLE READ transaction must not keep a revoked one),
// and decides. Runs as the caller's current user, which must be able to
// read idem_scope_grants (every caller is inside run_as_owner).
bool read_and_decide(const ExtensionObjects &objects, Oid role, const char *name, size_t len)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	Oid types[] = {TEXTOID};
	Statement *st =
	    statement_for("grants:select", objects.scope_grants, objects.scope_grants_name,
	                  "SELECT grantee FROM %s WHERE scope OPERATOR(pg_catalog.=) $1", 1, types);
	Datum values[] = {PointerGetDatum(cstring_to_text_with_len(name, int(len)))};
	int rc = SPI_execute_snapshot(st->plan, values, NULL, GetLatestSnapshot(), InvalidSnapshot,
	                              true, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "pg_idem: unexpected SPI result %s", SPI_result_code_string(rc));
	bool allowed = false;
	for (uint64 i = 0; i < SPI_processed && !allowed; i++) {
		bool isnull;
		char *grantee = TextDatumGetCString(
		    SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		if (strcmp(grantee, public_grantee) == 0) {
			allowed = true;
		} else {
			Oid granted = get_role_oid(grantee, true);
			allowed = OidIsValid(granted) && has_privs_of_role(role, granted);
		}
	}
	SPI_finish();
	return allowed;
}

} // namespace

// PostgreSQL calls this through the guard (guard.hpp).
extern "C" void idem_scope_grants_forget_all(Datum arg, int cache_id, uint32 hash)
{
	guard([&] { forget_all(arg, cache_id, hash); });
}

bool may_use_every_scope(Oid role)
{
	return superuser_arg(role) || has_privs_of_role(role, extension_objects().owner);
}

bool may_use_scope(Oid role, const char *name, size_t len)
{
	const ExtensionObjects &objects = extension_objects();
	if (role == objects.owner || superuser_arg(role))
		return true;
	// pg_idem 0.2's SQL has no grants (and its functions run as the owner).
	if (!OidIsValid(objects.scope_grants))
		return true;
	// idem_grant takes no longer name (a stream's may be longer), so no
	// grant names it; nor could the cache key hold it.
	if (len > max_scope_bytes)
		return has_privs_of_role(role, objects.owner);
	GrantKey key;
	memset(&key, 0, sizeof key);
	key.role = role;
	memcpy(key.name, name, len);

	bool found;
	CachedAnswer *entry =
	    static_cast<CachedAnswer *>(hash_search(answers(), &key, HASH_FIND, &found));
	if (found)
		return entry->allowed;

	bool allowed =
	    has_privs_of_role(role, objects.owner) || read_and_decide(objects, role, name, len);
	// Reading may have processed invalidations: answers() drops what they
	// made stale before this answer, which is current, goes in.
	HTAB *htab = answers();
	entry = static_cast<CachedAnswer *>(hash_search(htab, &key, HASH_ENTER, &found));
	entry->allowed = allowed;
	return allowed;
}

void check_scope(const char *fn, Oid role, const text *name, const char *what)
{
	size_t len = VARSIZE_ANY_EXHDR(name);
	if (may_use_scope(role, VARDATA_ANY(name), len))
		return;
	ereport(ERROR, errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
	        errmsg("%s: role \"%s\" may not use %s \"%s\"", fn, GetUserNameFromId(role, false),
	               what, text_to_cstring(name)),
	        errhint("The owner of pg_idem grants a %s with idem_grant(%s, role).", what, what));
}

void scope_grants_register_callbacks()
{
	// Changes of idem_scope_grants come through extension_objects_generation().
	CacheRegisterSyscacheCallback(AUTHOID, idem_scope_grants_forget_all, 0);
	CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, idem_scope_grants_forget_all, 0);
}

} // namespace idem

namespace
{

// The scope argument of idem_grant and idem_revoke, checked as every
// function checks a scope.
text *scope_arg(const char *fn, FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: scope must not be null", fn));
	text *scope = PG_GETARG_TEXT_PP(0);
	size_t len = VARSIZE_ANY_EXHDR(scope);
	if (len == 0)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: scope must not be empty", fn));
	if (len > idem::max_scope_bytes)
		ereport(
		    ERROR, errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED), errmsg("%s: scope is too long", fn),
		    errdetail("The scope has %zu bytes; the limit is %zu.", len, idem::max_scope_bytes));
	return scope;
}

// The grantee as stored: "public" for PUBLIC (in any case, as GRANT takes
// it), else the name of an existing role (42704 otherwise).
text *grantee_arg(const char *fn, FunctionCallInfo fcinfo, bool must_exist)
{
	if (PG_ARGISNULL(1))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: role must not be null", fn),
		        errhint("Name a role, or PUBLIC for every role."));
	char *role = text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (pg_strcasecmp(role, "public") == 0)
		return cstring_to_text("public");
	if (must_exist)
		(void)get_role_oid(role, false);
	return cstring_to_text(role);
}

// Only the owner (and superusers) hand out scopes.
void check_may_grant(const char *fn, Oid caller)
{
	if (!idem::may_use_every_scope(caller))
		ereport(ERROR, errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
		        errmsg("%s: only the owner of pg_idem may grant or revoke scopes", fn),
		        errdetail("Role \"%s\" does not have the privileges of role \"%s\".",
		                  GetUserNameFromId(caller, false),
		                  GetUserNameFromId(idem::extension_objects().owner, false)));
}

const idem::ExtensionObjects &objects_with_grants(const char *fn)
{
	const idem::ExtensionObjects &objects = idem::extension_objects();
	if (!OidIsValid(objects.scope_grants))
		ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		        errmsg("%s: this database has the SQL of pg_idem 0.2 or older", fn),
		        errhint("Run ALTER EXTENSION pg_idem UPDATE."));
	return objects;
}

uint64 change_grants(const char *signature, const char *sql, text *scope, text *grantee, Oid caller)
{
	const idem::ExtensionObjects &objects = idem::extension_objects();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	Oid types[] = {TEXTOID, TEXTOID, TEXTOID};
	idem::Statement *st = idem::statement_for(signature, objects.scope_grants,
	                                          objects.scope_grants_name, sql, 3, types);
	Datum values[] = {PointerGetDatum(scope), PointerGetDatum(grantee),
	                  PointerGetDatum(cstring_to_text(GetUserNameFromId(caller, false)))};
	int rc = SPI_execute_plan(st->plan, values, NULL, false, 0);
	if (rc < 0)
		elog(ERROR, "pg_idem: unexpected SPI result %s", SPI_result_code_string(rc));
	uint64 changed = SPI_processed;
	SPI_finish();
	return changed;
}

} // namespace

// idem_grant(scope, role) RETURNS boolean: true when newly granted.
IDEM_SQL_FUNCTION_AS_OWNER(idem_grant)
{
	static const char fn[] = "idem_grant";
	text *scope = scope_arg(fn, fcinfo);
	text *grantee = grantee_arg(fn, fcinfo, true);
	objects_with_grants(fn);
	check_may_grant(fn, caller);
	PreventCommandIfReadOnly(fn);
	uint64 n = change_grants("grants:insert",
	                         "INSERT INTO %s (scope, grantee, granted_by, granted_at) "
	                         "VALUES ($1, $2, $3, pg_catalog.now()) ON CONFLICT DO NOTHING",
	                         scope, grantee, caller);
	PG_RETURN_BOOL(n > 0);
}

// idem_revoke(scope, role) RETURNS boolean: true when a grant was removed.
// A role that no longer exists may still be revoked.
IDEM_SQL_FUNCTION_AS_OWNER(idem_revoke)
{
	static const char fn[] = "idem_revoke";
	text *scope = scope_arg(fn, fcinfo);
	text *grantee = grantee_arg(fn, fcinfo, false);
	objects_with_grants(fn);
	check_may_grant(fn, caller);
	PreventCommandIfReadOnly(fn);
	uint64 n = change_grants("grants:delete",
	                         "DELETE FROM %s WHERE scope OPERATOR(pg_catalog.=) $1 "
	                         "AND grantee OPERATOR(pg_catalog.=) $2 AND $3 IS NOT NULL",
	                         scope, grantee, caller);
	PG_RETURN_BOOL(n > 0);
}

// idem_may_use_scope(scope) RETURNS boolean: whether the current user may
// use the scope (or stream); the filter of pg_idem's views.
IDEM_SQL_FUNCTION_AS_OWNER(idem_may_use_scope)
{
	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	text *scope = PG_GETARG_TEXT_PP(0);
	PG_RETURN_BOOL(idem::may_use_scope(caller, VARDATA_ANY(scope), VARSIZE_ANY_EXHDR(scope)));
}

// The statement trigger of idem_scope_grants and of idem_scopes: any
// change, made by idem_grant, idem_configure or in SQL, makes every backend
// forget its answers and settings at commit (a relcache invalidation of
// both tables: extension_objects_generation(), scopes.cpp's cache). By the
// tables' own OIDs, not the trigger's relation: on a Citus worker the
// trigger fires on the reference table's placement, a table of another
// name (idem_distribute).
IDEM_SQL_FUNCTION(idem_scope_grants_changed)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR, errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
		        errmsg("idem_scope_grants_changed: not called as a trigger"));
	const idem::ExtensionObjects &objects = idem::extension_objects();
	CacheInvalidateRelcacheByRelid(objects.scopes);
	if (OidIsValid(objects.scope_grants))
		CacheInvalidateRelcacheByRelid(objects.scope_grants);
	return PointerGetDatum(NULL);
}

// idem_scope_usable_by(scope, role) RETURNS boolean: may_use_scope, for
// pg_idem's own statements that keep an operator tool to a caller's scopes
// (idem_reconcile, idem_purge). They run as the owner, who alone may
// execute it.
IDEM_SQL_FUNCTION(idem_scope_usable_by)
{
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		PG_RETURN_NULL();
	text *scope = PG_GETARG_TEXT_PP(0);
	PG_RETURN_BOOL(
	    idem::may_use_scope(PG_GETARG_OID(1), VARDATA_ANY(scope), VARSIZE_ANY_EXHDR(scope)));
}
