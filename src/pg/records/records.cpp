// The managed dedup table and the one way a key is claimed in it.
//
// Claiming (records_try_insert) does what INSERT ... ON CONFLICT
// (key_id) DO NOTHING does, built from the executor's own pieces
// (insert_record), with one addition for expiry:
//
//   1. The pre-check (find_holder) looks the key id up in the primary key
//      with a dirty snapshot: it sees the latest committed record, and waits
//      for a concurrent transaction that holds the key uncommitted (if that
//      one rolls back, the key is free again). No executor state is built
//      for it.
//   2. No record: a speculative insertion, re-checked against a concurrent
//      insert of the same key, exactly as ExecInsert does.
//   3. A record that is live is a duplicate: nothing is written, and no
//      transaction id is needed. One that has expired (past expires_at and
//      not in progress) counts as absent: it is UPDATEd back to life WHERE it
//      is still expired. The row lock orders concurrent takeovers; in READ
//      COMMITTED the loser's WHERE is rechecked against the winner's row and
//      matches nothing, and the loop looks again.
//
// With the duplicate cache on (duplicate_cache.cpp), a READ COMMITTED claim
// asks it before step 1, and offers it the live records step 3 finds.
// idem_begin offers it the completed records it reports
// (records_offer_to_cache): the same primary-key lookup, made while
// idem_begin holds the record's row lock.
//
// On a Citus cluster, once idem_records is distributed (routes.hpp), none of
// this runs: records are claimed and claims ended in SQL routed to the
// shard of their route (routed_records.cpp).
//
// So the function never raises unique_violation and needs no subtransaction.
// In REPEATABLE READ and SERIALIZABLE, a record the transaction's snapshot
// cannot see, and a concurrent takeover, raise serialization failures
// (40001) exactly where INSERT ... ON CONFLICT DO NOTHING and UPDATE would.
//
// Every statement text is schema-qualified and uses OPERATOR(pg_catalog.x):
// these run as the table owner (the functions are SECURITY DEFINER), so the
// caller's search_path must not be able to change what they mean.
extern "C" {
#include "postgres.h"

#include "access/genam.h"
#include "access/relscan.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

#include "core/record_key.hpp"
#include "pg/compat.hpp"
#include "pg/cache/duplicate_cache.hpp"
#include "pg/extension_objects.hpp"
#include "pg/plan_cache.hpp"
#include "pg/records/records.hpp"
#include "pg/records/record_indexes.hpp"
#include "pg/records/records_layout.hpp"
#include "pg/records/routed_records.hpp"
#include "pg/records/routes.hpp"

#include <cstring>

namespace idem
{

namespace
{

bool same_text(Datum stored, const text *given)
{
	text *s = DatumGetTextPP(stored);
	size_t len = VARSIZE_ANY_EXHDR(s);
	return len == VARSIZE_ANY_EXHDR(given) && memcmp(VARDATA_ANY(s), VARDATA_ANY(given), len) == 0;
}

// What a claim found: its own new record, or someone's live or expired one.
enum class Found { inserted, live, expired };

// The managed table as one call's claims use it (one key, or a batch),
// opened when first needed: a claim the duplicate cache answers opens
// nothing, a duplicate found in the table builds no executor state. The
// insertions share theirs, as ExecInsert shares it across the rows of one
// INSERT.
struct Claims {
	const ExtensionObjects *loc;
	Relation rel = NULL;
	Relation pkey = NULL;
	TupleTableSlot *holder = NULL; // the record find_holder found
	EState *estate = NULL;
	ResultRelInfo *rri = NULL;
	List *arbiters = NIL;
	TupleTableSlot *insert = NULL;  // the record being inserted
	TupleTableSlot *updated = NULL; // a new version, for its index entries
	bool indexes_open = false;      // in c.rri (open_indexes_for)
	MemoryContext context;          // where the above live
	// A batch's claims: the duplicate cache is left alone, and the
	// insertions are made visible by one CommandCounterIncrement at the
	// end, not one each.
	bool batch = false;
	bool inserted = false; // since the last CommandCounterIncrement

	explicit Claims(const ExtensionObjects &objects) : loc(&objects), context(CurrentMemoryContext)
	{
	}
};

void open_table(Claims &c)
{
	if (c.rel != NULL)
		return;
	MemoryContext outer = MemoryContextSwitchTo(c.context);
	c.rel = table_open(c.loc->records, RowExclusiveLock);
	c.pkey = index_open(c.loc->records_pkey, RowExclusiveLock);
	c.holder = table_slot_create(c.rel, NULL);
	MemoryContextSwitchTo(outer);
}

void prepare_insertion(Claims &c)
{
	if (c.estate != NULL)
		return;
	MemoryContext outer = MemoryContextSwitchTo(c.context);
	c.estate = CreateExecutorState();
	c.rri = makeNode(ResultRelInfo);
	InitResultRelInfo(c.rri, c.rel, 1, NULL, 0);
	c.arbiters = list_make1_oid(c.loc->records_pkey);
	c.insert = table_slot_create(c.rel, &c.estate->es_tupleTable);
	c.updated =
	    ExecAllocTableSlot(&c.estate->es_tupleTable, RelationGetDescr(c.rel), &TTSOpsHeapTuple);
	MemoryContextSwitchTo(outer);
}

// Lets later claims in this transaction see what was inserted, as a new
// command would.
void make_visible(Claims &c)
{
	if (c.inserted)
		CommandCounterIncrement();
	c.inserted = false;
}

// Opens the indexes for the record in `slot`, once per call. A call that
// writes one record (a single claim, a claim's end: a retry writes the
// same one) opens only the indexes it goes into (record_indexes.hpp); a
// batch writes many, so it opens them all, and ExecInsertIndexTuples tests
// each partial index's predicate record by record.
void open_indexes_for(Claims &c, TupleTableSlot *slot)
{
	if (c.indexes_open)
		return;
	MemoryContext outer = MemoryContextSwitchTo(c.context);
	// As ExecOpenIndices(rri, false), made cheaper. Not speculative, which
	// only adds what ExecCheckIndexConstraints needs: find_holder is our
	// pre-check.
	open_record_indexes(c.rri, c.pkey, c.batch ? NULL : slot, c.estate);
	c.indexes_open = true;
	MemoryContextSwitchTo(outer);
}

void close_claims(Claims &c)
{
	if (c.estate != NULL) {
		if (c.indexes_open)
			close_record_indexes(c.rri, c.pkey);
		ExecResetTupleTable(c.estate->es_tupleTable, false);
		FreeExecutorState(c.estate);
	}
	if (c.rel != NULL) {
		ExecDropSingleTupleTableSlot(c.holder);
		index_close(c.pkey, NoLock);
		table_close(c.rel, NoLock);
	}
}

// Finds the record that holds ref's key id, as ON CONFLICT's pre-check does
// (execIndexing.c, check_exclusion_or_unique_constraint): one lookup in the
// primary key with a dirty snapshot, which sees committed records and our
// own, and reports a transaction still inserting or deleting one; that
// transaction is waited for and the lookup repeated. On true, `slot` holds
// the record.
bool find_holder(Relation rel, Relation pkey, const RecordRef &ref, TupleTableSlot *slot)
{
	ScanKeyData skey;
	ScanKeyInit(&skey, 1, BTEqualStrategyNumber, F_BYTEAEQ, PointerGetDatum(ref.id));
	for (;;) {
		SnapshotData dirty;
		InitDirtySnapshot(dirty);
		IndexScanDesc scan = compat::index_beginscan(rel, pkey, &dirty, 1, 0);
		index_rescan(scan, &skey, 1, NULL, 0);
		bool found = index_getnext_slot(scan, ForwardScanDirection, slot);
		TransactionId xwait = !found                             ? InvalidTransactionId
		                      : TransactionIdIsValid(dirty.xmin) ? dirty.xmin
		                                                         : dirty.xmax;
		index_endscan(scan);
		if (!TransactionIdIsValid(xwait))
			return found;
		ItemPointerData tid = slot->tts_tid;
		ExecClearTuple(slot);
		if (dirty.speculativeToken != 0)
			SpeculativeInsertionWait(dirty.xmin, dirty.speculativeToken);
		else
			XactLockTableWait(xwait, rel, &tid, XLTW_InsertIndex);
		CHECK_FOR_INTERRUPTS();
	}
}

// Classifies the record that holds the key. In REPEATABLE READ and
// SERIALIZABLE, one our snapshot cannot see is a serialization failure, as
// in ON CONFLICT DO NOTHING (nodeModifyTable.c, ExecCheckTupleVisible). A
// key id match with another scope or key is a SHA-256 collision: an error,
// never a false duplicate.
Found classify_holder(const ExtensionObjects &loc, Relation rel, TupleTableSlot *slot,
                      const RecordRef &ref, TimestampTz now)
{
	bool isnull;
	if (IsolationUsesXactSnapshot()) {
		TransactionId xmin =
		    DatumGetTransactionId(slot_getsysattr(slot, MinTransactionIdAttributeNumber, &isnull));
		if (!table_tuple_satisfies_snapshot(rel, slot, GetTransactionSnapshot()) &&
		    !TransactionIdIsCurrentTransactionId(xmin))
			ereport(ERROR, errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			        errmsg("could not serialize access due to concurrent update"));
	}
	if (!same_text(slot_getattr(slot, col_scope, &isnull), ref.scope) ||
	    !same_text(slot_getattr(slot, col_key, &isnull), ref.key))
		ereport(ERROR, errcode(ERRCODE_INTERNAL_ERROR), errmsg("pg_idem key id collision"),
		        errdetail("Scope \"%s\" and another (scope, key) share a key id.",
		                  text_to_cstring(ref.scope)),
		        errhint("Report this: it is a SHA-256 collision."));
	Oid status = DatumGetObjectId(slot_getattr(slot, col_status, &isnull));
	TimestampTz expires_at = DatumGetTimestampTz(slot_getattr(slot, col_expires_at, &isnull));
	return expires_at <= now && status != loc.status_in_progress ? Found::expired : Found::live;
}

// The insertion half of INSERT ... ON CONFLICT DO NOTHING, with the
// executor's own building blocks: a speculative heap insertion, index
// entries that report a conflict instead of raising unique_violation, and
// the speculative token that lets a concurrent claimant wait for our
// decision. Returns false if a concurrent insert of the same key won the
// race after our lookup (our tuple is then dead, as in ExecInsert).
bool insert_speculatively(Claims &c, const RecordRef &ref, const NewRecord &record)
{
	prepare_insertion(c);
	const ExtensionObjects &loc = *c.loc;
	Relation rel = c.rel;
	TupleTableSlot *slot = c.insert;
	ExecClearTuple(slot);
	int natts = RelationGetDescr(rel)->natts;
	for (int i = 0; i < natts; i++) {
		slot->tts_values[i] = 0;
		slot->tts_isnull[i] = true;
	}
	auto set = [slot](RecordColumn col, Datum value) {
		slot->tts_values[col - 1] = value;
		slot->tts_isnull[col - 1] = false;
	};
	set(col_key_id, PointerGetDatum(ref.id));
	set(col_scope, PointerGetDatum(ref.scope));
	set(col_key, PointerGetDatum(ref.key));
	set(col_status, ObjectIdGetDatum(record.status));
	set(col_attempts, Int32GetDatum(1));
	set(col_attempt_base, Int32GetDatum(0));
	set(col_recorded_at, TimestampTzGetDatum(record.recorded_at));
	set(col_expires_at, TimestampTzGetDatum(record.expires_at));
	if (record.lease_expires_at != 0)
		set(col_lease_expires_at, TimestampTzGetDatum(record.lease_expires_at));
	if (record.holder_pid != 0) {
		set(col_holder_pid, Int32GetDatum(record.holder_pid));
		set(col_holder_started_at, TimestampTzGetDatum(record.holder_started_at));
	}
	if (record.fingerprint != NULL)
		set(col_fingerprint, PointerGetDatum(record.fingerprint));
	if (ref.routed) {
		TupleDesc desc = RelationGetDescr(rel);
		if (natts < col_route || TupleDescAttr(desc, col_route - 1)->atttypid != INT8OID ||
		    TupleDescAttr(desc, col_route - 1)->attisdropped)
			ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			        errmsg("%s lacks the route column of pg_idem 0.3", loc.records_name),
			        errhint("Run ALTER EXTENSION pg_idem UPDATE."));
		set(col_route, Int64GetDatum(ref.route));
	}
	if (record.claim_token != NULL || record.ttl != NULL) {
		TupleDesc desc = RelationGetDescr(rel);
		if (natts < col_ttl || TupleDescAttr(desc, col_claim_token - 1)->atttypid != UUIDOID ||
		    TupleDescAttr(desc, col_claim_token - 1)->attisdropped ||
		    TupleDescAttr(desc, col_ttl - 1)->atttypid != INTERVALOID ||
		    TupleDescAttr(desc, col_ttl - 1)->attisdropped)
			ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			        errmsg("%s lacks the claim columns of pg_idem 0.3", loc.records_name),
			        errhint("Run ALTER EXTENSION pg_idem UPDATE."));
		if (record.claim_token != NULL)
			set(col_claim_token, UUIDPGetDatum(record.claim_token));
		if (record.ttl != NULL)
			set(col_ttl, IntervalPGetDatum(record.ttl));
	}
	ExecStoreVirtualTuple(slot);
	open_indexes_for(c, slot);

	TransactionId xid = GetCurrentTransactionId();
	uint32 token = SpeculativeInsertionLockAcquire(xid);
	table_tuple_insert_speculative(rel, slot, GetCurrentCommandId(true), 0, NULL, token);
	bool conflict = false;
	list_free(
	    compat::ExecInsertIndexTuples(c.rri, slot, c.estate, false, true, &conflict, c.arbiters));
	table_tuple_complete_speculative(rel, slot, token, !conflict);
	SpeculativeInsertionLockRelease(xid);
	ExecClearTuple(slot);
	ResetPerTupleExprContext(c.estate);
	return !conflict;
}

// Offers the duplicate cache the record in `slot`, with the columns it
// keeps read from that tuple, which the cache takes only if the tuple is
// settled and nothing changed since `generation` (duplicate_cache.cpp).
void offer_to_cache(Relation rel, TupleTableSlot *slot, const RecordRef &ref, uint64 generation)
{
	bool isnull;
	CacheableRecord record;
	record.status = DatumGetObjectId(slot_getattr(slot, col_status, &isnull));
	record.expires_at = DatumGetTimestampTz(slot_getattr(slot, col_expires_at, &isnull));
	record.attempts = DatumGetInt32(slot_getattr(slot, col_attempts, &isnull));
	slot_getattr(slot, col_lease_expires_at, &isnull);
	record.has_lease = !isnull;
	slot_getattr(slot, col_last_error, &isnull);
	record.has_last_error = !isnull;
	Datum d = slot_getattr(slot, col_fingerprint, &isnull);
	record.fingerprint = isnull ? NULL : DatumGetTextPP(d);
	d = slot_getattr(slot, col_result, &isnull);
	record.result = isnull ? 0 : d;
	cache_remember(rel, slot, ref.id, record, generation);
}

// Claims the key for `record` unless a record holds it: a lookup, then,
// only for a new key, an insertion. Duplicates cost one index lookup, no
// write and no transaction id. With `cache_from` (the duplicate cache's
// counter, read before this lookup), a live record found is offered to the
// duplicate cache.
Found insert_record(Claims &c, const RecordRef &ref, const NewRecord &record,
                    const uint64 *cache_from = NULL)
{
	open_table(c);
	Found found;
	for (;;) {
		if (find_holder(c.rel, c.pkey, ref, c.holder)) {
			found = classify_holder(*c.loc, c.rel, c.holder, ref, record.recorded_at);
			if (found == Found::live && cache_from != NULL)
				offer_to_cache(c.rel, c.holder, ref, *cache_from);
			break;
		}
		if (insert_speculatively(c, ref, record)) {
			c.inserted = true;
			if (!c.batch)
				make_visible(c);
			found = Found::inserted;
			break;
		}
		// Lost a race after the lookup: look again, which now waits.
	}
	ExecClearTuple(c.holder);
	return found;
}

Statement *takeover_statement(const ExtensionObjects &loc)
{
	Oid types[] = {BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	return statement_for("records:takeover", loc.records, loc.records_name,
	                     "UPDATE %s SET status = 'completed', "
	                     "attempts = attempts OPERATOR(pg_catalog.+) 1, attempt_base = attempts, "
	                     "recorded_at = $2, expires_at = $3, lease_expires_at = NULL, "
	                     "holder_pid = NULL, holder_started_at = NULL, "
	                     "fingerprint = NULL, result = NULL, last_error = NULL "
	                     "WHERE key_id OPERATOR(pg_catalog.=) $1 "
	                     "AND expires_at OPERATOR(pg_catalog.<=) $2 "
	                     "AND status OPERATOR(pg_catalog.<>) 'in_progress'",
	                     3, types);
}

uint64 run(Statement *st, Datum *values)
{
	int rc = SPI_execute_plan(st->plan, values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "pg_idem: unexpected SPI result %s", SPI_result_code_string(rc));
	// Let later claims in this transaction see what was just written.
	CommandCounterIncrement();
	return SPI_processed;
}

// Brings an expired record back to life for this claim; false if it was no
// longer expired (or no longer there) by the time we held its row lock.
bool take_over_expired(const ExtensionObjects &loc, const RecordRef &ref, TimestampTz now,
                       TimestampTz expires_at)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	Datum values[] = {PointerGetDatum(ref.id), TimestampTzGetDatum(now),
	                  TimestampTzGetDatum(expires_at)};
	OwnChange own = cache_own_change_begin(ref.id);
	bool taken = run(takeover_statement(loc), values) == 1;
	cache_own_change_end(own);
	SPI_finish();
	if (taken)
		cache_invalidate(ref.id);
	return taken;
}

// A safety valve: each round needs a concurrent commit to lose, so this many
// rounds in a row means something is wrong, not busy.
constexpr int max_rounds = 1000;

// records_try_insert for one key, on the opened table.
bool try_claim(Claims &c, const RecordRef &ref, TimestampTz now, TimestampTz expires_at,
               CacheAnswer *cache)
{
	const ExtensionObjects &loc = *c.loc;
	*cache = CacheAnswer::unused;
	uint64 generation = 0;
	const uint64 *cache_from = NULL;
	if (!c.batch && cache_usable()) {
		if (cache_lookup(loc, ref.id, now)) {
			*cache = CacheAnswer::hit;
			return false;
		}
		*cache = CacheAnswer::miss;
		// Read before the table lookups below (a hit needs none), so
		// that a change between them and the cache insertion is seen
		// (duplicate_cache.cpp).
		generation = cache_generation(ref.id);
		cache_from = &generation;
	}
	NewRecord record = {loc.status_completed, now, expires_at, 0, 0, 0, NULL, NULL, NULL};
	for (int round = 0; round < max_rounds; round++) {
		switch (insert_record(c, ref, record, cache_from)) {
		case Found::inserted:
			return true;
		case Found::live:
			return false;
		case Found::expired:
			make_visible(c); // the takeover's UPDATE sees the batch so far
			if (take_over_expired(loc, ref, now, expires_at))
				return true;
			break; // someone renewed or purged it first: look again
		}
	}
	elog(ERROR, "pg_idem: could not settle the state of a key after %d rounds", max_rounds);
}

// Reports what check_record_key found wrong, if anything.
void report_key_check(const char *fn, KeyCheck check, size_t scope_len, size_t key_len)
{
	switch (check) {
	case KeyCheck::ok:
		break;
	case KeyCheck::empty_scope:
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: scope must not be empty", fn));
		break;
	case KeyCheck::scope_too_long:
		ereport(
		    ERROR, errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED), errmsg("%s: scope is too long", fn),
		    errdetail("The scope has %zu bytes; the limit is %zu.", scope_len, max_scope_bytes));
		break;
	case KeyCheck::empty_key:
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: key must not be empty", fn));
		break;
	case KeyCheck::key_too_long:
		ereport(ERROR, errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED), errmsg("%s: key is too long", fn),
		        errdetail("The key has %zu bytes; the limit is %zu.", key_len, max_key_bytes),
		        errhint("Derive a shorter key from the message, such as a digest of "
		                "its identifying fields."));
		break;
	}
}

