// idem_try_insert_row(target, row): the unique-constraint pattern on the
// caller's own table (points_log(order_id UNIQUE), say).
//
// It runs INSERT INTO target (columns of row) VALUES (...) ON CONFLICT DO
// NOTHING as the caller, prepared once per (table, set of columns) and kept
// for the life of the backend. ON CONFLICT without a target covers every
// unique index, primary key and exclusion constraint; a concurrent insert
// of the same key is waited for, exactly as with the plain statement.
extern "C" {
#include "postgres.h"

#include "access/table.h"
#include "executor/spi.h"
#include "catalog/pg_type_d.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/rel.h"
}

#include "pg/guard.hpp"
#include "pg/plan_cache.hpp"
#include "pg/user_tables/built_objects.hpp"
#include "pg/user_tables/user_table.hpp"

namespace
{

struct InsertInfo {
	int ncolumns;
	idem::TargetColumn *columns; // in the order of the row's keys
};

void build_insert(const char *fn, idem::Statement *st, Oid relid, const idem::JsonFields &row)
{
	Relation rel = table_open(relid, AccessShareLock);
	InsertInfo *info = static_cast<InsertInfo *>(MemoryContextAlloc(st->context, sizeof *info));
	info->ncolumns = row.count;
	info->columns = static_cast<idem::TargetColumn *>(
	    MemoryContextAlloc(st->context, sizeof(idem::TargetColumn) * (row.count + 1)));
	Oid *types = static_cast<Oid *>(palloc(sizeof(Oid) * (row.count + 1)));

	StringInfoData sql;
	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s ", idem::qualified_table_name(rel));
	if (row.count == 0) {
		appendStringInfoString(&sql, "DEFAULT VALUES");
	} else {
		StringInfoData params;
		initStringInfo(&params);
		appendStringInfoChar(&sql, '(');
		for (int i = 0; i < row.count; i++) {
			idem::describe_column(fn, rel, row.names[i], &info->columns[i], st->context);
			types[i] = info->columns[i].type;
			appendStringInfo(&sql, "%s%s", i ? ", " : "", quote_identifier(row.names[i]));
			appendStringInfo(&params, "%s$%d", i ? ", " : "", i + 1);
		}
		appendStringInfo(&sql, ") VALUES (%s)", params.data);
	}
	appendStringInfoString(&sql, " ON CONFLICT DO NOTHING");
	table_close(rel, NoLock);

	st->info = info;
	idem::statement_prepare(st, sql.data, row.count, types);
}

// The insert itself, whichever way the row was given.
Datum try_insert_row(Oid relid, const idem::JsonFields &row)
{
	static const char fn[] = "idem_try_insert_row";
	idem::lock_target_table(fn, relid);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");

	StringInfoData sig;
	initStringInfo(&sig);
	idem::append_signature(&sig, "insert_row", relid, row);
	idem::Statement *st = idem::statement_lookup(sig.data, sig.len, relid);
	if (!idem::statement_ready(st))
		build_insert(fn, st, relid, row);
	const InsertInfo *info = static_cast<const InsertInfo *>(st->info);

	Datum *values = static_cast<Datum *>(palloc(sizeof(Datum) * (row.count + 1)));
	char *nulls = static_cast<char *>(palloc(row.count + 1));
	for (int i = 0; i < info->ncolumns; i++) {
		bool isnull;
		values[i] = idem::field_to_column(fn, relid, &info->columns[i], row, i, &isnull);
		nulls[i] = isnull ? 'n' : ' ';
	}

	int rc = SPI_execute_plan(st->plan, values, nulls, false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "pg_idem: unexpected SPI result %s", SPI_result_code_string(rc));
	bool inserted = SPI_processed > 0;
	SPI_finish();
	return BoolGetDatum(inserted);
}

} // namespace

IDEM_SQL_FUNCTION(idem_try_insert_row)
{
	static const char fn[] = "idem_try_insert_row";
	if (PG_ARGISNULL(0))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: target must not be null", fn));
	if (PG_ARGISNULL(1))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: row must not be null", fn));
	return try_insert_row(PG_GETARG_OID(0),
	                      idem::json_object_fields(fn, "row", PG_GETARG_JSONB_P(1)));
}

// idem_try_insert_row_fields(VARIADIC "any"): what the support function
// below makes of a call whose row is a jsonb_build_object call
// (built_objects.hpp): the target, then the row's fields.
IDEM_SQL_FUNCTION(idem_try_insert_row_fields)
{
	static const char fn[] = "idem_try_insert_row";
	static idem::OriginalFunction original = {InvalidOid, InvalidOid};
	static const Oid original_argtypes[] = {REGCLASSOID, JSONBOID};
	idem::check_original_execute(&original, fcinfo, fn, 2, original_argtypes);
	int next_arg = 1;
	idem::JsonFields row = idem::typed_fields(fn, fcinfo, &next_arg);
	if (!idem::argument_is(fcinfo, 0, REGCLASSOID) || next_arg != PG_NARGS())
		idem::malformed_fields(fn);
	if (PG_ARGISNULL(0))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: target must not be null", fn));
	return try_insert_row(PG_GETARG_OID(0), row);
}

// The planner support function of idem_try_insert_row: rewrites a call
// whose row is a jsonb_build_object call that can be rewritten into one of
// idem_try_insert_row_fields.
IDEM_SQL_FUNCTION(idem_try_insert_row_support)
{
	PG_RETURN_POINTER(idem::rewrite_built_objects(reinterpret_cast<Node *>(PG_GETARG_POINTER(0)),
	                                              "idem_try_insert_row_fields", 2, {1}));
}
