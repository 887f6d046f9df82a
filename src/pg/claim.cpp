// idem_begin, idem_complete, idem_fail: the claim protocol for effects that
// cannot share the consumer's transaction (see the state diagram in
// src/core/claim_rules.hpp, which also makes every decision taken here).
//
// Each function is one short transaction of the caller's (call them in
// autocommit, and do the external work between idem_begin and
// idem_complete, outside any transaction).
//
// Locking: idem_begin reads the record with SELECT ... FOR UPDATE, so two
// claims of one key queue on its row lock and the second decides on what the
// first committed; a brand-new key is inserted with ON CONFLICT DO NOTHING and
// re-read if a concurrent claim got there first. idem_complete and idem_fail
// update only WHERE status = 'in_progress' AND attempts = <the caller's
// attempt>: the attempt number is a fencing token, so a holder whose lease
// was taken over (or reconciled) matches nothing and is refused with an
// error, changing nothing.
//
// Liveness: a record remembers its holder's backend pid and start time.
// Where the scope or the call opts in (takeover_on_disconnect), a claim whose
// holder session is gone is taken over at once. It is opt-in because behind a
// transaction-pooling pooler the server session is not the client.
//
// Leases and waits use the wall clock (clock_timestamp), not the transaction
// start: a lease is about real time passing.
//
// Duplicate cache (duplicate_cache.cpp, when on and in READ COMMITTED):
// idem_begin first asks it for a completed record, live at its `now`, whose
// result was kept and whose fingerprint does not differ from the call's,
// and answers 'completed' from it as decide_and_write would. When
// decide_and_write reports a completed record, it offers the record to the
// cache while it still holds the row lock (records_offer_to_cache), having
// read the cache's invalidation counter before its read.
extern "C" {
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
}

#include "core/claim_rules.hpp"
#include "pg/claim_wait.hpp"
#include "pg/duplicate_cache.hpp"
#include "pg/extension_objects.hpp"
#include "pg/guard.hpp"
#include "pg/plan_cache.hpp"
#include "pg/records.hpp"
#include "pg/scopes.hpp"
#include "pg/settings.hpp"
#include "pg/stats.hpp"

#include <algorithm>
#include <cstring>

