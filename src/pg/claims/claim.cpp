// idem_begin, idem_complete, idem_fail, idem_release and idem_lookup: the
// claim protocol for effects that cannot share the consumer's transaction
// (see the state diagram in src/core/claim_rules.hpp, which also makes every
// decision taken here).
//
// Each function is one short transaction of the caller's (call them in
// autocommit, and do the external work between idem_begin and
// idem_complete, outside any transaction).
//
// Locking: idem_begin reads the record with SELECT ... FOR UPDATE, so two
// claims of one key queue on its row lock and the second decides on what the
// first committed; a brand-new key is inserted with ON CONFLICT DO NOTHING and
// re-read if a concurrent claim got there first. idem_complete, idem_fail
// and idem_release update only WHERE status = 'in_progress' AND
// claim_token = <the caller's token>. Each claim gets a new random token
// (122 bits from pg_strong_random, claim_tokens.hpp) that only its acquirer
// is told, so a session that never held the key, or a holder whose lease was taken over
// (or reconciled), matches nothing and is refused with an error, changing
// nothing. The attempt number stays in the answers as the fencing number a
// holder may pass to other systems; it is no longer a credential.
//
// A claim may bring its own ttl: the record keeps it (column ttl), and its
// completion, failure or release gives the record that lifetime, else the
// scope's.
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
#include "utils/uuid.h"
#include "utils/datum.h"
}

#include "core/claim_rules.hpp"
#include "pg/claims/claim_tokens.hpp"
#include "pg/claims/claim_wait.hpp"
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
#include "pg/scopes/scopes.hpp"
#include "pg/settings.hpp"
#include "pg/stats/stats.hpp"

#include <algorithm>
#include <cstring>

namespace
{

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
	Datum result;      // jsonb, or 0 when NULL
	text *last_error;
	bool has_token;
	pg_uuid_t token;
	Interval *ttl; // the claim's own, NULL when none
};

// A statement about one record, prepared once per backend
// (record_statements.hpp).
idem::RecordStatement prepare(const char *signature, const char *sql_format, int nargs, Oid *types,
                              bool insertion = false)
{
	return idem::record_statement(signature, sql_format, nargs, types, insertion);
}