// The version of ref's record that `snapshot` sees, into c.holder.
bool find_visible(Claims &c, const RecordRef &ref, Snapshot snapshot)
{
	ScanKeyData skey;
	ScanKeyInit(&skey, 1, BTEqualStrategyNumber, F_BYTEAEQ, PointerGetDatum(ref.id));
	IndexScanDesc scan = compat::index_beginscan(c.rel, c.pkey, snapshot, 1, 0);
	index_rescan(scan, &skey, 1, NULL, 0);
	bool found = index_getnext_slot(scan, ForwardScanDirection, c.holder);
	index_endscan(scan);
	return found;
}

// Whether the record in c.holder is a claim in progress held by `token`.
bool held_by(const Claims &c, const pg_uuid_t *token)
{
	bool isnull;
	if (DatumGetObjectId(slot_getattr(c.holder, col_status, &isnull)) != c.loc->status_in_progress)
		return false;
	Datum held = slot_getattr(c.holder, col_claim_token, &isnull);
	return !isnull && memcmp(DatumGetUUIDP(held)->data, token->data, UUID_LEN) == 0;
}

// The record in c.holder, ended as `end` says.
HeapTuple ended_record(const Claims &c, const ClaimEnd &end)
{
	bool isnull;
	Datum own_ttl = slot_getattr(c.holder, col_ttl, &isnull);
	const Interval *ttl = isnull ? end.ttl : DatumGetIntervalP(own_ttl);
	Datum expires_at =
	    DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(end.recorded_at),
	                        IntervalPGetDatum(const_cast<Interval *>(ttl)));
	int cols[9];
	Datum values[9];
	bool nulls[9];
	int n = 0;
	auto set = [&](RecordColumn col, Datum value, bool null) {
		cols[n] = col;
		values[n] = value;
		nulls[n] = null;
		n++;
	};
	set(col_status, ObjectIdGetDatum(end.status), false);
	set(col_recorded_at, TimestampTzGetDatum(end.recorded_at), false);
	set(col_expires_at, expires_at, false);
	set(col_lease_expires_at, 0, true);
	set(col_holder_pid, 0, true);
	set(col_holder_started_at, 0, true);
	set(col_claim_token, 0, true);
	if (end.set_result)
		set(col_result, end.result, end.result == 0);
	if (end.clear_last_error)
		set(col_last_error, 0, true);
	if (end.release) {
		int32 base = DatumGetInt32(slot_getattr(c.holder, col_attempt_base, &isnull));
		set(col_attempt_base, Int32GetDatum(base + 1), false);
	}
	bool should_free;
	HeapTuple current = ExecFetchSlotHeapTuple(c.holder, false, &should_free);
	HeapTuple row =
	    heap_modify_tuple_by_cols(current, RelationGetDescr(c.rel), n, cols, values, nulls);
	if (should_free)
		heap_freetuple(current);
	return row;
}