namespace {

// A record as the protocol reads it (columns of the lock statement).
struct Record {
	bool exists;
	idem::RecordState state;
	int attempts;
	int attempt_base;
	TimestampTz expires_at;
	TimestampTz lease_expires_at; // 0 when none
	int holder_pid;
	TimestampTz holder_started_at;
	text *fingerprint; // NULL when none
	Datum result;	   // jsonb, or 0 when NULL
	text *last_error;
};

// A statement on idem_records, prepared once per backend.
idem::Statement *prepare(const char *signature, const char *sql_format, int nargs,
			 Oid *types)
{
	const idem::ExtensionObjects &objects = idem::extension_objects();
	return idem::statement_for(signature, objects.records, objects.records_name, sql_format,
				   nargs, types);
}

uint64 run(idem::Statement *st, Datum *values, const char *nulls, int expected)
{
	int rc = SPI_execute_plan(st->plan, values, nulls, false, 0);
	if (rc != expected)
		elog(ERROR, "pg_idem: unexpected SPI result %s", SPI_result_code_string(rc));
	return SPI_processed;
}

idem::RecordState state_of(Oid status)
{
	const idem::ExtensionObjects &o = idem::extension_objects();
	if (status == o.status_in_progress)
		return idem::RecordState::in_progress;
	if (status == o.status_completed)
		return idem::RecordState::completed;
	if (status == o.status_failed)
		return idem::RecordState::failed;
	return idem::RecordState::dead;
}

const char *state_name(idem::RecordState state)
{
	switch (state) {
	case idem::RecordState::in_progress:
		return "in_progress";
	case idem::RecordState::completed:
		return "completed";
	case idem::RecordState::failed:
		return "failed";
	case idem::RecordState::dead:
		return "dead";
	case idem::RecordState::absent:
		break;
	}
	return "absent";
}

Oid status_oid(idem::RecordState state)
{
	const idem::ExtensionObjects &o = idem::extension_objects();
	switch (state) {
	case idem::RecordState::in_progress:
		return o.status_in_progress;
	case idem::RecordState::completed:
		return o.status_completed;
	case idem::RecordState::failed:
		return o.status_failed;
	default:
		return o.status_dead;
	}
}

bool same_text(text *a, text *b)
{
	size_t len = VARSIZE_ANY_EXHDR(a);
	return len == VARSIZE_ANY_EXHDR(b) && memcmp(VARDATA_ANY(a), VARDATA_ANY(b), len) == 0;
}

// Reads the record, locking its row when `lock` (inside SPI).
Record read_record(const idem::RecordRef &ref, bool lock)
{
	static const char columns[] =
	    "SELECT scope, key, status, attempts, attempt_base, expires_at, lease_expires_at, "
	    "holder_pid, holder_started_at, fingerprint, result, last_error FROM %s "
	    "WHERE key_id OPERATOR(pg_catalog.=) $1";
	Oid types[] = {BYTEAOID};
	idem::Statement *st =
	    lock ? prepare("claim:lock", psprintf("%s FOR UPDATE", columns), 1, types)
		 : prepare("claim:read", columns, 1, types);
	Datum values[] = {PointerGetDatum(ref.id)};
	int rc = SPI_execute_plan(st->plan, values, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "pg_idem: unexpected SPI result %s", SPI_result_code_string(rc));

	Record r;
	memset(&r, 0, sizeof r);
	r.state = idem::RecordState::absent;
	if (SPI_processed == 0)
		return r;

	HeapTuple row = SPI_tuptable->vals[0];
	TupleDesc desc = SPI_tuptable->tupdesc;
	bool isnull;
	text *scope = DatumGetTextPP(SPI_getbinval(row, desc, 1, &isnull));
	text *key = DatumGetTextPP(SPI_getbinval(row, desc, 2, &isnull));
	if (!same_text(scope, ref.scope) || !same_text(key, ref.key))
		ereport(ERROR, errcode(ERRCODE_INTERNAL_ERROR),
			errmsg("pg_idem key id collision"),
			errhint("Report this: it is a SHA-256 prefix collision."));
	r.exists = true;
	r.state = state_of(DatumGetObjectId(SPI_getbinval(row, desc, 3, &isnull)));
	r.attempts = DatumGetInt32(SPI_getbinval(row, desc, 4, &isnull));
	r.attempt_base = DatumGetInt32(SPI_getbinval(row, desc, 5, &isnull));
	r.expires_at = DatumGetTimestampTz(SPI_getbinval(row, desc, 6, &isnull));
	Datum d = SPI_getbinval(row, desc, 7, &isnull);
	r.lease_expires_at = isnull ? 0 : DatumGetTimestampTz(d);
	d = SPI_getbinval(row, desc, 8, &isnull);
	r.holder_pid = isnull ? 0 : DatumGetInt32(d);
	d = SPI_getbinval(row, desc, 9, &isnull);
	r.holder_started_at = isnull ? 0 : DatumGetTimestampTz(d);
	d = SPI_getbinval(row, desc, 10, &isnull);
	r.fingerprint = isnull ? NULL : DatumGetTextPCopy(d);
	d = SPI_getbinval(row, desc, 11, &isnull);
	r.result = isnull ? 0 : PointerGetDatum(DatumGetJsonbPCopy(d));
	d = SPI_getbinval(row, desc, 12, &isnull);
	r.last_error = isnull ? NULL : DatumGetTextPCopy(d);
	return r;
}

// Is the backend that claimed the record still running? The pid alone is
// not enough (pids are reused), so its start time must match too.
bool holder_alive(int pid, TimestampTz started_at)
{
	pgstat_clear_backend_activity_snapshot();
	int n = pgstat_fetch_stat_numbackends();
	for (int i = 1; i <= n; i++) {
		LocalPgBackendStatus *entry = pgstat_fetch_stat_local_beentry(i);
		if (entry != NULL && entry->backendStatus.st_procpid == pid)
			return entry->backendStatus.st_proc_start_timestamp == started_at;
	}
	return false;
}

struct BeginArgs {
	const char *fn;
	idem::RecordRef ref;
	text *fingerprint;
	Interval *lease;
	long wait_ms;
	idem::ClaimPolicy policy;
	bool mismatch_is_error;
	idem::ScopeSettings settings;
};

idem::ClaimView view_of(const Record &r, const BeginArgs &args, TimestampTz now)
{
	idem::ClaimView v;
	v.state = r.state;
	v.attempts = r.attempts;
	v.attempt_base = r.attempt_base;
	bool in_progress = r.state == idem::RecordState::in_progress;
	v.expired = r.exists && !in_progress && r.expires_at <= now;
	v.lease_expired = in_progress && r.lease_expires_at <= now;
	v.holder_gone = in_progress && args.policy.takeover_on_disconnect &&
			!holder_alive(r.holder_pid, r.holder_started_at);
	v.fingerprint_differs = r.fingerprint != NULL && args.fingerprint != NULL &&
				!same_text(r.fingerprint, args.fingerprint);
	return v;
}

TimestampTz lease_end(const BeginArgs &args, TimestampTz now)
{
	Interval *lease = args.lease;
	if (lease == NULL && args.settings.has_lease)
		lease = const_cast<Interval *>(&args.settings.lease);
	if (lease == NULL)
		return now + int64(idem::default_lease_seconds) * USECS_PER_SEC;
	return DatumGetTimestampTz(DirectFunctionCall2(
	    timestamptz_pl_interval, TimestampTzGetDatum(now), IntervalPGetDatum(lease)));
}

// Writes the claim: a new record (attempt 1), or the existing one taken over
// with `attempt`; `fresh` when that record had expired and starts a new life
// (its fingerprint, result and last error are dropped, but never its attempt
// count: attempt numbers are fencing tokens and must never be handed out
// twice). Returns false if a concurrent claim inserted the key first.
bool write_claim(const BeginArgs &args, bool exists, int attempt, int attempt_base, bool fresh,
		 TimestampTz now)
{
	Datum values[] = {PointerGetDatum(args.ref.id),
			  PointerGetDatum(args.ref.scope),
			  PointerGetDatum(args.ref.key),
			  Int32GetDatum(attempt),
			  Int32GetDatum(attempt_base),
			  TimestampTzGetDatum(now),
			  TimestampTzGetDatum(idem::record_expiry(args.fn, now, NULL, args.settings)),
			  TimestampTzGetDatum(lease_end(args, now)),
			  Int32GetDatum(MyProcPid),
			  TimestampTzGetDatum(MyStartTimestamp),
			  PointerGetDatum(args.fingerprint),
			  BoolGetDatum(fresh)};
	char nulls[] = "            ";
	if (args.fingerprint == NULL)
		nulls[10] = 'n';
	Oid types[] = {BYTEAOID,       TEXTOID,	       TEXTOID, INT4OID,	INT4OID, TIMESTAMPTZOID,
		       TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TEXTOID, BOOLOID};
	if (!exists) {
		idem::Statement *st = prepare(
		    "claim:insert",
		    "INSERT INTO %s (key_id, scope, key, status, attempts, attempt_base, "
		    "recorded_at, expires_at, lease_expires_at, holder_pid, holder_started_at, "
		    "fingerprint) VALUES ($1, $2, $3, 'in_progress', $4, $5, $6, $7, $8, $9, $10, "
		    "$11) ON CONFLICT (key_id) DO NOTHING",
		    11, types);
		return run(st, values, nulls, SPI_OK_INSERT) == 1;
	}
	// A takeover keeps the stored fingerprint unless the call brings one.
	idem::Statement *st = prepare(
	    "claim:takeover",
	    "UPDATE %s SET status = 'in_progress', attempts = $4, attempt_base = $5, "
	    "recorded_at = $6, expires_at = $7, lease_expires_at = $8, holder_pid = $9, "
	    "holder_started_at = $10, "
	    "fingerprint = CASE WHEN $12 THEN $11 ELSE COALESCE($11, fingerprint) END, "
	    "last_error = CASE WHEN $12 THEN NULL ELSE last_error END, result = NULL "
	    "WHERE key_id OPERATOR(pg_catalog.=) $1",
	    12, types);
	idem::OwnChange own = idem::cache_own_change_begin(args.ref.id);
	run(st, values, nulls, SPI_OK_UPDATE);
	idem::cache_own_change_end(own);
	idem::cache_invalidate(args.ref.id);
	return true;
}

// The attempts ran out without a failure being reported (leases expired, or
// holders vanished): say so, since operators read last_error. The dead
// letter lives a full TTL from now, as idem_fail's does: its old expiry,
// set at the claim, may already have passed (a lease as long as the TTL),
// and an expired dead record would be claimed again at once.
void mark_dead(const BeginArgs &args, int attempts, TimestampTz now)
{
	Oid types[] = {BYTEAOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	idem::Statement *st =
	    prepare("claim:dead",
		    "UPDATE %s SET status = 'dead', last_error = $2, lease_expires_at = NULL, "
		    "holder_pid = NULL, holder_started_at = NULL, recorded_at = $3, "
		    "expires_at = $4 "
		    "WHERE key_id OPERATOR(pg_catalog.=) $1",
		    4, types);
	const idem::RecordRef &ref = args.ref;
	Datum values[] = {
	    PointerGetDatum(ref.id),
	    CStringGetTextDatum(psprintf("attempts used up: attempt %d did not finish "
					 "before its lease expired",
					 attempts)),
	    TimestampTzGetDatum(now),
	    TimestampTzGetDatum(idem::record_expiry(args.fn, now, NULL, args.settings))};
	idem::OwnChange own = idem::cache_own_change_begin(ref.id);
	run(st, values, NULL, SPI_OK_UPDATE);
	idem::cache_own_change_end(own);
	idem::cache_invalidate(ref.id);
}

// The answer of idem_begin, as an idem_claim row.
struct Claim {
	const char *status;
	int attempt;
	Datum result;
	TimestampTz lease_expires_at;
	text *last_error;
	bool took_over;	  // acquired from a holder whose lease ran out (or who is gone)
	bool became_dead; // this call marked the record dead
};

Claim decide_and_write(const BeginArgs &args)
{
	for (int round = 0; round < 100; round++) {
		// Read before the record, so that a change between that read and
		// the cache's insertion of what it found is seen (duplicate_cache.cpp).
		uint64 generation = idem::cache_generation(args.ref.id);
		TimestampTz now = GetCurrentTimestamp();
		Record r = read_record(args.ref, true);
		idem::ClaimView view = view_of(r, args, now);
		Claim c = {NULL, r.attempts, r.result, r.lease_expires_at, r.last_error};
		switch (idem::decide_claim(view, args.policy)) {
		case idem::ClaimAction::claim_new: {
			// An expired record starts a new life with a full set of
			// attempts, numbered on from the old ones.
			int attempt = r.exists ? r.attempts + 1 : 1;
			if (!write_claim(args, r.exists, attempt, r.attempts, true, now))
				continue; // a concurrent claim inserted it: read it again
			return Claim{"acquired", attempt, 0, lease_end(args, now), NULL};
		}
		case idem::ClaimAction::claim_next:
			write_claim(args, true, r.attempts + 1, r.attempt_base, false, now);
			return Claim{"acquired", r.attempts + 1, 0, lease_end(args, now),
				     r.last_error, r.state == idem::RecordState::in_progress};
		case idem::ClaimAction::report_in_progress:
			c.status = "in_progress";
			return c;
		case idem::ClaimAction::report_completed:
			// Still holding the row lock: the next call can be answered
			// from the cache.
			idem::records_offer_to_cache(args.ref, now, generation);
			c.status = "completed";
			return c;
		case idem::ClaimAction::mark_dead:
			mark_dead(args, r.attempts, now);
			c.status = "dead";
			c.became_dead = true;
			c.lease_expires_at = 0;
			c.last_error = cstring_to_text(psprintf(
			    "attempts used up: attempt %d did not finish before its lease expired",
			    r.attempts));
			return c;
		case idem::ClaimAction::report_dead:
			c.status = "dead";
			return c;
		case idem::ClaimAction::report_mismatch:
			if (args.mismatch_is_error)
				ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					errmsg("%s: key was used before with a different payload",
					       args.fn),
					// Not the stored fingerprint: a caller who may
					// claim keys need not read idem_records, and a
					// digest lets a guess of a payload be confirmed.
					errdetail("The record of key \"%s\" in scope \"%s\" was made "
						  "from a payload with another fingerprint.",
						  text_to_cstring(args.ref.key),
						  text_to_cstring(args.ref.scope)),
					errhint("Use a new key for a different message, or configure "
						"the scope with on_fingerprint_mismatch => 'status'."));
			// Nothing of the other payload's outcome is shown to this one.
			return Claim{"fingerprint_mismatch", r.attempts, 0, 0, NULL};
		}
	}
	elog(ERROR, "pg_idem: could not settle the state of a key");
}

// Waits, without holding any lock, until the record is no longer held by a
// live lease of someone else, or the wait is over.
void wait_for_holder(const BeginArgs &args)
{
	TimestampTz deadline = GetCurrentTimestamp() + args.wait_ms * 1000;
	// Each look's copies and SPI result are freed before the next, so that
	// a long wait does not grow the backend.
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext look = AllocSetContextCreate(caller, "pg_idem wait", ALLOCSET_SMALL_SIZES);
	for (;;) {
		TimestampTz now = GetCurrentTimestamp();
		MemoryContextReset(look);
		MemoryContextSwitchTo(look);
		Record r = read_record(args.ref, false);
		SPI_freetuptable(SPI_tuptable);
		MemoryContextSwitchTo(caller);
		idem::ClaimView view = view_of(r, args, now);
		if (idem::decide_claim(view, args.policy) != idem::ClaimAction::report_in_progress ||
		    now >= deadline)
			break;
		long remaining = long((deadline - now) / 1000) + 1;
		long until_lease = long((r.lease_expires_at - now) / 1000) + 1;
		idem::claim_sleep(args.ref.id, remaining < until_lease ? remaining : until_lease);
		// A new snapshot for the next look (READ COMMITTED only).
		CommandCounterIncrement();
	}
	MemoryContextDelete(look);
	idem::claim_sleep_done();
}

// What an answer of idem_begin adds to idem_stats.
void count_claim(const text *scope, const Claim &c, idem::CacheAnswer cache)
{
	idem::StatsDelta delta;
	memset(&delta, 0, sizeof delta);
	delta.n[idem::stat_cache_hits] = cache == idem::CacheAnswer::hit ? 1 : 0;
	delta.n[idem::stat_cache_misses] = cache == idem::CacheAnswer::miss ? 1 : 0;
	if (strcmp(c.status, "acquired") == 0) {
		delta.n[idem::stat_claims] = 1;
		delta.n[idem::stat_takeovers] = c.took_over ? 1 : 0;
	} else if (strcmp(c.status, "completed") == 0) {
		delta.n[idem::stat_duplicates] = 1;
	} else if (strcmp(c.status, "in_progress") == 0) {
		delta.n[idem::stat_in_progress] = 1;
	}
	delta.n[idem::stat_dead_letters] = c.became_dead ? 1 : 0;
	idem::stats_add(scope, delta);
}

// idem_begin's row type, built from its OUT parameters and blessed once per
// backend instead of on every call, and again for another function (DROP
// and CREATE EXTENSION give idem_begin a new OID; its OUT parameters cannot
// change otherwise).
TupleDesc claim_desc(FunctionCallInfo fcinfo)
{
	static Oid desc_fn = InvalidOid;
	static TupleDesc desc = NULL;
	if (desc != NULL && desc_fn == fcinfo->flinfo->fn_oid)
		return desc;
	TupleDesc built;
	if (get_call_result_type(fcinfo, NULL, &built) != TYPEFUNC_COMPOSITE || built->natts != 5)
		elog(ERROR, "pg_idem: idem_begin must return a row of 5 columns");
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	built = BlessTupleDesc(CreateTupleDescCopy(built));
	MemoryContextSwitchTo(old);
	if (desc != NULL)
		FreeTupleDesc(desc);
	desc = built;
	desc_fn = fcinfo->flinfo->fn_oid;
	return desc;
}

Datum claim_datum(FunctionCallInfo fcinfo, const Claim &c)
{
	TupleDesc desc = claim_desc(fcinfo);
	Datum values[5] = {CStringGetTextDatum(c.status), Int32GetDatum(c.attempt), c.result,
			   TimestampTzGetDatum(c.lease_expires_at), PointerGetDatum(c.last_error)};
	bool nulls[5] = {false, c.attempt == 0, c.result == 0, c.lease_expires_at == 0,
			 c.last_error == NULL};
	return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls));
}

