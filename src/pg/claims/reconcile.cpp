// idem_reconcile(scope, max_rows): settles claims whose lease ran out.
// reconcile_expired_leases (reconcile.hpp) does it for idem_reconcile and
// for the purge worker's round alike, in steps: select the candidates, check
// each scope's function is still usable, ask it, settle, count for
// idem_stats.
//
// For each in-progress record with an expired lease (the scopes in turn,
// each scope's oldest lease first; each locked with FOR UPDATE SKIP LOCKED
// when its turn comes, so that concurrent reconcilers and late completions
// never wait on each other for long), it asks the scope's reconciliation
// function fn(scope, key), within pg_idem.reconcile_timeout, whether the
// effect happened:
// true -> completed, false -> failed (or dead when the attempts are used
// up), NULL -> left as it is and reported 'unknown'. Scopes without a
// function are not looked at, so that their claims (which only a takeover
// ends) never take the places of claims that can be settled; a scope whose
// function was dropped since is reported 'no_reconciler'. A late idem_complete
// of the same attempt queues behind the row lock and is then refused, since
// the record is no longer in progress.
//
// The function runs as the role that configured the scope, in a
// security-restricted context (as VACUUM runs index functions), never as
// the extension owner that this SECURITY DEFINER function runs as, and with
// a search_path of its own (reconciler_search_path), never the caller's:
// otherwise a caller could put a function of its own (a lower(text), say)
// ahead of what the reconciler calls, and have it run as that role. The
// role must still be allowed to execute it.
extern "C" {
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_proc_d.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

#include "core/claim_rules.hpp"
#include "pg/claims/claim_wait.hpp"
#include "pg/claims/reconciler_deadline.hpp"
#include "pg/compat.hpp"
#include "pg/cache/duplicate_cache.hpp"
#include "pg/extension_objects.hpp"
#include "pg/as_owner.hpp"
#include "pg/guard.hpp"
#include "pg/scopes/scope_grants.hpp"
#include "pg/plan_cache.hpp"
#include "pg/records/record_statements.hpp"
#include "pg/records/records.hpp"
#include "pg/records/routes.hpp"
#include "pg/claims/reconcile.hpp"
#include "pg/scopes/scopes.hpp"
#include "pg/settings.hpp"
#include "pg/stats/stats.hpp"

#include <algorithm>
#include <cstring>

namespace idem
{

namespace
{

// Named in the warnings, whoever runs reconciliation (idem_reconcile, or
// the purge worker).
constexpr const char fn[] = "idem_reconcile";

struct Candidate {
	bytea *id;
	text *scope;
	text *key;
	int attempts;
	int attempt_base;
	bool routed; // on distributed records: its route, and its own ttl
	int64 route;
	Interval *ttl; // read under the row lock; NULL: the scope's
	bool settled;  // recorded completed, failed or dead
	bool dead;
};

// pg_catalog first, so that no schema can shadow a built-in; then the
// role's own schema and public, as by default, for the tables a reconciler
// reads; the caller's temporary schema last. A function with its own SET
// search_path keeps it.
constexpr const char reconciler_search_path[] = "pg_catalog, \"$user\", public, pg_temp";

// Asks fn(scope, key) as `role`. *isnull is set when it does not know.
bool ask_reconciler(Oid function, Oid role, text *scope, text *key, bool *isnull)
{
	Oid saved_user;
	int saved_context;
	GetUserIdAndSecContext(&saved_user, &saved_context);
	int guc_level = NewGUCNestLevel();
	(void)set_config_option("search_path", reconciler_search_path, PGC_USERSET, PGC_S_SESSION,
	                        GUC_ACTION_SAVE, true, 0, false);
	SetUserIdAndSecContext(role, saved_context | SECURITY_LOCAL_USERID_CHANGE |
	                                 SECURITY_RESTRICTED_OPERATION);
	FmgrInfo flinfo;
	fmgr_info(function, &flinfo);
	LOCAL_FCINFO(call, 2);
	InitFunctionCallInfoData(*call, &flinfo, 2, InvalidOid, NULL, NULL);
	call->args[0].value = PointerGetDatum(scope);
	call->args[0].isnull = false;
	call->args[1].value = PointerGetDatum(key);
	call->args[1].isnull = false;
	Datum answer = FunctionCallInvoke(call);
	// An error above aborts the transaction, which restores the user and
	// the search_path too. Without one, every setting the function changed
	// is undone as well, even a plain set_config(..., false): kept, it
	// would stay in the session that reconciles (a superuser's, or the
	// purge worker's) and run the next statements there with, say, the
	// function's search_path, as PostgreSQL undoes what an index
	// expression sets.
	SetUserIdAndSecContext(saved_user, saved_context);
	AtEOXact_GUC(false, guc_level);
	*isnull = call->isnull;
	return !call->isnull && DatumGetBool(answer);
}

// ask_reconciler in a subtransaction of its own, within
// pg_idem.reconcile_timeout: an error the function raises, or running out
// of time, is logged as a warning and its claim reported unknown, so that
// one broken or slow reconciler never stops the claims of other scopes
// (the error's claim, first in line, would otherwise fail every later run
// too). Any other cancel, or a shutdown, still ends the whole call.
bool ask_reconciler_in_subtransaction(Oid reconciler, Oid role, const Candidate &c, bool *unknown)
{
	MemoryContext caller_context = CurrentMemoryContext;
	ResourceOwner caller_owner = CurrentResourceOwner;
	volatile bool happened = false;
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(caller_context);
	reconciler_deadline_start();
	PG_TRY();
	{
		happened = ask_reconciler(reconciler, role, c.scope, c.key, unknown);
		// An answer given just as the limit ran out still counts.
		(void)reconciler_deadline_end();
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(caller_context);
		CurrentResourceOwner = caller_owner;
	}
	PG_CATCH();
	{
		bool out_of_time = reconciler_deadline_end();
		MemoryContextSwitchTo(caller_context);
		ErrorData *error = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(caller_context);
		CurrentResourceOwner = caller_owner;
		bool limit_cancel = out_of_time && error->sqlerrcode == ERRCODE_QUERY_CANCELED;
		if (!limit_cancel && (error->sqlerrcode == ERRCODE_QUERY_CANCELED ||
		                      error->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN))
			ReThrowError(error);
		if (limit_cancel)
			ereport(WARNING,
			        errmsg("%s: the reconciliation function of scope \"%s\" took longer than "
			               "pg_idem.reconcile_timeout (%d ms) for key \"%s\"",
			               fn, text_to_cstring(c.scope), reconcile_timeout_ms,
			               text_to_cstring(c.key)),
			        errhint("Its claim is reported unknown and left as it is."));
		else
			ereport(WARNING,
			        errmsg("%s: the reconciliation function of scope \"%s\" failed for key "
			               "\"%s\": %s",
			               fn, text_to_cstring(c.scope), text_to_cstring(c.key), error->message),
			        errhint("Its claim is reported unknown and left as it is."));
		FreeErrorData(error);
		*unknown = true;
		happened = false;
	}
	PG_END_TRY();
	return happened;
}

// The scopes whose claims reconciliation may look at: `scope` (or every
// one) among those `caller` may use, and only those with a reconciliation
// function: claims nothing can settle must not take the places of those
// that can. Copied out of SPI.
text **reconcilable_scopes(const ExtensionObjects &objects, const text *scope, Oid caller, int *n)
{
	// Two statements: one for every scope (also on 0.2's SQL, which has no
	// grants), one that keeps to the caller's ($2).
	bool every_scope = may_use_every_scope(caller);
	const char *signature = every_scope ? "reconcile:scopes" : "reconcile:scopes:granted";
	Statement *scopes = statement_lookup(signature, strlen(signature), objects.scopes);
	if (!statement_ready(scopes)) {
		Oid types[] = {TEXTOID, OIDOID};
		statement_prepare(
		    scopes,
		    psprintf("SELECT s.scope FROM %s s WHERE s.reconcile_function IS NOT NULL "
		             "AND ($1 IS NULL OR s.scope OPERATOR(pg_catalog.=) $1)%s ORDER BY s.scope",
		             objects.scopes_name,
		             every_scope ? ""
		                         : psprintf(" AND %s.idem_scope_usable_by(s.scope, $2)",
		                                    objects.schema_name)),
		    every_scope ? 1 : 2, types);
	}
	Datum values[] = {PointerGetDatum(scope), ObjectIdGetDatum(caller)};
	char nulls[] = {scope == NULL ? 'n' : ' ', ' '};
	if (SPI_execute_plan(scopes->plan, values, nulls, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "pg_idem: reconciliation query failed");
	*n = int(SPI_processed);
	text **names = static_cast<text **>(palloc(sizeof(text *) * (*n + 1)));
	for (int i = 0; i < *n; i++) {
		bool isnull;
		names[i] = DatumGetTextPCopy(
		    SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
	}
	return names;
}

// Up to max_rows claims of `scope` in progress with an expired lease,
// oldest lease first. Nothing is locked yet (lock_candidate). Copied out of
// SPI before any reconciliation function runs SPI.
Candidate *expired_claims(const ExtensionObjects &objects, text *scope, int max_rows, int *n)
{
	const char *signature = records_distributed() ? "reconcile:claims:routed" : "reconcile:claims";
	Statement *claims = statement_lookup(signature, strlen(signature), objects.records);
	if (!statement_ready(claims)) {
		Oid types[] = {TEXTOID, INT4OID};
		statement_prepare(claims,
		                  psprintf("SELECT r.key_id, r.scope, r.key, r.attempts, r.attempt_base, "
		                           "r.route FROM %s r "
		                           "WHERE r.status OPERATOR(pg_catalog.=) 'in_progress' "
		                           "AND r.lease_expires_at OPERATOR(pg_catalog.<=) "
		                           "pg_catalog.clock_timestamp() "
		                           "AND r.scope COLLATE pg_catalog.\"C\" OPERATOR(pg_catalog.=) $1 "
		                           "ORDER BY r.lease_expires_at LIMIT $2",
		                           objects.records_name),
		                  2, types);
	}
	Datum values[] = {PointerGetDatum(scope), Int32GetDatum(max_rows)};
	if (SPI_execute_plan(claims->plan, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "pg_idem: reconciliation query failed");
	*n = int(SPI_processed);
	Candidate *found = static_cast<Candidate *>(palloc0(sizeof(Candidate) * (*n + 1)));
	for (int i = 0; i < *n; i++) {
		HeapTuple row = SPI_tuptable->vals[i];
		TupleDesc desc = SPI_tuptable->tupdesc;
		Candidate &c = found[i];
		bool isnull;
		c.id = DatumGetByteaPCopy(SPI_getbinval(row, desc, 1, &isnull));
		c.scope = DatumGetTextPCopy(SPI_getbinval(row, desc, 2, &isnull));
		c.key = DatumGetTextPCopy(SPI_getbinval(row, desc, 3, &isnull));
		c.attempts = DatumGetInt32(SPI_getbinval(row, desc, 4, &isnull));
		c.attempt_base = DatumGetInt32(SPI_getbinval(row, desc, 5, &isnull));
		Datum route = SPI_getbinval(row, desc, 6, &isnull);
		c.routed = records_distributed();
		c.route = isnull ? 0 : DatumGetInt64(route);
	}
	return found;
}

// The claims to look at: the expired claims of the reconcilable scopes, up
// to max_rows, taken from the scopes in turn (every scope's oldest claim,
// then every scope's second oldest...), so that one scope's many stuck
// claims, which its function may never settle, cannot keep other scopes'
// claims from their turn.
Candidate *select_candidates(const ExtensionObjects &objects, const text *scope, int max_rows,
                             Oid caller, int *n)
{
	int nscopes;
	text **scopes = reconcilable_scopes(objects, scope, caller, &nscopes);
	Candidate **per_scope = static_cast<Candidate **>(palloc0(sizeof(Candidate *) * (nscopes + 1)));
	int *counts = static_cast<int *>(palloc0(sizeof(int) * (nscopes + 1)));
	int64 total = 0;
	for (int s = 0; s < nscopes; s++) {
		per_scope[s] = expired_claims(objects, scopes[s], max_rows, &counts[s]);
		total += counts[s];
	}
	int taken = int(std::min<int64>(total, max_rows));
	Candidate *candidates = static_cast<Candidate *>(palloc0(sizeof(Candidate) * (taken + 1)));
	*n = 0;
	for (int turn = 0; *n < taken; turn++)
		for (int s = 0; s < nscopes && *n < taken; s++)
			if (turn < counts[s])
				candidates[(*n)++] = per_scope[s][turn];
	return candidates;
}

// Whether the scope's reconciliation function may still be asked; warns
// why not. Dropped, replaced, revoked or no longer vouched for since
// idem_configure: that scope's claims are skipped rather than the whole
// run failed.
bool reconciler_still_usable(const Candidate &c, const ScopeSettings &settings)
{
	if (!settings.has_reconciler)
		return false;
	if (!reconcile_function_fits(settings.reconcile_function)) {
		ereport(WARNING,
		        errmsg("%s: the reconciliation function of scope \"%s\" no longer "
		               "exists or no longer fits",
		               fn, text_to_cstring(c.scope)),
		        errhint("Configure the scope again with idem_configure."));
		return false;
	}
	if (object_aclcheck(ProcedureRelationId, settings.reconcile_function, settings.configured_by,
	                    ACL_EXECUTE) != ACLCHECK_OK) {
		// idem_configure checked it; a REVOKE since must hold too.
		ereport(WARNING,
		        errmsg("%s: the role that configured scope \"%s\" may no longer "
		               "execute its reconciliation function",
		               fn, text_to_cstring(c.scope)),
		        errhint("Grant it EXECUTE again, or configure the scope again."));
		return false;
	}
	if (!reconciler_runs_safely_as(settings.reconcile_function, settings.configured_by)) {
		// Its owner changed, or lost privileges, or the role that
		// configured the scope was dropped: the body is no longer
		// vouched for by that role.
		ereport(WARNING,
		        errmsg("%s: the reconciliation function of scope \"%s\" no longer "
		               "runs as the role that configured it",
		               fn, text_to_cstring(c.scope)),
		        errdetail("That role was dropped, or the function's owner does not "
		                  "have its privileges."),
		        errhint("Configure the scope again with idem_configure."));
		return false;
	}
	return true;
}

// The candidate as a record reference, for statements routed to its shard.
RecordRef record_of(const Candidate &c)
{
	return RecordRef{c.scope, c.key, c.id, c.routed, c.route};
}

// Locks the candidate (in its shard, on distributed records) if it is still
// the claim the search saw and no one holds it: SKIP LOCKED, so that
// concurrent reconcilers and late completions never wait on each other for
// long. Reads its own ttl. False: leave it. Each claim is locked only when
// its turn comes, so that a slow function does not hold the locks of claims
// whose turn has not come (those already settled stay locked until the
// transaction ends).
bool lock_candidate(Candidate &c)
{
	Oid types[] = {BYTEAOID, INT4OID};
	RecordStatement lock = record_statement(
	    "reconcile:lock",
	    "SELECT ttl FROM %s WHERE %s AND status::pg_catalog.text OPERATOR(pg_catalog.=) "
	    "'in_progress' AND attempts OPERATOR(pg_catalog.=) $2 "
	    "AND lease_expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() "
	    "FOR UPDATE SKIP LOCKED",
	    2, types);
	Datum values[] = {PointerGetDatum(c.id), Int32GetDatum(c.attempts)};
	if (run_record_statement(lock, record_of(c), values, NULL, false, 1, SPI_OK_SELECT) == 0)
		return false;
	bool isnull;
	Datum ttl = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	c.ttl = isnull ? NULL
	               : reinterpret_cast<Interval *>(
	                     DatumGetPointer(datumCopy(ttl, false, sizeof(Interval))));
	return true;
}

// settle's update on distributed records: routed to the claim's shard, the
// expiry computed here (Citus runs no STABLE function of a column in an
// UPDATE), under the row lock of lock_candidate.
uint64 settle_routed(const ExtensionObjects &objects, const Candidate &c, Oid status,
                     TimestampTz now, const Interval *scope_ttl)
{
	Datum expires_at = DirectFunctionCall2(
	    timestamptz_pl_interval, TimestampTzGetDatum(now),
	    IntervalPGetDatum(const_cast<Interval *>(c.ttl != NULL ? c.ttl : scope_ttl)));
	Oid types[] = {BYTEAOID, INT4OID, objects.status_type, TIMESTAMPTZOID, TIMESTAMPTZOID};
	RecordStatement update =
	    record_statement("reconcile:update:routed",
	                     "UPDATE %s SET status = $3, recorded_at = $4, expires_at = $5, "
	                     "lease_expires_at = NULL, holder_pid = NULL, holder_started_at = NULL, "
	                     "claim_token = NULL, "
	                     "last_error = CASE WHEN $3 OPERATOR(pg_catalog.=) 'completed' "
	                     "THEN last_error ELSE 'reconciled: the effect did not happen' END "
	                     "WHERE %s AND status OPERATOR(pg_catalog.=) 'in_progress' "
	                     "AND attempts OPERATOR(pg_catalog.=) $2",
	                     5, types);
	Datum values[] = {PointerGetDatum(c.id), Int32GetDatum(c.attempts), ObjectIdGetDatum(status),
	                  TimestampTzGetDatum(now), expires_at};
	return run_record_statement(update, record_of(c), values, NULL, false, 0, SPI_OK_UPDATE);
}

// Records the function's answer: completed, or failed (dead when the
// attempts are used up), fenced on the attempt the select saw.
ReconcileOutcome settle(const ExtensionObjects &objects, Statement *update, Candidate &c,
                        const ScopeSettings &settings, bool happened)
{
	Oid status = objects.status_completed;
	ReconcileOutcome outcome = ReconcileOutcome::completed;
	if (!happened) {
		bool dead = decide_failure(c.attempts, c.attempt_base, settings.max_attempts, true) ==
		            RecordState::dead;
		status = dead ? objects.status_dead : objects.status_failed;
		outcome = dead ? ReconcileOutcome::dead : ReconcileOutcome::failed;
	}
	TimestampTz now = GetCurrentTimestamp();
	// The claim's own ttl, else the scope's.
	Interval ttl = scope_ttl(settings);
	uint64 updated;
	if (c.routed) {
		updated = settle_routed(objects, c, status, now, &ttl);
	} else {
		Datum values[] = {PointerGetDatum(c.id), Int32GetDatum(c.attempts),
		                  ObjectIdGetDatum(status), TimestampTzGetDatum(now),
		                  IntervalPGetDatum(&ttl)};
		OwnChange own = cache_own_change_begin(c.id);
		if (SPI_execute_plan(update->plan, values, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "pg_idem: reconciliation update failed");
		cache_own_change_end(own);
		updated = SPI_processed;
	}
	// Under the row lock of lock_candidate, the fenced update always matches;
	// should it not, nothing was settled.
	c.settled = updated == 1;
	if (!c.settled)
		return ReconcileOutcome::unknown;
	cache_invalidate(c.id);
	claim_wake_at_commit(c.id);
	c.dead = status == objects.status_dead;
	return outcome;
}

// Counted for idem_stats once nothing can fail any more.
void count_settled(const Candidate *candidates, int n)
{
	StatsTally tally;
	stats_tally_init(&tally);
	for (int i = 0; i < n; i++) {
		if (candidates[i].settled)
			stats_tally_add(&tally, candidates[i].scope, stat_reconciled);
		if (candidates[i].dead)
			stats_tally_add(&tally, candidates[i].scope, stat_dead_letters);
	}
	stats_tally_flush(&tally);
}

} // namespace

const char *reconcile_outcome_name(ReconcileOutcome outcome)
{
	switch (outcome) {
	case ReconcileOutcome::completed:
		return "completed";
	case ReconcileOutcome::failed:
		return "failed";
	case ReconcileOutcome::dead:
		return "dead";
	case ReconcileOutcome::unknown:
		return "unknown";
	case ReconcileOutcome::no_reconciler:
		return "no_reconciler";
	}
	pg_unreachable();
}

int reconcile_expired_leases(const text *scope, int max_rows, Oid caller, Reconciled **rows)
{
	const ExtensionObjects &objects = extension_objects();
	bind_reconcile_functions_here(objects);
	int n;
	Candidate *candidates = select_candidates(objects, scope, max_rows, caller, &n);

	// The status is compared as text: a condition the planner cannot match
	// to the partial index idem_records_in_flight, which it would scan
	// whole, every claim in flight for each one settled, instead of
	// probing the primary key.
	Oid update_types[] = {BYTEAOID, INT4OID, objects.status_type, TIMESTAMPTZOID, INTERVALOID};
	Statement *update =
	    statement_for("reconcile:update", objects.records, objects.records_name,
	                  "UPDATE %s SET status = $3, recorded_at = $4, "
	                  "expires_at = $4 OPERATOR(pg_catalog.+) COALESCE(ttl, $5), "
	                  "lease_expires_at = NULL, holder_pid = NULL, holder_started_at = NULL, "
	                  "claim_token = NULL, "
	                  "last_error = CASE WHEN $3 OPERATOR(pg_catalog.=) 'completed' "
	                  "THEN last_error ELSE 'reconciled: the effect did not happen' END "
	                  "WHERE key_id OPERATOR(pg_catalog.=) $1 "
	                  "AND status::pg_catalog.text OPERATOR(pg_catalog.=) 'in_progress' "
	                  "AND attempts OPERATOR(pg_catalog.=) $2",
	                  5, update_types);

	Reconciled *out = static_cast<Reconciled *>(palloc0(sizeof(Reconciled) * (n + 1)));
	int reported = 0;
	for (int i = 0; i < n; i++) {
		Candidate &c = candidates[i];
		if (!lock_candidate(c))
			continue; // settled, renewed or held since the search
		ScopeSettings settings = scope_settings(c.scope);
		ReconcileOutcome outcome = ReconcileOutcome::no_reconciler;
		if (reconciler_still_usable(c, settings)) {
			bool unknown;
			bool happened = ask_reconciler_in_subtransaction(settings.reconcile_function,
			                                                 settings.configured_by, c, &unknown);
			outcome = unknown ? ReconcileOutcome::unknown
			                  : settle(objects, update, c, settings, happened);
		}
		out[reported++] = Reconciled{c.scope, c.key, c.attempts, outcome};
	}
	count_settled(candidates, n);
	*rows = out;
	return reported;
}

} // namespace idem

// idem_reconcile(scope, max_rows): a caller that may not use every scope
// reconciles only the scopes it may use: the one it names (42501 if not
// granted), or, without one, those it was granted (the others' claims are
// neither locked nor reported).
IDEM_SQL_FUNCTION_AS_OWNER(idem_reconcile)
{
	static const char fn[] = "idem_reconcile";
	if (PG_ARGISNULL(1) || PG_GETARG_INT32(1) < 1)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: max_rows must be at least 1", fn));
	const text *scope = PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0);
	if (scope != NULL)
		idem::check_scope(fn, caller, scope);
	PreventCommandIfReadOnly(fn);
	int max_rows = PG_GETARG_INT32(1);
	InitMaterializedSRF(fcinfo, 0);
	ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	idem::Reconciled *rows;
	int n = idem::reconcile_expired_leases(scope, max_rows, caller, &rows);
	for (int i = 0; i < n; i++) {
		Datum out[] = {PointerGetDatum(rows[i].scope), PointerGetDatum(rows[i].key),
		               Int32GetDatum(rows[i].attempts),
		               CStringGetTextDatum(idem::reconcile_outcome_name(rows[i].outcome))};
		bool nulls[] = {false, false, false, false};
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
	}
	SPI_finish();
	return (Datum)0;
}
