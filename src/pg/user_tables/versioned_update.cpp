// idem_versioned_update(target, key, expected_version, changes, version_column):
// the optimistic-lock pattern on the caller's own table.
//
//   UPDATE [ONLY] target SET <changes>, version = version + 1
//   WHERE <key columns> = <key values> AND version = expected
//
// A replay finds the version already moved on and matches nothing. The key
// must cover a unique index or the primary key that `=` on its columns
// enforces (immediate, not partial, no expressions, each column's collation
// and equality), and ONLY leaves inheritance children out, so it names at
// most one row. The new version is computed from the row, so that an
// expected version at the type's limit is an error only for a row that
// matches.
//
// A miss (only a miss pays for it) reads the row's version (through the
// unique index, where that reads what SQL would: version_probe.hpp); unless
// that shows a replay, it locks the row with SELECT ... FOR NO KEY UPDATE, which
// waits for a writer in flight, and reads the version again:
//   - no row (or the caller may not update it): NULL;
//   - a later version: false, a replay or a stale message;
//   - an earlier version: the message came before the one it builds on,
//     an error (55000) so that it is retried, never skipped;
//   - the expected version: the row got there after the update's snapshot
//     (a writer committed in between, or the row was inserted), so the
//     update runs once more, now that the row is ours: true if it applies,
//     NULL if it still does not (an UPDATE policy, or a BEFORE UPDATE
//     trigger that skips it; such a trigger, and statement-level UPDATE
//     triggers, fire twice).
// In REPEATABLE READ and SERIALIZABLE, a row changed after the snapshot
// makes the update or the lock fail with 40001.
//
// Equality on key columns uses each type's default btree equality operator,
// written as OPERATOR(schema.=) so that no operator planted earlier in the
// caller's search_path can be picked instead.
extern "C" {
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_index.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "nodes/bitmapset.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/typcache.h"
}

#include "pg/guard.hpp"
#include "pg/plan_cache.hpp"
#include "pg/user_tables/built_objects.hpp"
#include "pg/user_tables/version_probe.hpp"
#include "pg/user_tables/user_table.hpp"

#include <cstring>

