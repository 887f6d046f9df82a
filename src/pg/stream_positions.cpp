// idem_advance, idem_position and idem_reset_stream: dedup by stream
// position, without a record per message (src/core/replay_window.hpp has
// the window and its rules).
//
// One row of idem_streams per (stream, part). idem_advance is one UPDATE in
// the common case:
//   UPDATE idem_streams SET window_state = idem_stream_step(window_state, $3, $4), ...
//   WHERE stream = $1 AND part = $2
//     AND idem_stream_step(window_state, $3, $4) IS NOT NULL
// The step runs inside the UPDATE so that concurrency is PostgreSQL's own:
// a second advance of the same part waits for the first one's transaction
// and, in READ COMMITTED, re-evaluates the step on the row's latest version
// (EvalPlanQual), so two transactions can never both accept one position;
// in REPEATABLE READ and SERIALIZABLE it fails with 40001 instead, as any
// UPDATE does. No row updated means a rejection or a part never seen: then
// an INSERT ... ON CONFLICT DO NOTHING creates the part, and if another
// transaction created it first (the INSERT waits for that one), the UPDATE
// runs once more and its answer is final.
extern "C" {
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
}

#include "core/replay_window.hpp"
#include "pg/extension_objects.hpp"
#include "pg/guard.hpp"
#include "pg/plan_cache.hpp"

namespace {

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
	int32 window = PG_GETARG_INT32(position_arg + 1);
	if (window < 0 || window > idem::replay_window_max)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			errmsg("%s: window must be between 0 and %d", fn, idem::replay_window_max),
			errdetail("The window is how many positions below the highest one are "
				  "remembered; it costs one bit each."));
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

// The statement for `signature`, prepared the first time from `sql_format`
// with its %s replaced by idem_streams' qualified name.
idem::Statement *streams_statement(const char *signature, const char *sql_format, int nargs,
				   Oid *types)
{
	const idem::ExtensionObjects &objects = idem::extension_objects();
	return idem::statement_for(signature, objects.streams, objects.streams_name, sql_format,
				   nargs, types);
}

// The UPDATE of the header comment: true if it accepted the position.
bool advance_existing(Datum *args)
{
	const idem::ExtensionObjects &objects = idem::extension_objects();
	static const char signature[] = "streams:advance";
	idem::Statement *st = idem::statement_lookup(signature, sizeof signature, objects.streams);
	if (!idem::statement_ready(st)) {
		Oid types[] = {TEXTOID, INT4OID, INT8OID, INT4OID};
		idem::statement_prepare(
		    st,
		    psprintf("UPDATE %s SET "
			     "window_state = %s.idem_stream_step(window_state, $3, $4), "
			     "position = pg_catalog.int8larger(position, $3), window_size = $4, "
			     "updated_at = pg_catalog.now() "
			     "WHERE stream OPERATOR(pg_catalog.=) $1 "
			     "AND part OPERATOR(pg_catalog.=) $2 "
			     "AND %s.idem_stream_step(window_state, $3, $4) IS NOT NULL",
			     objects.streams_name, objects.schema_name, objects.schema_name),
		    4, types);
	}
	if (SPI_execute_plan(st->plan, args, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "pg_idem: stream update failed");
	return SPI_processed == 1;
}

// A part's first position. False if the part exists already.
bool advance_new(Datum *args, int64 position, int32 window)
{
	idem::ReplayWindow first;
	first.advance(position, window);
	Oid types[] = {TEXTOID, INT4OID, INT8OID, INT4OID, BYTEAOID};
	idem::Statement *st = streams_statement(
	    "streams:create",
	    "INSERT INTO %s (stream, part, position, window_size, window_state, updated_at) "
	    "VALUES ($1, $2, $3, $4, $5, pg_catalog.now()) ON CONFLICT DO NOTHING",
	    5, types);
	Datum values[] = {args[0], args[1], args[2], args[3], PointerGetDatum(window_bytea(first))};
	if (SPI_execute_plan(st->plan, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "pg_idem: stream insert failed");
	return SPI_processed == 1;
}

} // namespace

// idem_advance(stream, part, position, window) RETURNS boolean
IDEM_SQL_FUNCTION(idem_advance)
{
	static const char fn[] = "idem_advance";
	StreamPart sp = stream_part_args(fn, fcinfo);
	check_position_and_window(fn, fcinfo, 2);
	int64 position = PG_GETARG_INT64(2);
	int32 window = PG_GETARG_INT32(3);
	Datum args[] = {PointerGetDatum(sp.stream), Int32GetDatum(sp.part), Int64GetDatum(position),
			Int32GetDatum(window)};

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	bool accepted = advance_existing(args) || advance_new(args, position, window) ||
			advance_existing(args);
	SPI_finish();
	PG_RETURN_BOOL(accepted);
}

// idem_position(stream, part) RETURNS bigint: NULL for a part never advanced.
IDEM_SQL_FUNCTION(idem_position)
{
	static const char fn[] = "idem_position";
	StreamPart sp = stream_part_args(fn, fcinfo);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	Oid types[] = {TEXTOID, INT4OID};
	idem::Statement *st = streams_statement(
	    "streams:position",
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
IDEM_SQL_FUNCTION(idem_reset_stream)
{
	static const char fn[] = "idem_reset_stream";
	if (PG_ARGISNULL(0))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			errmsg("%s: stream must not be null", fn));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	Oid types[] = {TEXTOID, INT4OID};
	idem::Statement *st = streams_statement(
	    "streams:reset",
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

// idem_stream_step(window_state, position, window) RETURNS bytea: the window
// after accepting position, NULL to reject it. Strict.
IDEM_SQL_FUNCTION(idem_stream_step)
{
	static const char fn[] = "idem_stream_step";
	check_position_and_window(fn, fcinfo, 1);
	idem::ReplayWindow window;
	window_from_bytea(fn, PG_GETARG_BYTEA_PP(0), &window);
	if (!window.advance(PG_GETARG_INT64(1), PG_GETARG_INT32(2)))
		PG_RETURN_NULL();
	PG_RETURN_BYTEA_P(window_bytea(window));
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
