// idem_advance, idem_position and idem_reset_stream: dedup by stream
// position, without a record per message (src/core/replay_window.hpp has
// the window and its rules).
//
// One row of idem_streams per (stream, part). idem_advance works below SQL
// in the common case, as an UPDATE would but without building an executor:
//   1. look the part up in the primary key with the statement's snapshot
//      (after a CommandCounterIncrement, so that earlier calls of the same
//      statement are seen, as SPI does for every statement);
//   2. run the window's step on that version; a rejection writes nothing;
//   3. heap_update the row with the new window (HOT: no indexed column
//      changes; otherwise the primary key gets the new version's entry,
//      which is why a table with any other index is refused:
//      check_streams_as_installed).
// heap_update waits for a concurrent transaction that updates the same
// part. If that one committed (TM_Updated), READ COMMITTED starts again at 1
// with a new snapshot, which sees its window, so two transactions can never
// both accept one position; REPEATABLE READ and SERIALIZABLE fail with 40001
// there, as UPDATE does. A rejection needs no wait: windows only gain
// positions, so a position the committed window holds stays held.
//
// A part never seen is created with INSERT ... ON CONFLICT DO NOTHING (SPI:
// it happens once per part); if another transaction created it first (the
// INSERT waits for that one), the loop starts again and finds it.
extern "C" {
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_type_d.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

#include "core/replay_window.hpp"
#include "pg/compat.hpp"
#include "pg/extension_objects.hpp"
#include "pg/as_owner.hpp"
#include "pg/batches.hpp"
#include "pg/guard.hpp"
#include "pg/scopes/scope_grants.hpp"
#include "pg/plan_cache.hpp"

namespace
{

// The version, high-water mark and window size in front of the bitmap, in
// replay_window.hpp's serialization.
constexpr size_t window_header_bytes = 11;

struct StreamPart {
	text *stream;
	int32 part;
};

StreamPart stream_part_args(const char *fn, FunctionCallInfo fcinfo)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: stream must not be null", fn));
	if (PG_ARGISNULL(1))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: part must not be null", fn));
	StreamPart sp = {PG_GETARG_TEXT_PP(0), PG_GETARG_INT32(1)};
	if (VARSIZE_ANY_EXHDR(sp.stream) == 0)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: stream must not be empty", fn));
	if (sp.part < 0)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: part must not be negative", fn));
	return sp;
}

void check_window(const char *fn, FunctionCallInfo fcinfo, int window_arg)
{
	if (PG_ARGISNULL(window_arg))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: window must not be null", fn));
	int32 window = PG_GETARG_INT32(window_arg);
	if (window < 0 || window > idem::replay_window_max)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: window must be between 0 and %d", fn, idem::replay_window_max),
		        errdetail("The window is how many positions below the highest one are "
		                  "remembered; it costs one bit each."));
}

void check_position_and_window(const char *fn, FunctionCallInfo fcinfo, int position_arg)
{
	if (PG_ARGISNULL(position_arg))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: position must not be null", fn));
	if (PG_ARGISNULL(position_arg + 1))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: window must not be null", fn));
	if (PG_GETARG_INT64(position_arg) < 0)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: position must not be negative", fn));
	check_window(fn, fcinfo, position_arg + 1);
}

bytea *window_bytea(const idem::ReplayWindow &window)
{
	size_t size = window.serialized_size();
	bytea *out = static_cast<bytea *>(palloc(VARHDRSZ + size));
	SET_VARSIZE(out, VARHDRSZ + size);
	window.serialize(reinterpret_cast<uint8_t *>(VARDATA(out)));
	return out;
}

// The window stored in idem_streams.window_state.
void window_from_bytea(const char *fn, bytea *state, idem::ReplayWindow *window)
{
	if (!window->deserialize(reinterpret_cast<const uint8_t *>(VARDATA_ANY(state)),
	                         VARSIZE_ANY_EXHDR(state)))
		ereport(ERROR, errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
		        errmsg("%s: window_state is not a pg_idem stream window", fn));
}

// Where idem_streams is, or an error if this database is still on pg_idem
// 0.1's SQL.
const idem::ExtensionObjects &streams_objects(const char *fn)
{
	const idem::ExtensionObjects &objects = idem::extension_objects();
	if (!OidIsValid(objects.streams) || !OidIsValid(objects.streams_pkey))
		ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		        errmsg("%s: this database has pg_idem 0.1's SQL objects, without "
		               "idem_streams",
		               fn),
		        errhint("Run ALTER EXTENSION pg_idem UPDATE."));
	return objects;
}