namespace
{

struct UpdateInfo {
	int nchanges;
	idem::TargetColumn *changes;
	int nkeys;
	idem::TargetColumn *keys;
	const char *version_column;
	bool only;                // an ordinary table: ONLY, so that inheritance children are left out
	idem::VersionProbe probe; // the plain read of a miss, where it needs no SQL
};

// Does the index's uniqueness hold for `=` on its key column `keyno`: the
// table column's default equality is in the index column's operator
// family, under the table column's collation (or the index column has
// none)?
bool enforces_equality(Relation rel, Relation index, int keyno)
{
	Form_pg_attribute att =
	    TupleDescAttr(RelationGetDescr(rel), index->rd_index->indkey.values[keyno] - 1);
	TypeCacheEntry *tc = lookup_type_cache(att->atttypid, TYPECACHE_EQ_OPR);
	Oid collation = index->rd_indcollation[keyno];
	return OidIsValid(tc->eq_opr) && op_in_opfamily(tc->eq_opr, index->rd_opfamily[keyno]) &&
	       (!OidIsValid(collation) || collation == att->attcollation);
}

// A unique index whose key columns are all among the key columns and that
// makes `=` on them name at most one row (valid, immediate, not partial, no
// expressions, the columns' own equality and collation); InvalidOid if
// none.
Oid unique_index_covering(Relation rel, Bitmapset *key_attnums)
{
	List *indexes = RelationGetIndexList(rel);
	ListCell *lc;
	Oid covered = InvalidOid;
	foreach (lc, indexes) {
		Relation index = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = index->rd_index;
		bool usable = form->indisunique && form->indimmediate && form->indisvalid &&
		              form->indislive && RelationGetIndexPredicate(index) == NIL &&
		              RelationGetIndexExpressions(index) == NIL;
		for (int i = 0; usable && i < form->indnkeyatts; i++)
			usable = bms_is_member(form->indkey.values[i], key_attnums) &&
			         enforces_equality(rel, index, i);
		index_close(index, AccessShareLock);
		if (usable) {
			covered = lfirst_oid(lc);
			break;
		}
	}
	list_free(indexes);
	return covered;
}

// The operator's schema-qualified name, for OPERATOR(...).
char *qualified_operator(Oid opr)
{
	HeapTuple tuple = SearchSysCache1(OPEROID, ObjectIdGetDatum(opr));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for operator %u", opr);
	Form_pg_operator form = reinterpret_cast<Form_pg_operator>(GETSTRUCT(tuple));
	char *name = psprintf("%s.%s", quote_identifier(get_namespace_name(form->oprnamespace)),
	                      NameStr(form->oprname));
	ReleaseSysCache(tuple);
	return name;
}

// "col OPERATOR(schema.=) $n"
void append_key_condition(const char *fn, StringInfo sql, Relation rel,
                          const idem::TargetColumn *col, int param)
{
	TypeCacheEntry *tc = lookup_type_cache(col->type, TYPECACHE_EQ_OPR);
	if (!OidIsValid(tc->eq_opr))
		ereport(ERROR, errcode(ERRCODE_UNDEFINED_FUNCTION),
		        errmsg("%s: key column \"%s\" of relation \"%s\" has no equality operator", fn,
		               col->name, RelationGetRelationName(rel)));
	appendStringInfo(sql, "%s OPERATOR(%s) $%d", quote_identifier(col->name),
	                 qualified_operator(tc->eq_opr), param);
}

idem::TargetColumn *describe_all(const char *fn, Relation rel, const idem::JsonFields &fields,
                                 MemoryContext cxt)
{
	idem::TargetColumn *cols = static_cast<idem::TargetColumn *>(
	    MemoryContextAlloc(cxt, sizeof(idem::TargetColumn) * (fields.count + 1)));
	for (int i = 0; i < fields.count; i++)
		idem::describe_column(fn, rel, fields.names[i], &cols[i], cxt);
	return cols;
}

// Parameters: $1..$c the changes, $c+1 the expected version, then the keys.
void build_update(const char *fn, idem::Statement *st, Oid relid, const char *version_column,
                  const idem::JsonFields &key, const idem::JsonFields &changes)
{
	Relation rel = table_open(relid, AccessShareLock);
	const char *relname = RelationGetRelationName(rel);

	idem::TargetColumn version;
	idem::describe_column(fn, rel, version_column, &version, CurrentMemoryContext);
	if (version.type != INT2OID && version.type != INT4OID && version.type != INT8OID)
		ereport(ERROR, errcode(ERRCODE_DATATYPE_MISMATCH),
		        errmsg("%s: version column \"%s\" of relation \"%s\" must be smallint, "
		               "integer or bigint",
		               fn, version_column, relname),
		        errdetail("It is of type %s.", format_type_be(version.type)));

	UpdateInfo *info = static_cast<UpdateInfo *>(MemoryContextAlloc(st->context, sizeof *info));
	info->version_column = MemoryContextStrdup(st->context, version_column);
	info->only = rel->rd_rel->relkind == RELKIND_RELATION;
	info->nchanges = changes.count;
	info->changes = describe_all(fn, rel, changes, st->context);
	info->nkeys = key.count;
	info->keys = describe_all(fn, rel, key, st->context);

	int nargs = changes.count + 1 + key.count;
	Oid *types = static_cast<Oid *>(palloc(sizeof(Oid) * nargs));
	int version_param = changes.count + 1;
	types[version_param - 1] = INT8OID;

	StringInfoData sql;
	initStringInfo(&sql);
	appendStringInfo(&sql, "UPDATE %s%s SET ", info->only ? "ONLY " : "",
	                 idem::qualified_table_name(rel));
	for (int i = 0; i < changes.count; i++) {
		if (info->changes[i].attnum == version.attnum)
			ereport(
			    ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			    errmsg("%s: changes must not set the version column \"%s\"", fn, version_column),
			    errhint("The version is set to expected_version + 1 by the update "
			            "itself."));
		types[i] = info->changes[i].type;
		appendStringInfo(&sql, "%s = $%d, ", quote_identifier(info->changes[i].name), i + 1);
	}
	appendStringInfo(&sql, "%s = %s OPERATOR(pg_catalog.+) 1 WHERE ",
	                 quote_identifier(version_column), quote_identifier(version_column));

	Bitmapset *key_attnums = NULL;
	for (int i = 0; i < key.count; i++) {
		if (info->keys[i].attnum == version.attnum)
			ereport(
			    ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			    errmsg("%s: key must not include the version column \"%s\"", fn, version_column),
			    errhint("Pass the version as expected_version."));
		key_attnums = bms_add_member(key_attnums, info->keys[i].attnum);
		types[version_param + i] = info->keys[i].type;
		append_key_condition(fn, &sql, rel, &info->keys[i], version_param + 1 + i);
		appendStringInfoString(&sql, " AND ");
	}
	Oid index = unique_index_covering(rel, key_attnums);
	if (!OidIsValid(index))
		ereport(ERROR, errcode(ERRCODE_INVALID_COLUMN_REFERENCE),
		        errmsg("%s: key does not cover a unique index of relation \"%s\"", fn, relname),
		        errhint("Give every column of the primary key or of a unique index (not "
		                "deferrable, with the columns' own collation and equality), so "
		                "that the key names at most one row."));
	appendStringInfo(&sql, "%s OPERATOR(pg_catalog.=) $%d", quote_identifier(version_column),
	                 version_param);
	idem::describe_version_probe(rel, index, info->keys, key.count, version, &info->probe,
	                             st->context);
	table_close(rel, NoLock);

	st->info = info;
	idem::statement_prepare(st, sql.data, nargs, types);
}

// SELECT version FROM [ONLY] target WHERE <key columns> = $1.. [FOR NO KEY
// UPDATE]: the follow-up of a miss.
void build_version_read(const char *fn, idem::Statement *st, Oid relid, const UpdateInfo *update,
                        bool lock)
{
	Relation rel = table_open(relid, AccessShareLock);
	Oid *types = static_cast<Oid *>(palloc(sizeof(Oid) * (update->nkeys + 1)));
	StringInfoData sql;
	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT CAST(%s AS pg_catalog.int8) FROM %s%s WHERE ",
	                 quote_identifier(update->version_column), update->only ? "ONLY " : "",
	                 idem::qualified_table_name(rel));
	for (int i = 0; i < update->nkeys; i++) {
		types[i] = update->keys[i].type;
		if (i > 0)
			appendStringInfoString(&sql, " AND ");
		append_key_condition(fn, &sql, rel, &update->keys[i], i + 1);
	}
	if (lock)
		appendStringInfoString(&sql, " FOR NO KEY UPDATE");
	table_close(rel, NoLock);
	idem::statement_prepare(st, sql.data, update->nkeys, types);
}

