// idem_versioned_update(target, key, expected_version, changes, version_column):
// the optimistic-lock pattern on the caller's own table.
//
//   UPDATE target SET <changes>, version = expected + 1
//   WHERE <key columns> = <key values> AND version = expected
//
// A replay finds the version already moved on and matches nothing. The key
// must cover a unique index or the primary key, so it names at most one row.
// The result tells the three outcomes apart without a second query by the
// caller: true (applied), false (the row exists with another version: a
// replay or a stale message), NULL (no row has that key, or the caller
// cannot see it). Only a miss pays for the follow-up existence check.
//
// Equality on key columns uses each type's default btree equality operator,
// written as OPERATOR(schema.=) so that no operator planted earlier in the
// caller's search_path can be picked instead.
extern "C" {
#include "postgres.h"

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
#include "pg/user_table.hpp"

#include <cstring>

namespace {

struct UpdateInfo {
	int nchanges;
	idem::TargetColumn *changes;
	int nkeys;
	idem::TargetColumn *keys;
};

// Does the set of key columns include all key columns of some usable unique
// index (valid, not partial, no expressions)?
bool covers_unique_index(Relation rel, Bitmapset *key_attnums)
{
	List *indexes = RelationGetIndexList(rel);
	ListCell *lc;
	bool covered = false;
	foreach (lc, indexes) {
		HeapTuple tuple = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(lfirst_oid(lc)));
		if (!HeapTupleIsValid(tuple))
			continue;
		Form_pg_index index = reinterpret_cast<Form_pg_index>(GETSTRUCT(tuple));
		bool usable = index->indisunique && index->indisvalid && index->indislive &&
			      heap_attisnull(tuple, Anum_pg_index_indpred, NULL) &&
			      heap_attisnull(tuple, Anum_pg_index_indexprs, NULL);
		if (usable) {
			bool all = true;
			for (int i = 0; i < index->indnkeyatts; i++)
				all = all && bms_is_member(index->indkey.values[i], key_attnums);
			covered = all;
		}
		ReleaseSysCache(tuple);
		if (covered)
			break;
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
			errmsg("%s: key column \"%s\" of relation \"%s\" has no equality operator",
			       fn, col->name, RelationGetRelationName(rel)));
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
	appendStringInfo(&sql, "UPDATE %s SET ", idem::qualified_table_name(rel));
	for (int i = 0; i < changes.count; i++) {
		if (info->changes[i].attnum == version.attnum)
			ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("%s: changes must not set the version column \"%s\"", fn,
				       version_column),
				errhint("The version is set to expected_version + 1 by the update "
					"itself."));
		types[i] = info->changes[i].type;
		appendStringInfo(&sql, "%s = $%d, ", quote_identifier(info->changes[i].name), i + 1);
	}
	appendStringInfo(&sql, "%s = $%d OPERATOR(pg_catalog.+) 1 WHERE ",
			 quote_identifier(version_column), version_param);

	Bitmapset *key_attnums = NULL;
	for (int i = 0; i < key.count; i++) {
		if (info->keys[i].attnum == version.attnum)
			ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("%s: key must not include the version column \"%s\"", fn,
				       version_column),
				errhint("Pass the version as expected_version."));
		key_attnums = bms_add_member(key_attnums, info->keys[i].attnum);
		types[version_param + i] = info->keys[i].type;
		append_key_condition(fn, &sql, rel, &info->keys[i], version_param + 1 + i);
		appendStringInfoString(&sql, " AND ");
	}
	if (!covers_unique_index(rel, key_attnums))
		ereport(ERROR, errcode(ERRCODE_INVALID_COLUMN_REFERENCE),
			errmsg("%s: key does not cover a unique index of relation \"%s\"", fn,
			       relname),
			errhint("Give every column of the primary key or of a unique index, so "
				"that the key names at most one row."));
	appendStringInfo(&sql, "%s OPERATOR(pg_catalog.=) $%d", quote_identifier(version_column),
			 version_param);
	table_close(rel, NoLock);

	idem::statement_prepare(st, sql.data, nargs, types);
	st->info = info;
}

// SELECT 1 FROM target WHERE <key columns> = $1.. : the follow-up of a miss.
void build_exists(const char *fn, idem::Statement *st, Oid relid, const UpdateInfo *update)
{
	Relation rel = table_open(relid, AccessShareLock);
	Oid *types = static_cast<Oid *>(palloc(sizeof(Oid) * (update->nkeys + 1)));
	StringInfoData sql;
	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT 1 FROM %s WHERE ", idem::qualified_table_name(rel));
	for (int i = 0; i < update->nkeys; i++) {
		types[i] = update->keys[i].type;
		if (i > 0)
			appendStringInfoString(&sql, " AND ");
		append_key_condition(fn, &sql, rel, &update->keys[i], i + 1);
	}
	table_close(rel, NoLock);
	idem::statement_prepare(st, sql.data, update->nkeys, types);
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

	Oid relid = PG_GETARG_OID(0);
	idem::JsonFields key = idem::json_object_fields(fn, "key", PG_GETARG_JSONB_P(1));
	int64 expected_version = PG_GETARG_INT64(2);
	idem::JsonFields changes = idem::json_object_fields(fn, "changes", PG_GETARG_JSONB_P(3));
	const char *version_column = NameStr(*PG_GETARG_NAME(4));
	if (key.count == 0)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			errmsg("%s: key must name at least one column", fn));

	idem::lock_target_table(fn, relid);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");

	StringInfoData sig;
	initStringInfo(&sig);
	appendStringInfo(&sig, "version:%s", version_column);
	appendStringInfoChar(&sig, '\0');
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
		values[i] = idem::json_to_column(fn, relid, &info->changes[i], &changes.values[i],
						 &isnull);
		nulls[i] = isnull ? 'n' : ' ';
	}
	values[changes.count] = Int64GetDatum(expected_version);
	nulls[changes.count] = ' ';
	Datum *key_values = values + changes.count + 1;
	char *key_nulls = nulls + changes.count + 1;
	for (int i = 0; i < key.count; i++) {
		bool isnull;
		key_values[i] = idem::json_to_column(fn, relid, &info->keys[i], &key.values[i], &isnull);
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

	// A miss: stale version, or no such row?
	sig.data[0] = 'x'; // "xersion:...": the existence check's own signature
	idem::Statement *exists = idem::statement_lookup(sig.data, sig.len, relid);
	if (!idem::statement_ready(exists))
		build_exists(fn, exists, relid, info);
	rc = SPI_execute_plan(exists->plan, key_values, key_nulls, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "pg_idem: unexpected SPI result %s", SPI_result_code_string(rc));
	bool row_exists = SPI_processed > 0;
	SPI_finish();
	if (!row_exists)
		PG_RETURN_NULL();
	PG_RETURN_BOOL(false);
}