// The statement for `signature`, prepared the first time from `sql_format`
// with its %s replaced by idem_streams' qualified name.
idem::Statement *streams_statement(const char *fn, const char *signature, const char *sql_format,
                                   int nargs, Oid *types)
{
	const idem::ExtensionObjects &objects = streams_objects(fn);
	return idem::statement_for(signature, objects.streams, objects.streams_name, sql_format, nargs,
	                           types);
}

// Column numbers of idem_streams, in the order src/pg_idem--0.1--0.2.sql creates them.
enum StreamColumn : AttrNumber {
	col_stream = 1,
	col_part = 2,
	col_position = 3,
	col_window_size = 4,
	col_window_state = 5,
	col_updated_at = 6,
	stream_columns = 6,
};

// idem_advance writes idem_streams below SQL (the header comment), which
// reads its six columns by number and gives only the primary key an entry
// for a new version: so the table must keep those columns where the install
// script made them (others may follow) and no other index, which would be
// left without entries.
void check_streams_as_installed(const char *fn, Relation rel, Oid pkey)
{
	static const idem::InstalledColumn columns[stream_columns] = {
	    {"stream", TEXTOID},      {"part", INT4OID},          {"position", INT8OID},
	    {"window_size", INT4OID}, {"window_state", BYTEAOID}, {"updated_at", TIMESTAMPTZOID}};
	bool as_installed =
	    idem::leading_columns_as_installed(RelationGetDescr(rel), columns, stream_columns);
	if (as_installed) {
		List *indexes = RelationGetIndexList(rel);
		as_installed = list_length(indexes) == 1 && linitial_oid(indexes) == pkey;
		list_free(indexes);
	}
	if (!as_installed)
		ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		        errmsg("%s: idem_streams is not as pg_idem made it", fn),
		        errdetail("idem_advance writes its rows below SQL, so the table must "
		                  "keep its first six columns, and its primary key as its only "
		                  "index."),
		        errhint("Undo the change to idem_streams."));
}

enum class Step { accepted, rejected, absent, retry };

// The part's version that `snapshot` sees, into `slot`.
bool find_part(Relation rel, Relation pkey, Snapshot snapshot, const StreamPart &sp,
               TupleTableSlot *slot)
{
	ScanKeyData keys[2];
	ScanKeyEntryInitialize(&keys[0], 0, col_stream, BTEqualStrategyNumber, InvalidOid,
	                       pkey->rd_indcollation[0], F_TEXTEQ, PointerGetDatum(sp.stream));
	ScanKeyEntryInitialize(&keys[1], 0, col_part, BTEqualStrategyNumber, InvalidOid, InvalidOid,
	                       F_INT4EQ, Int32GetDatum(sp.part));
	IndexScanDesc scan = idem::compat::index_beginscan(rel, pkey, snapshot, 2, 0);
	index_rescan(scan, keys, 2, NULL, 0);
	bool found = index_getnext_slot(scan, ForwardScanDirection, slot);
	index_endscan(scan);
	return found;
}

// The positions of one call (one for idem_advance), and which of them the
// window accepted.
struct Positions {
	const int64 *position;
	bool *accepted;
	int n;
};

// Runs the window's step for each position, in order; whether any was
// accepted.
bool advance_all(idem::ReplayWindow &state, const Positions &batch, int32 window)
{
	bool any = false;
	for (int i = 0; i < batch.n; i++) {
		batch.accepted[i] = state.advance(batch.position[i], window);
		any |= batch.accepted[i];
	}
	return any;
}