// Gives the new version `row` (at row->t_self) the index entries that
// `entries` asks for, as ExecUpdate does.
void index_new_version(Claims &c, HeapTuple row, compat::IndexEntries entries)
{
	if (entries == compat::IndexEntries::none)
		return;
	prepare_insertion(c);
	ExecStoreHeapTuple(row, c.updated, false);
	open_indexes_for(c, c.updated);
	// update = false: true only hints the index AM that the key did not
	// change (bottom-up deletion), and reads the range table's updated
	// columns, which this executor state has not.
	list_free(compat::ExecInsertIndexTuples(c.rri, c.updated, c.estate, false, false, NULL, NIL,
	                                        entries == compat::IndexEntries::summarizing));
	ExecClearTuple(c.updated);
	ResetPerTupleExprContext(c.estate);
}

} // namespace

void check_record_scope(const char *fn, text *scope)
{
	if (scope == NULL)
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: scope must not be null", fn));
	size_t scope_len = VARSIZE_ANY_EXHDR(scope);
	report_key_check(fn, check_record_key(scope_len, 1), scope_len, 1);
}

RecordRef record_ref(const char *fn, text *scope, text *key)
{
	check_record_scope(fn, scope);
	if (key == NULL)
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: key must not be null", fn));
	size_t scope_len = VARSIZE_ANY_EXHDR(scope);
	size_t key_len = VARSIZE_ANY_EXHDR(key);
	report_key_check(fn, check_record_key(scope_len, key_len), scope_len, key_len);

	bytea *id = static_cast<bytea *>(palloc(VARHDRSZ + max_key_id_bytes));
	size_t id_len = record_key_id(VARDATA_ANY(scope), scope_len, VARDATA_ANY(key), key_len,
	                              reinterpret_cast<uint8_t *>(VARDATA(id)));
	SET_VARSIZE(id, VARHDRSZ + id_len);
	return RecordRef{scope, key, id, false, 0};
}