[[noreturn]] void version_is_null(const char *fn, const UpdateInfo *update)
{
	ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
	        errmsg("%s: the version column \"%s\" of the row is null", fn, update->version_column),
	        errdetail("A row without a version cannot take a versioned update; nothing "
	                  "was changed."));
	pg_unreachable();
}

// The version of the row the key names (*exists false if none), read
// plainly or under a lock. `sig` is the update's signature, whose first
// byte becomes the read's own.
int64 read_version(const char *fn, StringInfo sig, Oid relid, const UpdateInfo *update,
                   Datum *key_values, char *key_nulls, bool lock, bool *exists)
{
	bool isnull;
	int64 version;
	if (!lock && idem::probe_version(update->probe, relid, key_values, exists, &version, &isnull)) {
		if (*exists && isnull)
			version_is_null(fn, update);
		return version;
	}

	sig->data[0] = lock ? 'y' : 'x'; // "xersion:...", "yersion:..."
	idem::Statement *read = idem::statement_lookup(sig->data, sig->len, relid);
	if (!idem::statement_ready(read))
		build_version_read(fn, read, relid, update, lock);
	int rc = SPI_execute_plan(read->plan, key_values, key_nulls, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "pg_idem: unexpected SPI result %s", SPI_result_code_string(rc));
	*exists = SPI_processed > 0;
	if (!*exists)
		return 0;
	version =
	    DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (isnull)
		version_is_null(fn, update);
	return version;
}

// The update itself, whichever way its fields were given.
Datum versioned_update(FunctionCallInfo fcinfo, Oid relid, const idem::JsonFields &key,
                       int64 expected_version, const idem::JsonFields &changes,
                       const char *version_column)
{
	static const char fn[] = "idem_versioned_update";
	if (key.count == 0)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: key must name at least one column", fn));

	idem::lock_target_table(fn, relid);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");

	StringInfoData sig;
	initStringInfo(&sig);
	appendStringInfoString(&sig, "version:");
	appendBinaryStringInfo(&sig, version_column, int(strlen(version_column)) + 1);
	idem::append_signature(&sig, "key", relid, key);
	idem::append_signature(&sig, "changes", relid, changes);
	idem::Statement *update = idem::statement_lookup(sig.data, sig.len, relid);
	if (!idem::statement_ready(update))
		build_update(fn, update, relid, version_column, key, changes);
	const UpdateInfo *info = static_cast<const UpdateInfo *>(update->info);

	int nargs = changes.count + 1 + key.count;
	Datum *values = static_cast<Datum *>(palloc(sizeof(Datum) * nargs));
	char *nulls = static_cast<char *>(palloc(nargs));
	for (int i = 0; i < changes.count; i++) {
		bool isnull;
		values[i] = idem::field_to_column(fn, relid, &info->changes[i], changes, i, &isnull);
		nulls[i] = isnull ? 'n' : ' ';
	}
	values[changes.count] = Int64GetDatum(expected_version);
	nulls[changes.count] = ' ';
	Datum *key_values = values + changes.count + 1;
	char *key_nulls = nulls + changes.count + 1;
	for (int i = 0; i < key.count; i++) {
		bool isnull;
		key_values[i] = idem::field_to_column(fn, relid, &info->keys[i], key, i, &isnull);
		if (isnull)
			ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			        errmsg("%s: key column \"%s\" must not be null", fn, key.names[i]));
		key_nulls[i] = ' ';
	}

	int rc = SPI_execute_plan(update->plan, values, nulls, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "pg_idem: unexpected SPI result %s", SPI_result_code_string(rc));
	if (SPI_processed > 0) {
		SPI_finish();
		PG_RETURN_BOOL(true);
	}

	// A miss. A replay (the row is past the expected version) is answered
	// from a plain read, taking no lock: replays of each other's rows must
	// never wait on, or deadlock with, one another. Otherwise the row is
	// locked, waiting for a writer in flight, and its version read again.
	bool row_exists;
	int64 version = read_version(fn, &sig, relid, info, key_values, key_nulls, false, &row_exists);
	if (row_exists && version <= expected_version)
		version = read_version(fn, &sig, relid, info, key_values, key_nulls, true, &row_exists);
	if (!row_exists) {
		SPI_finish();
		PG_RETURN_NULL();
	}
	if (version > expected_version) {
		SPI_finish();
		PG_RETURN_BOOL(false);
	}
	if (version < expected_version)
		ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		        errmsg("%s: the row is at version %lld, before the expected version %lld", fn,
		               static_cast<long long>(version), static_cast<long long>(expected_version)),
		        errdetail("The message builds on a change that has not been applied yet; "
		                  "nothing was changed."),
		        errhint("Retry the message after the earlier ones."));

	// At the expected version now, and locked by us: once more.
	rc = SPI_execute_plan(update->plan, values, nulls, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "pg_idem: unexpected SPI result %s", SPI_result_code_string(rc));
	bool applied = SPI_processed > 0;
	SPI_finish();
	if (!applied)
		PG_RETURN_NULL();
	PG_RETURN_BOOL(true);
}

} // namespace