// Steps 1 to 3 of the header comment, once.
Step advance_once(Relation rel, Relation pkey, const StreamPart &sp, const Positions &batch,
                  int32 window)
{
	CommandCounterIncrement();
	PushActiveSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	Step step = Step::absent;
	if (find_part(rel, pkey, GetActiveSnapshot(), sp, slot)) {
		slot_getallattrs(slot);
		idem::ReplayWindow state;
		window_from_bytea("idem_advance", DatumGetByteaPP(slot->tts_values[col_window_state - 1]),
		                  &state);
		if (!advance_all(state, batch, window)) {
			step = Step::rejected;
		} else {
			check_streams_as_installed("idem_advance", rel, RelationGetRelid(pkey));
			// The new version: the row with these four columns replaced
			// (any column an operator added keeps its value).
			int changed[] = {col_position, col_window_size, col_window_state, col_updated_at};
			Datum changes[] = {Int64GetDatum(state.high()), Int32GetDatum(window),
			                   PointerGetDatum(window_bytea(state)),
			                   TimestampTzGetDatum(GetCurrentTransactionStartTimestamp())};
			bool no_nulls[] = {false, false, false, false};
			bool should_free;
			HeapTuple current = ExecFetchSlotHeapTuple(slot, false, &should_free);
			HeapTuple row = heap_modify_tuple_by_cols(current, RelationGetDescr(rel), 4, changed,
			                                          changes, no_nulls);
			if (should_free)
				heap_freetuple(current);
			// The primary key's columns, (stream, part), lead the row.
			Datum key[] = {slot->tts_values[col_stream - 1], slot->tts_values[col_part - 1]};
			bool key_nulls[] = {false, false};
			TM_FailureData failure;
			LockTupleMode lockmode;
			ItemPointerData old = slot->tts_tid;
			switch (idem::compat::heap_update(rel, &old, row, GetCurrentCommandId(true),
			                                  InvalidSnapshot, true, &failure, &lockmode)) {
			case TM_Ok:
				if (!HeapTupleIsHeapOnly(row))
					index_insert(pkey, key, key_nulls, &row->t_self, rel, UNIQUE_CHECK_YES, true,
					             BuildIndexInfo(pkey));
				step = Step::accepted;
				break;
			case TM_Updated:
			case TM_Deleted:
				if (IsolationUsesXactSnapshot())
					ereport(ERROR, errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					        errmsg("could not serialize access due to concurrent "
					               "update"));
				step = Step::retry;
				break;
			default:
				elog(ERROR, "pg_idem: unexpected outcome of a stream position update");
			}
			heap_freetuple(row);
		}
	}
	ExecDropSingleTupleTableSlot(slot);
	PopActiveSnapshot();
	return step;
}

// A part's first positions. False if the part exists already.
bool advance_new(const StreamPart &sp, const Positions &batch, int32 window)
{
	idem::ReplayWindow first;
	advance_all(first, batch, window);
	Oid types[] = {TEXTOID, INT4OID, INT8OID, INT4OID, BYTEAOID};
	idem::Statement *st = streams_statement(
	    "idem_advance", "streams:create",
	    "INSERT INTO %s (stream, part, position, window_size, window_state, updated_at) "
	    "VALUES ($1, $2, $3, $4, $5, pg_catalog.now()) ON CONFLICT DO NOTHING",
	    5, types);
	Datum values[] = {PointerGetDatum(sp.stream), Int32GetDatum(sp.part),
	                  Int64GetDatum(first.high()), Int32GetDatum(window),
	                  PointerGetDatum(window_bytea(first))};
	if (SPI_execute_plan(st->plan, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "pg_idem: stream insert failed");
	return SPI_processed == 1;
}

// Advances the part by the batch's positions, in order, in one update of
// its row (the header comment); batch.accepted says which were new.
void advance(const char *fn, const StreamPart &sp, const Positions &batch, int32 window)
{
	// What a plain UPDATE would check before writing.
	PreventCommandIfReadOnly(fn);
	PreventCommandDuringRecovery(fn);
	const idem::ExtensionObjects &objects = streams_objects(fn);
	Relation rel = table_open(objects.streams, RowExclusiveLock);
	Relation pkey = index_open(objects.streams_pkey, RowExclusiveLock);
	for (;;) {
		Step step = advance_once(rel, pkey, sp, batch, window);
		if (step == Step::absent) {
			if (SPI_connect() != SPI_OK_CONNECT)
				elog(ERROR, "pg_idem: SPI_connect failed");
			bool created = advance_new(sp, batch, window);
			SPI_finish();
			if (!created)
				continue;
			step = Step::accepted;
		}
		if (step == Step::retry) {
			CHECK_FOR_INTERRUPTS();
			continue;
		}
		break;
	}
	index_close(pkey, NoLock);
	table_close(rel, NoLock);
}

// idem_advance_many's positions, checked before anything is written.
Positions batch_positions(const char *fn, ArrayType *positions)
{
	Datum *elems;
	bool *nulls;
	int n = idem::batch_elements(fn, "positions", positions, INT8OID, &elems, &nulls);
	int64 *position = static_cast<int64 *>(palloc(sizeof(int64) * n));
	for (int i = 0; i < n; i++) {
		if (nulls[i])
			idem::batch_null_element(fn, "positions", i);
		position[i] = DatumGetInt64(elems[i]);
		if (position[i] < 0)
			ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			        errmsg("%s: position must not be negative", fn),
			        errdetail("Element %d of the batch is " INT64_FORMAT ".", i + 1, position[i]));
	}
	return Positions{position, static_cast<bool *>(palloc(sizeof(bool) * n)), n};
}

} // namespace