uint64 run(const idem::RecordStatement &rs, const idem::RecordRef &ref, Datum *values,
           const char *nulls, int expected)
{
	return idem::run_record_statement(rs, ref, values, nulls, false, 0, expected);
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

// Reads the record, locking its row when `lock` (inside SPI); `read_only`
// for a caller that writes nothing (idem_lookup).
Record read_record(const idem::RecordRef &ref, bool lock, bool read_only = false)
{
#define RECORD_COLUMNS                                                                             \
	"SELECT scope, key, status, attempts, attempt_base, expires_at, lease_expires_at, "            \
	"holder_pid, holder_started_at, fingerprint, result, last_error, claim_token, ttl "            \
	"FROM %s WHERE %s"
	Oid types[] = {BYTEAOID};
	idem::RecordStatement st = lock ? prepare("claim:lock", RECORD_COLUMNS " FOR UPDATE", 1, types)
	                                : prepare("claim:read", RECORD_COLUMNS, 1, types);
#undef RECORD_COLUMNS
	Datum values[] = {PointerGetDatum(ref.id)};
	idem::run_record_statement(st, ref, values, NULL, read_only, 1, SPI_OK_SELECT);

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
		ereport(ERROR, errcode(ERRCODE_INTERNAL_ERROR), errmsg("pg_idem key id collision"),
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
	d = SPI_getbinval(row, desc, 13, &isnull);
	r.has_token = !isnull;
	if (!isnull)
		r.token = *DatumGetUUIDP(d);
	d = SPI_getbinval(row, desc, 14, &isnull);
	r.ttl =
	    isnull
	        ? NULL
	        : reinterpret_cast<Interval *>(DatumGetPointer(datumCopy(d, false, sizeof(Interval))));
	return r;
}

// Is the backend that claimed the record still running? The pid alone is
// not enough (pids are reused), so its start time must match too.
bool holder_alive(int pid, TimestampTz started_at)
{
	pgstat_clear_backend_activity_snapshot();
	int n = pgstat_fetch_stat_numbackends();
	for (int i = 1; i <= n; i++) {
		LocalPgBackendStatus *entry = pgstat_get_local_beentry_by_index(i);
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
	Interval *ttl; // the call's, NULL when none
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

// Writes the claim, held by `token`: a new record (attempt 1), or the
// existing one taken over with `attempt`; `fresh` when that record had
// expired and starts a new life (its fingerprint, result and last error are
// dropped, but never its attempt count: attempt numbers are fencing numbers
// and must never be handed out twice). `rebind` when the claim records its
// own fingerprint, even none: a fresh record, and a failed or released one,
// which binds no payload. Returns false if a concurrent claim inserted the
// key first.
bool write_claim(const BeginArgs &args, bool exists, int attempt, int attempt_base, bool fresh,
                 bool rebind, const pg_uuid_t *token, TimestampTz now)
{
	Datum values[] = {
	    PointerGetDatum(args.ref.id),
	    PointerGetDatum(args.ref.scope),
	    PointerGetDatum(args.ref.key),
	    Int32GetDatum(attempt),
	    Int32GetDatum(attempt_base),
	    TimestampTzGetDatum(now),
	    TimestampTzGetDatum(idem::record_expiry(args.fn, now, args.ttl, args.settings)),
	    TimestampTzGetDatum(lease_end(args, now)),
	    Int32GetDatum(MyProcPid),
	    TimestampTzGetDatum(MyStartTimestamp),
	    PointerGetDatum(args.fingerprint),
	    UUIDPGetDatum(token),
	    IntervalPGetDatum(args.ttl),
	    BoolGetDatum(fresh),
	    BoolGetDatum(rebind)};
	char nulls[] = "               ";
	if (args.fingerprint == NULL)
		nulls[10] = 'n';
	if (args.ttl == NULL)
		nulls[12] = 'n';
	Oid types[] = {BYTEAOID,       TEXTOID,        TEXTOID,        INT4OID, INT4OID,
	               TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID,
	               TEXTOID,        UUIDOID,        INTERVALOID,    BOOLOID, BOOLOID};
	if (!exists) {
		idem::RecordStatement st = prepare(
		    "claim:insert",
		    "INSERT INTO %s (key_id, scope, key, status, attempts, attempt_base, "
		    "recorded_at, expires_at, lease_expires_at, holder_pid, holder_started_at, "
		    "fingerprint, claim_token, ttl, route) VALUES ($1, $2, $3, 'in_progress', $4, $5, $6, "
		    "$7, $8, $9, $10, $11, $12, $13, $14) ON CONFLICT (%s) DO NOTHING",
		    13, types, true);
		return run(st, args.ref, values, nulls, SPI_OK_INSERT) == 1;
	}
	idem::RecordStatement st =
	    prepare("claim:takeover",
	            "UPDATE %s SET status = 'in_progress', attempts = $4, attempt_base = $5, "
	            "recorded_at = $6, expires_at = $7, lease_expires_at = $8, holder_pid = $9, "
	            "holder_started_at = $10, claim_token = $12, ttl = $13, "
	            "fingerprint = CASE WHEN $15 THEN $11 ELSE COALESCE($11, fingerprint) END, "
	            "last_error = CASE WHEN $14 THEN NULL ELSE last_error END, result = NULL "
	            "WHERE %s",
	            15, types);
	idem::OwnChange own = idem::cache_own_change_begin(args.ref.id);
	run(st, args.ref, values, nulls, SPI_OK_UPDATE);
	idem::cache_own_change_end(own);
	idem::cache_invalidate(args.ref.id);
	return true;
}

// The attempts ran out without a failure being reported (leases expired, or
// holders vanished): say so, since operators read last_error. The dead
// letter lives a full TTL from now, as idem_fail's does: its old expiry,
// set at the claim, may already have passed (a lease as long as the TTL),
// and an expired dead record would be claimed again at once. Returns the
// new expiry.
TimestampTz mark_dead(const BeginArgs &args, const Record &r, TimestampTz now)
{
	int attempts = r.attempts;
	TimestampTz expires_at = idem::record_expiry(args.fn, now, r.ttl, args.settings);
	Oid types[] = {BYTEAOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	idem::RecordStatement st =
	    prepare("claim:dead",
	            "UPDATE %s SET status = 'dead', last_error = $2, lease_expires_at = NULL, "
	            "holder_pid = NULL, holder_started_at = NULL, claim_token = NULL, "
	            "recorded_at = $3, expires_at = $4 "
	            "WHERE %s",
	            4, types);
	const idem::RecordRef &ref = args.ref;
	Datum values[] = {PointerGetDatum(ref.id),
	                  CStringGetTextDatum(psprintf("attempts used up: attempt %d did not finish "
	                                               "before its lease expired",
	                                               attempts)),
	                  TimestampTzGetDatum(now), TimestampTzGetDatum(expires_at)};
	idem::OwnChange own = idem::cache_own_change_begin(ref.id);
	run(st, ref, values, NULL, SPI_OK_UPDATE);
	idem::cache_own_change_end(own);
	idem::cache_invalidate(ref.id);
	return expires_at;
}

// The answer of idem_begin and idem_lookup, as an idem_claim row.
struct Claim {
	const char *status;
	int attempt; // 0: NULL
	Datum result;
	TimestampTz lease_expires_at; // 0: NULL
	text *last_error;
	const pg_uuid_t *token; // only in an 'acquired' answer
	TimestampTz expires_at; // 0: NULL
	text *fingerprint;      // the stored one, where the answer shows it
	bool took_over;         // acquired from a holder whose lease ran out (or who is gone)
	bool became_dead;       // this call marked the record dead
};

// What idem_begin answers about a record it does not take: its attempt,
// result, lease, last error and expiry, no token, and no fingerprint (the
// caller knows its own; only a mismatch shows the stored one).
Claim report(const char *status, const Record &r)
{
	Claim c;
	memset(&c, 0, sizeof c);
	c.status = status;
	c.attempt = r.attempts;
	c.result = r.result;
	c.lease_expires_at = r.lease_expires_at;
	c.last_error = r.last_error;
	c.expires_at = r.expires_at;
	return c;
}

Claim acquired(const BeginArgs &args, int attempt, text *last_error, const pg_uuid_t *token,
               TimestampTz now)
{
	Claim c;
	memset(&c, 0, sizeof c);
	c.status = "acquired";
	c.attempt = attempt;
	c.lease_expires_at = lease_end(args, now);
	c.last_error = last_error;
	c.token = token;
	c.expires_at = idem::record_expiry(args.fn, now, args.ttl, args.settings);
	return c;
}

// A payload that differs from the one a key was used with: its own SQLSTATE
// (class "ID", implementation-defined), so that a client can tell "the
// payload changed" from a malformed argument (22023).
#define ERRCODE_IDEM_FINGERPRINT_MISMATCH MAKE_SQLSTATE('I', 'D', 'M', '0', '1')

Claim decide_and_write(const BeginArgs &args)
{
	for (int round = 0; round < 100; round++) {
		// Read before the record, so that a change between that read and
		// the cache's insertion of what it found is seen (duplicate_cache.cpp).
		uint64 generation = idem::cache_generation(args.ref.id);
		TimestampTz now = GetCurrentTimestamp();
		Record r = read_record(args.ref, true);
		idem::ClaimView view = view_of(r, args, now);
		switch (idem::decide_claim(view, args.policy)) {
		case idem::ClaimAction::claim_new: {
			// An expired record starts a new life with a full set of
			// attempts, numbered on from the old ones.
			int attempt = r.exists ? r.attempts + 1 : 1;
			pg_uuid_t *token = idem::new_claim_token();
			if (!write_claim(args, r.exists, attempt, r.attempts, true, true, token, now))
				continue; // a concurrent claim inserted it: read it again
			return acquired(args, attempt, NULL, token, now);
		}
		case idem::ClaimAction::claim_next: {
			pg_uuid_t *token = idem::new_claim_token();
			write_claim(args, true, r.attempts + 1, r.attempt_base, false,
			            r.state == idem::RecordState::failed, token, now);
			Claim c = acquired(args, r.attempts + 1, r.last_error, token, now);
			c.took_over = r.state == idem::RecordState::in_progress;
			return c;
		}
		case idem::ClaimAction::report_in_progress:
			return report("in_progress", r);
		case idem::ClaimAction::report_completed:
			// Still holding the row lock: the next call can be answered
			// from the cache.
			idem::records_offer_to_cache(args.ref, now, generation);
			return report("completed", r);
		case idem::ClaimAction::mark_dead: {
			Claim c = report("dead", r);
			c.expires_at = mark_dead(args, r, now);
			c.became_dead = true;
			c.lease_expires_at = 0;
			c.last_error = cstring_to_text(
			    psprintf("attempts used up: attempt %d did not finish before its lease expired",
			             r.attempts));
			return c;
		}
		case idem::ClaimAction::report_dead:
			return report("dead", r);
		case idem::ClaimAction::report_mismatch: {
			if (args.mismatch_is_error)
				ereport(ERROR, errcode(ERRCODE_IDEM_FINGERPRINT_MISMATCH),
				        errmsg("%s: key was used before with a different payload", args.fn),
				        errdetail("The record of key \"%s\" in scope \"%s\" was made "
				                  "from a payload with another fingerprint.",
				                  text_to_cstring(args.ref.key), text_to_cstring(args.ref.scope)),
				        errhint("Use a new key for a different message, or configure "
				                "the scope with on_fingerprint_mismatch => 'status'."));
			// Nothing of the other payload's outcome is shown to this
			// one: only what tells the payloads apart, and when the key
			// may be used again.
			Claim c;
			memset(&c, 0, sizeof c);
			c.status = "fingerprint_mismatch";
			c.attempt = r.attempts;
			c.expires_at = r.expires_at;
			c.fingerprint = r.fingerprint;
			return c;
		}
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

text *transfer_text(text *t)
{
	return t == NULL ? NULL
	                 : reinterpret_cast<text *>(
	                       DatumGetPointer(SPI_datumTransfer(PointerGetDatum(t), false, -1)));
}

// Moves an answer read inside SPI out of SPI's memory, then ends SPI (whose
// SPI_finish frees that memory).
Claim finish_spi(Claim c)
{
	if (c.result != 0)
		c.result = SPI_datumTransfer(c.result, false, -1);
	c.last_error = transfer_text(c.last_error);
	c.fingerprint = transfer_text(c.fingerprint);
	SPI_finish();
	return c;
}

// The columns of idem_claim.
constexpr int claim_columns = 8;

// idem_claim's row descriptor, built from the function's result type and
// blessed once per backend instead of on every call, and again for another
// function (DROP and CREATE EXTENSION give idem_begin a new OID; its OUT
// parameters cannot change otherwise). idem_begin and idem_lookup each keep
// their own.
struct ClaimDesc {
	Oid fn;
	TupleDesc desc;
};

TupleDesc claim_desc(FunctionCallInfo fcinfo, ClaimDesc *cached)
{
	if (cached->desc != NULL && cached->fn == fcinfo->flinfo->fn_oid)
		return cached->desc;
	TupleDesc built;
	if (get_call_result_type(fcinfo, NULL, &built) != TYPEFUNC_COMPOSITE ||
	    built->natts != claim_columns)
		ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		        errmsg("pg_idem: idem_claim must have %d columns", claim_columns),
		        errhint("Run ALTER EXTENSION pg_idem UPDATE."));
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	built = BlessTupleDesc(CreateTupleDescCopy(built));
	MemoryContextSwitchTo(old);
	if (cached->desc != NULL)
		FreeTupleDesc(cached->desc);
	cached->desc = built;
	cached->fn = fcinfo->flinfo->fn_oid;
	return built;
}

Datum claim_datum(FunctionCallInfo fcinfo, ClaimDesc *cached, const Claim &c)
{
	TupleDesc desc = claim_desc(fcinfo, cached);
	Datum values[claim_columns] = {CStringGetTextDatum(c.status),
	                               Int32GetDatum(c.attempt),
	                               c.result,
	                               TimestampTzGetDatum(c.lease_expires_at),
	                               PointerGetDatum(c.last_error),
	                               UUIDPGetDatum(c.token),
	                               TimestampTzGetDatum(c.expires_at),
	                               PointerGetDatum(c.fingerprint)};
	bool nulls[claim_columns] = {false,
	                             c.attempt == 0,
	                             c.result == 0,
	                             c.lease_expires_at == 0,
	                             c.last_error == NULL,
	                             c.token == NULL,
	                             c.expires_at == 0,
	                             c.fingerprint == NULL};
	return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls));
}

ClaimDesc begin_desc = {InvalidOid, NULL};
ClaimDesc lookup_desc = {InvalidOid, NULL};

// The token of idem_complete, idem_fail and idem_release. A missing one is
// refused as a wrong one is: it holds nothing.
const pg_uuid_t *token_arg(const char *fn, FunctionCallInfo fcinfo, int argno,
                           const idem::RecordRef &ref)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		        errmsg("%s: no token given for key \"%s\" in scope \"%s\"", fn,
		               text_to_cstring(ref.key), text_to_cstring(ref.scope)),
		        errhint("Pass the token of idem_begin's 'acquired' answer; only the "
		                "holder of a claim has one."));
	return PG_GETARG_UUID_P(argno);
}

bool holds(const Record &r, const pg_uuid_t *token)
{
	return r.exists && r.state == idem::RecordState::in_progress && r.has_token &&
	       memcmp(r.token.data, token->data, UUID_LEN) == 0;
}

// The refusal of a completion, failure or release from a caller whose token
// does not hold the key (it never did, or lost it to a takeover or to
// reconciliation). It says nothing of the holder's token.
void refuse_not_holder(const char *fn, const idem::RecordRef &ref, const Record &r)
{
	if (!r.exists)
		ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		        errmsg("%s: key \"%s\" in scope \"%s\" is not claimed", fn,
		               text_to_cstring(ref.key), text_to_cstring(ref.scope)),
		        errhint("Claim it with idem_begin first."));
	ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
	        errmsg("%s: the token given does not hold key \"%s\" in scope \"%s\"", fn,
	               text_to_cstring(ref.key), text_to_cstring(ref.scope)),
	        errdetail("The record is %s, attempt %d.", state_name(r.state), r.attempts),
	        r.state == idem::RecordState::in_progress
	            ? errhint("Another claim holds it (its lease was taken over, or it was "
	                      "never this caller's); this outcome is not recorded.")
	            : errhint("Its claim has ended; this outcome is not recorded."));
}

// How a claim ends in `status`, now, for the scope's ttl (`scope_ttl`, the
// caller's, which the record's own ttl overrides).
idem::ClaimEnd claim_end(Oid status, const Interval *scope_ttl)
{
	idem::ClaimEnd end;
	memset(&end, 0, sizeof end);
	end.status = status;
	end.recorded_at = GetCurrentTimestamp();
	end.ttl = scope_ttl;
	return end;
}

// Ends the claim that the caller's token holds on ref's key as `end` says
// (records_end_claim), or refuses, changing nothing.
void end_held_claim(const char *fn, const idem::RecordRef &ref, const pg_uuid_t *token,
                    const idem::ClaimEnd &end)
{
	if (!idem::records_end_claim(ref, token, end)) {
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "pg_idem: SPI_connect failed");
		refuse_not_holder(fn, ref, read_record(ref, false));
	}
	idem::claim_wake_at_commit(ref.id);
}