int attempt_arg(const char *fn, FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			errmsg("%s: attempt must not be null", fn));
	int attempt = PG_GETARG_INT32(argno);
	if (attempt < 1)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			errmsg("%s: attempt must be positive", fn),
			errdetail("The attempt given was %d; idem_begin hands out 1, 2, ...",
				  attempt));
	return attempt;
}

// The refusal of a completion or failure from a caller that does not hold
// the key (never did, or lost it to a takeover or to reconciliation).
void refuse_not_holder(const char *fn, const idem::RecordRef &ref, int attempt, const Record &r)
{
	if (!r.exists)
		ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			errmsg("%s: key \"%s\" in scope \"%s\" is not claimed", fn,
			       text_to_cstring(ref.key), text_to_cstring(ref.scope)),
			errhint("Claim it with idem_begin first."));
	ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		errmsg("%s: attempt %d does not hold key \"%s\" in scope \"%s\"", fn, attempt,
		       text_to_cstring(ref.key), text_to_cstring(ref.scope)),
		errdetail("The record is %s, attempt %d.", state_name(r.state), r.attempts),
		r.attempts > attempt
		    ? errhint("Its lease was taken over; this attempt's outcome is not recorded.")
		    : 0);
}

const idem::RecordRef begin_ref(const char *fn, FunctionCallInfo fcinfo)
{
	idem::RecordRef ref = idem::record_ref(fn, PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
					       PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1));
	PreventCommandIfReadOnly(fn);
	PreventCommandDuringRecovery(fn);
	return ref;
}

} // namespace