// idem_advance(stream, part, position, window) RETURNS boolean
IDEM_SQL_FUNCTION_AS_OWNER(idem_advance)
{
	static const char fn[] = "idem_advance";
	StreamPart sp = stream_part_args(fn, fcinfo);
	idem::check_scope(fn, caller, sp.stream, "stream");
	check_position_and_window(fn, fcinfo, 2);
	int64 position = PG_GETARG_INT64(2);
	bool accepted;
	advance(fn, sp, Positions{&position, &accepted, 1}, PG_GETARG_INT32(3));
	PG_RETURN_BOOL(accepted);
}

// idem_advance_many(stream, part, positions, window) RETURNS SETOF integer:
// idem_advance for each of the positions, in order, with one update of the
// part's row; returns the indexes (1-based) of those that were new.
IDEM_SQL_FUNCTION_AS_OWNER(idem_advance_many)
{
	static const char fn[] = "idem_advance_many";
	StreamPart sp = stream_part_args(fn, fcinfo);
	idem::check_scope(fn, caller, sp.stream, "stream");
	if (PG_ARGISNULL(2))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: positions must not be null", fn));
	Positions batch = batch_positions(fn, PG_GETARG_ARRAYTYPE_P(2));
	check_window(fn, fcinfo, 3);
	// Before anything is written: a call where no set is accepted is an
	// error here.
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	advance(fn, sp, batch, PG_GETARG_INT32(3));
	ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
	for (int i = 0; i < batch.n; i++) {
		if (!batch.accepted[i])
			continue;
		Datum index = Int32GetDatum(i + 1);
		bool isnull = false;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &index, &isnull);
	}
	return (Datum)0;
}

// idem_position(stream, part) RETURNS bigint: NULL for a part never advanced.
IDEM_SQL_FUNCTION_AS_OWNER(idem_position)
{
	static const char fn[] = "idem_position";
	StreamPart sp = stream_part_args(fn, fcinfo);
	idem::check_scope(fn, caller, sp.stream, "stream");
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	Oid types[] = {TEXTOID, INT4OID};
	idem::Statement *st = streams_statement(
	    fn, "streams:position",
	    "SELECT position FROM %s "
	    "WHERE stream OPERATOR(pg_catalog.=) $1 AND part OPERATOR(pg_catalog.=) $2",
	    2, types);
	Datum args[] = {PointerGetDatum(sp.stream), Int32GetDatum(sp.part)};
	if (SPI_execute_plan(st->plan, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "pg_idem: stream lookup failed");
	bool isnull = true;
	Datum position = 0;
	if (SPI_processed == 1)
		position = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	SPI_finish();
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(position); // int8 is passed by value
}

// idem_reset_stream(stream, part DEFAULT NULL) RETURNS bigint: the parts
// forgotten.
IDEM_SQL_FUNCTION_AS_OWNER(idem_reset_stream)
{
	static const char fn[] = "idem_reset_stream";
	if (PG_ARGISNULL(0))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: stream must not be null", fn));
	idem::check_scope(fn, caller, PG_GETARG_TEXT_PP(0), "stream");
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	Oid types[] = {TEXTOID, INT4OID};
	idem::Statement *st = streams_statement(fn, "streams:reset",
	                                        "DELETE FROM %s WHERE stream OPERATOR(pg_catalog.=) $1 "
	                                        "AND ($2 IS NULL OR part OPERATOR(pg_catalog.=) $2)",
	                                        2, types);
	Datum args[] = {PG_GETARG_DATUM(0), PG_ARGISNULL(1) ? 0 : PG_GETARG_DATUM(1)};
	char nulls[] = {' ', PG_ARGISNULL(1) ? 'n' : ' '};
	if (SPI_execute_plan(st->plan, args, nulls, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "pg_idem: stream reset failed");
	int64 forgotten = int64(SPI_processed);
	SPI_finish();
	PG_RETURN_INT64(forgotten);
}

// idem_stream_window_seen(window_state) RETURNS integer, for the view.
IDEM_SQL_FUNCTION(idem_stream_window_seen)
{
	bytea *state = PG_GETARG_BYTEA_PP(0);
	idem::ReplayWindow window;
	window_from_bytea("idem_stream_window_seen", state, &window);
	// The serialized bitmap (replay_window.hpp) holds exactly the window's
	// bits, the unused ones zero.
	const uint8 *bytes = reinterpret_cast<const uint8 *>(VARDATA_ANY(state));
	int32 seen = 0;
	for (size_t i = window_header_bytes; i < VARSIZE_ANY_EXHDR(state); i++)
		seen += __builtin_popcount(bytes[i]);
	PG_RETURN_INT32(seen);
}