// The scope, key and route (argument `route_arg`) of a call that writes,
// for a caller granted the scope.
const idem::RecordRef begin_ref(const char *fn, FunctionCallInfo fcinfo, Oid caller, int route_arg)
{
	idem::RecordRef ref = idem::record_ref(fn, PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
	                                       PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1));
	idem::check_scope(fn, caller, ref.scope);
	idem::take_route(fn, fcinfo, route_arg, ref);
	PreventCommandIfReadOnly(fn);
	PreventCommandDuringRecovery(fn);
	return ref;
}

void check_fingerprint(const char *fn, text *fingerprint)
{
	size_t len = VARSIZE_ANY_EXHDR(fingerprint);
	switch (idem::check_fingerprint(len)) {
	case idem::FingerprintCheck::ok:
		break;
	case idem::FingerprintCheck::empty:
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: fingerprint must not be empty", fn),
		        errhint("Pass NULL for a payload without a fingerprint, or "
		                "idem_fingerprint(payload)."));
		break;
	case idem::FingerprintCheck::too_long:
		ereport(ERROR, errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
		        errmsg("%s: fingerprint is too long", fn),
		        errdetail("The fingerprint has %zu bytes; the limit is %zu.", len,
		                  idem::max_fingerprint_bytes),
		        errhint("Pass a digest of the payload, such as idem_fingerprint(payload)."));
		break;
	}
}