// idem_begin(scope, key, lease, fingerprint, wait, takeover_on_disconnect)
IDEM_SQL_FUNCTION(idem_begin)
{
	BeginArgs args;
	args.fn = "idem_begin";
	args.ref = begin_ref(args.fn, fcinfo);
	args.lease = PG_ARGISNULL(2) ? NULL : PG_GETARG_INTERVAL_P(2);
	if (args.lease != NULL)
		idem::check_positive_interval(args.fn, "lease", args.lease);
	args.fingerprint = PG_ARGISNULL(3) ? NULL : PG_GETARG_TEXT_PP(3);
	if (args.fingerprint != NULL &&
	    !idem::valid_fingerprint(VARDATA_ANY(args.fingerprint),
				     VARSIZE_ANY_EXHDR(args.fingerprint)))
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			errmsg("%s: fingerprint must be 64 lowercase hexadecimal digits", args.fn),
			errdetail("A fingerprint is a SHA-256 of the payload, hex-encoded."),
			errhint("Hash the canonical form of the payload with SHA-256."));
	args.wait_ms = 0;
	if (!PG_ARGISNULL(4)) {
		double wait_us = idem::interval_microseconds(PG_GETARG_INTERVAL_P(4));
		if (wait_us < 0)
			ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("%s: wait must not be negative", args.fn));
		// Any wait ends at the holder's lease at the latest; capped at a
		// century, so that the deadline cannot overflow.
		args.wait_ms = long(std::min(wait_us, idem::max_interval_microseconds) / 1000);
	}
	args.settings = idem::scope_settings(args.ref.scope);
	args.policy.max_attempts = args.settings.max_attempts;
	args.policy.takeover_on_disconnect =
	    PG_ARGISNULL(5) ? args.settings.takeover_on_disconnect : PG_GETARG_BOOL(5);
	args.mismatch_is_error = args.settings.mismatch_is_error;

	TimestampTz now = GetCurrentTimestamp();
	const idem::ExtensionObjects &objects = idem::extension_objects();
	// A recent completed record may be answered from the duplicate cache,
	// exactly as decide_and_write would answer it at `now`.
	idem::CacheAnswer cache = idem::CacheAnswer::unused;
	if (idem::cache_usable()) {
		idem::CachedCompletion done;
		if (idem::cache_lookup_completed(objects, args.ref, now, args.fingerprint, &done)) {
			Claim c = {"completed", done.attempts, done.result, 0, NULL};
			count_claim(args.ref.scope, c, idem::CacheAnswer::hit);
			return claim_datum(fcinfo, c);
		}
		cache = idem::CacheAnswer::miss;
	}
	idem::NewRecord claim = {objects.status_in_progress,
				 now,
				 idem::record_expiry(args.fn, now, NULL, args.settings),
				 lease_end(args, now),
				 MyProcPid,
				 MyStartTimestamp,
				 args.fingerprint};
	// The common case, a key seen for the first time, is one insertion
	// below SQL (with ON CONFLICT DO NOTHING's semantics); anything else is
	// decided under the record's row lock.
	if (idem::records_insert(args.ref, claim)) {
		Claim c = {"acquired", 1, 0, claim.lease_expires_at, NULL};
		count_claim(args.ref.scope, c, cache);
		return claim_datum(fcinfo, c);
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	// Waiting needs fresh snapshots; under REPEATABLE READ it would only
	// ever see the same state, so it is skipped there.
	if (args.wait_ms > 0 && !IsolationUsesXactSnapshot())
		wait_for_holder(args);
	Claim c = decide_and_write(args);
	// The answer is built after SPI_finish, which frees SPI's memory.
	if (c.result != 0)
		c.result = PointerGetDatum(SPI_datumTransfer(c.result, false, -1));
	if (c.last_error != NULL)
		c.last_error = reinterpret_cast<text *>(
		    DatumGetPointer(SPI_datumTransfer(PointerGetDatum(c.last_error), false, -1)));
	SPI_finish();
	count_claim(args.ref.scope, c, cache);
	return claim_datum(fcinfo, c);
}