bool records_insert(const RecordRef &ref, const NewRecord &record)
{
	Claims c(extension_objects());
	bool inserted = insert_record(c, ref, record) == Found::inserted;
	close_claims(c);
	return inserted;
}

bool records_end_claim(const RecordRef &ref, const pg_uuid_t *token, const ClaimEnd &end)
{
	if (records_distributed())
		return routed_end_claim(ref, token, end);
	Claims c(extension_objects());
	open_table(c);
	if (!records_layout_as_installed(RelationGetDescr(c.rel), *c.loc))
		ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		        errmsg("%s is not as pg_idem made it", c.loc->records_name),
		        errdetail("pg_idem writes its records below SQL, by column number."),
		        errhint("Run ALTER EXTENSION pg_idem UPDATE, or undo the change to the table."));
	bool ended = false;
	for (int round = 0;; round++) {
		if (round == max_rounds)
			elog(ERROR, "pg_idem: could not settle the state of a key after %d rounds", max_rounds);
		// The statement's view, as an UPDATE would take it: this
		// transaction's earlier changes included.
		CommandCounterIncrement();
		PushActiveSnapshot(GetTransactionSnapshot());
		UpdateActiveSnapshotCommandId();
		bool held = find_visible(c, ref, GetActiveSnapshot()) && held_by(c, token);
		TM_Result result = TM_Ok;
		if (held) {
			HeapTuple row = ended_record(c, end);
			ItemPointerData old = c.holder->tts_tid;
			TM_FailureData failure;
			LockTupleMode lockmode;
			compat::IndexEntries entries;
			result = compat::heap_update(c.rel, &old, row, GetCurrentCommandId(true),
			                             InvalidSnapshot, true, &failure, &lockmode, &entries);
			switch (result) {
			case TM_Ok:
				index_new_version(c, row, entries);
				ended = true;
				break;
			case TM_Updated:
			case TM_Deleted:
				// Changed (or purged) by a transaction that committed:
				// READ COMMITTED reads the record again, as UPDATE's
				// recheck would; the others fail as UPDATE does.
				if (IsolationUsesXactSnapshot())
					ereport(ERROR, errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					        errmsg("could not serialize access due to concurrent update"));
				break;
			default:
				elog(ERROR, "pg_idem: unexpected outcome of a claim's update: %d", int(result));
			}
			heap_freetuple(row);
		}
		ExecClearTuple(c.holder);
		PopActiveSnapshot();
		if (!held || result == TM_Ok)
			break;
		CHECK_FOR_INTERRUPTS();
	}
	close_claims(c);
	if (ended) {
		CommandCounterIncrement();
		cache_invalidate(ref.id);
	}
	return ended;
}