// A database whose SQL is older than the library's claim protocol: the
// library no longer completes claims by attempt number, and says so
// instead of guessing at the old arguments.
void refuse_old_sql(const char *fn)
{
	ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
	        errmsg("%s: this database has the SQL of pg_idem 0.2 or older, and the library "
	               "is 0.3",
	               fn),
	        errdetail("Since 0.3, claims are held by a token instead of an attempt number."),
	        errhint("Run ALTER EXTENSION pg_idem UPDATE, and pass idem_begin's token to "
	                "idem_complete and idem_fail."));
}

} // namespace

// idem_begin(scope, key, lease, fingerprint, wait, takeover_on_disconnect, ttl, route)
IDEM_SQL_FUNCTION_AS_OWNER(idem_begin_0_3)
{
	BeginArgs args;
	args.fn = "idem_begin";
	args.ref = begin_ref(args.fn, fcinfo, caller, 7);
	args.lease = PG_ARGISNULL(2) ? NULL : PG_GETARG_INTERVAL_P(2);
	if (args.lease != NULL)
		idem::check_positive_interval(args.fn, "lease", args.lease);
	args.fingerprint = PG_ARGISNULL(3) ? NULL : PG_GETARG_TEXT_PP(3);
	if (args.fingerprint != NULL)
		check_fingerprint(args.fn, args.fingerprint);
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
	args.ttl = PG_ARGISNULL(6) ? NULL : PG_GETARG_INTERVAL_P(6);
	if (args.ttl != NULL)
		idem::check_positive_interval(args.fn, "ttl", args.ttl);
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
		if (idem::cache_lookup_completed(objects, args.ref.id, now, args.fingerprint, &done)) {
			Claim c;
			memset(&c, 0, sizeof c);
			c.status = "completed";
			c.attempt = done.attempts;
			c.result = done.result;
			c.expires_at = done.expires_at;
			count_claim(args.ref.scope, c, idem::CacheAnswer::hit);
			return claim_datum(fcinfo, &begin_desc, c);
		}
		cache = idem::CacheAnswer::miss;
	}
	pg_uuid_t *token = idem::new_claim_token();
	Claim first = acquired(args, 1, NULL, token, now);
	idem::NewRecord claim = {objects.status_in_progress, now,       first.expires_at,
	                         first.lease_expires_at,     MyProcPid, MyStartTimestamp,
	                         args.fingerprint,           token,     args.ttl};
	// The common case, a key seen for the first time, is one insertion
	// below SQL (with ON CONFLICT DO NOTHING's semantics); anything else is
	// decided under the record's row lock. Distributed records are only
	// ever written in SQL, which Citus routes to their shard.
	if (!idem::records_distributed() && idem::records_insert(args.ref, claim)) {
		count_claim(args.ref.scope, first, cache);
		return claim_datum(fcinfo, &begin_desc, first);
	}

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	// Waiting needs fresh snapshots; under REPEATABLE READ it would only
	// ever see the same state, so it is skipped there.
	if (args.wait_ms > 0 && !IsolationUsesXactSnapshot())
		wait_for_holder(args);
	Claim c = finish_spi(decide_and_write(args));
	count_claim(args.ref.scope, c, cache);
	return claim_datum(fcinfo, &begin_desc, c);
}