IDEM_SQL_FUNCTION(idem_versioned_update)
{
	static const char fn[] = "idem_versioned_update";
	static const char *const argnames[] = {"target", "key", "expected_version", "changes",
	                                       "version_column"};
	for (int i = 0; i < 5; i++)
		if (PG_ARGISNULL(i))
			ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			        errmsg("%s: %s must not be null", fn, argnames[i]));

	idem::JsonFields key = idem::json_object_fields(fn, "key", PG_GETARG_JSONB_P(1));
	idem::JsonFields changes = idem::json_object_fields(fn, "changes", PG_GETARG_JSONB_P(3));
	return versioned_update(fcinfo, PG_GETARG_OID(0), key, PG_GETARG_INT64(2), changes,
	                        NameStr(*PG_GETARG_NAME(4)));
}

// idem_versioned_update_fields(VARIADIC "any"): what the support function
// below makes of a call whose key and changes are jsonb_build_object calls
// (built_objects.hpp): the target, the key's fields, the expected version,
// the changes' fields, the version column.
IDEM_SQL_FUNCTION(idem_versioned_update_fields)
{
	static const char fn[] = "idem_versioned_update";
	static idem::OriginalFunction original = {InvalidOid, InvalidOid};
	static const Oid original_argtypes[] = {REGCLASSOID, JSONBOID, INT8OID, JSONBOID, NAMEOID};
	idem::check_original_execute(&original, fcinfo, fn, 5, original_argtypes);
	int next_arg = 1;
	idem::JsonFields key = idem::typed_fields(fn, fcinfo, &next_arg);
	int expected_arg = next_arg++;
	idem::JsonFields changes = idem::typed_fields(fn, fcinfo, &next_arg);
	int version_column_arg = next_arg++;
	if (!idem::argument_is(fcinfo, 0, REGCLASSOID) ||
	    !idem::argument_is(fcinfo, expected_arg, INT8OID) ||
	    !idem::argument_is(fcinfo, version_column_arg, NAMEOID) || next_arg != PG_NARGS())
		idem::malformed_fields(fn);

	static const char *const argnames[] = {"target", "expected_version", "version_column"};
	const int args[] = {0, expected_arg, version_column_arg};
	for (int i = 0; i < 3; i++)
		if (PG_ARGISNULL(args[i]))
			ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			        errmsg("%s: %s must not be null", fn, argnames[i]));
	return versioned_update(fcinfo, PG_GETARG_OID(0), key, PG_GETARG_INT64(expected_arg), changes,
	                        NameStr(*PG_GETARG_NAME(version_column_arg)));
}

// The planner support function of idem_versioned_update: rewrites a call
// whose key and changes are both jsonb_build_object calls that can be
// rewritten into one of idem_versioned_update_fields.
IDEM_SQL_FUNCTION(idem_versioned_update_support)
{
	PG_RETURN_POINTER(idem::rewrite_built_objects(reinterpret_cast<Node *>(PG_GETARG_POINTER(0)),
	                                              "idem_versioned_update_fields", 5, {1, 3}));
}