void records_offer_to_cache(const RecordRef &ref, TimestampTz now, uint64 generation)
{
	if (!cache_usable())
		return;
	const ExtensionObjects &loc = extension_objects();
	Relation rel = table_open(loc.records, RowExclusiveLock);
	Relation pkey = index_open(loc.records_pkey, RowExclusiveLock);
	TupleTableSlot *holder = table_slot_create(rel, NULL);
	// The caller holds the row lock: the dirty lookup sees its own lock as
	// no obstacle and never waits here.
	if (find_holder(rel, pkey, ref, holder) &&
	    classify_holder(loc, rel, holder, ref, now) == Found::live)
		offer_to_cache(rel, holder, ref, generation);
	ExecDropSingleTupleTableSlot(holder);
	index_close(pkey, NoLock);
	table_close(rel, NoLock);
}

bool records_try_insert(const RecordRef &ref, TimestampTz now, TimestampTz expires_at,
                        CacheAnswer *cache)
{
	if (records_distributed()) {
		*cache = CacheAnswer::unused;
		return routed_try_insert(ref, now, expires_at);
	}
	Claims c(extension_objects());
	bool first = try_claim(c, ref, now, expires_at, cache);
	close_claims(c);
	return first;
}

void records_try_insert_many(const RecordRef *refs, int n, TimestampTz now, TimestampTz expires_at,
                             bool *first)
{
	if (records_distributed()) {
		// One routed statement per key, each to its own shard.
		for (int i = 0; i < n; i++) {
			CHECK_FOR_INTERRUPTS();
			first[i] = routed_try_insert(refs[i], now, expires_at);
		}
		return;
	}
	Claims c(extension_objects());
	c.batch = true;
	// What one key's lookups and insertion allocate is freed before the
	// next: a batch's memory does not grow with its size.
	MemoryContext per_key =
	    AllocSetContextCreate(CurrentMemoryContext, "pg_idem batch key", ALLOCSET_DEFAULT_SIZES);
	for (int i = 0; i < n; i++) {
		CHECK_FOR_INTERRUPTS();
		MemoryContext outer = MemoryContextSwitchTo(per_key);
		CacheAnswer unused;
		first[i] = try_claim(c, refs[i], now, expires_at, &unused);
		MemoryContextSwitchTo(outer);
		MemoryContextReset(per_key);
	}
	MemoryContextDelete(per_key);
	make_visible(c);
	close_claims(c);
}

} // namespace idem