// idem_complete(scope, key, token, result, route)
IDEM_SQL_FUNCTION_AS_OWNER(idem_complete_0_3)
{
	static const char fn[] = "idem_complete";
	idem::RecordRef ref = begin_ref(fn, fcinfo, caller, 4);
	const pg_uuid_t *token = token_arg(fn, fcinfo, 2, ref);
	Interval scope_ttl = idem::scope_ttl(idem::scope_settings(ref.scope));
	idem::ClaimEnd end = claim_end(idem::extension_objects().status_completed, &scope_ttl);
	end.set_result = true;
	end.result = PG_ARGISNULL(3) ? 0 : PointerGetDatum(PG_DETOAST_DATUM(PG_GETARG_DATUM(3)));
	end.clear_last_error = true;
	end_held_claim(fn, ref, token, end);
	idem::stats_count(ref.scope, idem::stat_completions);
	PG_RETURN_VOID();
}

// idem_fail(scope, key, token, error, retryable, route) RETURNS idem_status
IDEM_SQL_FUNCTION_AS_OWNER(idem_fail_0_3)
{
	static const char fn[] = "idem_fail";
	idem::RecordRef ref = begin_ref(fn, fcinfo, caller, 5);
	const pg_uuid_t *token = token_arg(fn, fcinfo, 2, ref);
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
	if (!holds(r, token))
		refuse_not_holder(fn, ref, r);
	idem::RecordState outcome =
	    idem::decide_failure(r.attempts, r.attempt_base, settings.max_attempts, retryable);

	const idem::ExtensionObjects &objects = idem::extension_objects();
	Oid types[] = {BYTEAOID, objects.status_type, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	idem::RecordStatement st =
	    prepare("claim:fail",
	            "UPDATE %s SET status = $2, last_error = $3, recorded_at = $4, expires_at = $5, "
	            "lease_expires_at = NULL, holder_pid = NULL, holder_started_at = NULL, "
	            "claim_token = NULL "
	            "WHERE %s",
	            5, types);
	Datum values[] = {PointerGetDatum(ref.id), ObjectIdGetDatum(status_oid(outcome)),
	                  PG_GETARG_DATUM(3), TimestampTzGetDatum(now),
	                  TimestampTzGetDatum(idem::record_expiry(fn, now, r.ttl, settings))};
	idem::OwnChange own = idem::cache_own_change_begin(ref.id);
	run(st, ref, values, NULL, SPI_OK_UPDATE);
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

// idem_release(scope, key, token, route): the holder gives the claim back. The
// record becomes failed without an error of its own (it keeps the last
// one), the released attempt stops counting against max_attempts
// (attempt_base + 1: attempt numbers still only grow), and it lives a full
// TTL from now, so the next claim takes it at once, with attempt + 1, and
// binds its own fingerprint.
IDEM_SQL_FUNCTION_AS_OWNER(idem_release)
{
	static const char fn[] = "idem_release";
	idem::RecordRef ref = begin_ref(fn, fcinfo, caller, 3);
	const pg_uuid_t *token = token_arg(fn, fcinfo, 2, ref);
	Interval scope_ttl = idem::scope_ttl(idem::scope_settings(ref.scope));
	idem::ClaimEnd end = claim_end(idem::extension_objects().status_failed, &scope_ttl);
	end.release = true;
	end_held_claim(fn, ref, token, end);
	PG_RETURN_VOID();
}

// idem_lookup(scope, key, route) RETURNS idem_claim: the record as idem_begin would
// find it, read without a lock in the caller's snapshot. It writes nothing,
// never waits, is not counted in idem_stats, and never shows a token.
IDEM_SQL_FUNCTION_AS_OWNER(idem_lookup)
{
	static const char fn[] = "idem_lookup";
	idem::RecordRef ref = idem::record_ref(fn, PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
	                                       PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1));
	idem::check_scope(fn, caller, ref.scope);
	idem::take_route(fn, fcinfo, 2, ref);
	TimestampTz now = GetCurrentTimestamp();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	Record r = read_record(ref, false, true);
	Claim c;
	memset(&c, 0, sizeof c);
	// An expired record is one idem_begin would claim afresh.
	if (!r.exists || (r.state != idem::RecordState::in_progress && r.expires_at <= now)) {
		c.status = "absent";
	} else {
		c = report(state_name(r.state), r);
		c.fingerprint = r.fingerprint;
	}
	return claim_datum(fcinfo, &lookup_desc, finish_spi(c));
}

// The symbols of pg_idem 0.2's SQL (and 0.1's): refused, see refuse_old_sql.
IDEM_SQL_FUNCTION(idem_begin)
{
	refuse_old_sql("idem_begin");
	PG_RETURN_NULL();
}

IDEM_SQL_FUNCTION(idem_complete)
{
	refuse_old_sql("idem_complete");
	PG_RETURN_NULL();
}

IDEM_SQL_FUNCTION(idem_fail)
{
	refuse_old_sql("idem_fail");
	PG_RETURN_NULL();
}