// idem_complete(scope, key, attempt, result)
IDEM_SQL_FUNCTION(idem_complete)
{
	static const char fn[] = "idem_complete";
	idem::RecordRef ref = begin_ref(fn, fcinfo);
	int attempt = attempt_arg(fn, fcinfo, 2);
	idem::ScopeSettings settings = idem::scope_settings(ref.scope);
	TimestampTz now = GetCurrentTimestamp();

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	Oid types[] = {BYTEAOID, INT4OID, JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	idem::Statement *st = prepare(
	    "claim:complete",
	    "UPDATE %s SET status = 'completed', result = $3, recorded_at = $4, expires_at = $5, "
	    "lease_expires_at = NULL, holder_pid = NULL, holder_started_at = NULL, "
	    "last_error = NULL "
	    "WHERE key_id OPERATOR(pg_catalog.=) $1 "
	    "AND status OPERATOR(pg_catalog.=) 'in_progress' "
	    "AND attempts OPERATOR(pg_catalog.=) $2",
	    5, types);
	Datum values[] = {PointerGetDatum(ref.id), Int32GetDatum(attempt),
			  PG_ARGISNULL(3) ? 0 : PG_GETARG_DATUM(3), TimestampTzGetDatum(now),
			  TimestampTzGetDatum(idem::record_expiry(fn, now, NULL, settings))};
	char nulls[] = "     ";
	if (PG_ARGISNULL(3))
		nulls[2] = 'n';
	idem::OwnChange own = idem::cache_own_change_begin(ref.id);
	uint64 completed = run(st, values, nulls, SPI_OK_UPDATE);
	idem::cache_own_change_end(own);
	if (completed == 0)
		refuse_not_holder(fn, ref, attempt, read_record(ref, false));
	idem::cache_invalidate(ref.id);
	idem::claim_wake_at_commit(ref.id);
	SPI_finish();
	idem::stats_count(ref.scope, idem::stat_completions);
	PG_RETURN_VOID();
}

// idem_fail(scope, key, attempt, error, retryable) RETURNS idem_status
IDEM_SQL_FUNCTION(idem_fail)
{
	static const char fn[] = "idem_fail";
	idem::RecordRef ref = begin_ref(fn, fcinfo);
	int attempt = attempt_arg(fn, fcinfo, 2);
	if (PG_ARGISNULL(3))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			errmsg("%s: error must not be null", fn),
			errhint("Describe what went wrong; operators read it in idem_dead_letters."));
	if (PG_ARGISNULL(4))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			errmsg("%s: retryable must not be null", fn));
	bool retryable = PG_GETARG_BOOL(4);
	idem::ScopeSettings settings = idem::scope_settings(ref.scope);
	TimestampTz now = GetCurrentTimestamp();

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	Record r = read_record(ref, true);
	if (!r.exists || r.state != idem::RecordState::in_progress || r.attempts != attempt)
		refuse_not_holder(fn, ref, attempt, r);
	idem::RecordState outcome =
	    idem::decide_failure(r.attempts, r.attempt_base, settings.max_attempts, retryable);

	const idem::ExtensionObjects &objects = idem::extension_objects();
	Oid types[] = {BYTEAOID, objects.status_type, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	idem::Statement *st = prepare(
	    "claim:fail",
	    "UPDATE %s SET status = $2, last_error = $3, recorded_at = $4, expires_at = $5, "
	    "lease_expires_at = NULL, holder_pid = NULL, holder_started_at = NULL "
	    "WHERE key_id OPERATOR(pg_catalog.=) $1",
	    5, types);
	Datum values[] = {PointerGetDatum(ref.id), ObjectIdGetDatum(status_oid(outcome)),
			  PG_GETARG_DATUM(3), TimestampTzGetDatum(now),
			  TimestampTzGetDatum(idem::record_expiry(fn, now, NULL, settings))};
	idem::OwnChange own = idem::cache_own_change_begin(ref.id);
	run(st, values, NULL, SPI_OK_UPDATE);
	idem::cache_own_change_end(own);
	idem::cache_invalidate(ref.id);
	idem::claim_wake_at_commit(ref.id);
	SPI_finish();
	idem::StatsDelta delta;
	memset(&delta, 0, sizeof delta);
	delta.n[idem::stat_failures] = 1;
	delta.n[idem::stat_dead_letters] = outcome == idem::RecordState::dead ? 1 : 0;
	idem::stats_add(ref.scope, delta);
	PG_RETURN_OID(status_oid(outcome));
}
