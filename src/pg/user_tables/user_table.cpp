// See user_table.hpp. Everything here runs with the caller's privileges; the
// statements built from it are executed by SPI as the caller, so the target's
// permissions, row-level security and triggers apply as to a plain statement.
extern "C" {
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "catalog/pg_namespace_d.h"
#include "catalog/pg_type_d.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/rel.h"
#include "utils/syscache.h"
}

#include "pg/compat.hpp"
#include "pg/user_tables/user_table.hpp"

#include <cstring>

namespace idem
{

namespace
{

// One catalog lookup for the kind and the schema: this runs twice a call.
void check_target_table(const char *fn, Oid relid)
{
	HeapTuple tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		ereport(ERROR, errcode(ERRCODE_UNDEFINED_TABLE),
		        errmsg("%s: relation with OID %u does not exist", fn, relid));
	Form_pg_class form = reinterpret_cast<Form_pg_class>(GETSTRUCT(tuple));
	char relkind = form->relkind;
	Oid schema = form->relnamespace;
	ReleaseSysCache(tuple);
	if (object_aclcheck(NamespaceRelationId, schema, GetUserId(), ACL_USAGE) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_SCHEMA, get_namespace_name(schema));
	if (relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR, errcode(ERRCODE_WRONG_OBJECT_TYPE),
		        errmsg("%s: \"%s\" is not a table", fn, get_rel_name(relid)),
		        errdetail("Only ordinary and partitioned tables can be targets."));
}

} // namespace

void lock_target_table(const char *fn, Oid relid)
{
	check_target_table(fn, relid);
	LockRelationOid(relid, RowExclusiveLock);
	check_target_table(fn, relid);
}

JsonFields json_object_fields(const char *fn, const char *argname, Jsonb *json)
{
	if (!JB_ROOT_IS_OBJECT(json))
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: %s must be a JSON object", fn, argname),
		        errhint("Give an object whose keys are column names, such as "
		                "'{\"order_id\": 42}'."));

	JsonFields fields;
	int capacity = JB_ROOT_COUNT(json);
	fields.count = 0;
	fields.names = static_cast<const char **>(palloc(sizeof(char *) * (capacity + 1)));
	fields.values = static_cast<JsonbValue *>(palloc(sizeof(JsonbValue) * (capacity + 1)));

	JsonbIterator *it = JsonbIteratorInit(&json->root);
	JsonbValue v;
	JsonbIteratorToken token;
	while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE) {
		if (token == WJB_KEY) {
			fields.names[fields.count] = pnstrdup(v.val.string.val, v.val.string.len);
		} else if (token == WJB_VALUE) {
			fields.values[fields.count] = v;
			fields.count++;
		}
	}
	fields.datums = NULL;
	fields.nulls = NULL;
	fields.types = NULL;
	return fields;
}

void describe_column(const char *fn, Relation rel, const char *name, TargetColumn *col,
                     MemoryContext cxt)
{
	TupleDesc desc = RelationGetDescr(rel);
	for (int i = 0; i < desc->natts; i++) {
		Form_pg_attribute att = TupleDescAttr(desc, i);
		if (att->attisdropped || strcmp(NameStr(att->attname), name) != 0)
			continue;

		Oid input_fn;
		col->name = MemoryContextStrdup(cxt, name);
		col->attnum = att->attnum;
		col->type = att->atttypid;
		col->typmod = att->atttypmod;
		Oid base = getBaseType(att->atttypid);
		col->is_json = base == JSONOID || base == JSONBOID;
		col->is_integer = base == INT2OID || base == INT4OID || base == INT8OID;
		getTypeInputInfo(att->atttypid, &input_fn, &col->ioparam);
		fmgr_info_cxt(input_fn, &col->input, cxt);
		return;
	}
	ereport(ERROR, errcode(ERRCODE_UNDEFINED_COLUMN),
	        errmsg("%s: column \"%s\" of relation \"%s\" does not exist", fn, name,
	               RelationGetRelationName(rel)));
}

namespace
{

// The text a column's input function is given for a JSON value: JSON text
// for json and jsonb columns, the plain scalar otherwise.
char *json_value_text(const JsonbValue *value, const TargetColumn *col)
{
	if (!col->is_json) {
		switch (value->type) {
		case jbvString:
			return pnstrdup(value->val.string.val, value->val.string.len);
		case jbvNumeric:
			// For an integer column without trailing zeros, so that 1.0
			// fits as 1 does; for any other, as written (10.50 stays
			// 10.50 in a numeric column, as jsonb_populate_record gives).
			if (col->is_integer)
				return numeric_normalize(value->val.numeric);
			return DatumGetCString(
			    DirectFunctionCall1(numeric_out, NumericGetDatum(value->val.numeric)));
		case jbvBool:
			return pstrdup(value->val.boolean ? "true" : "false");
		default:
			break; // arrays and objects: their JSON text
		}
	}
	Jsonb *jb = JsonbValueToJsonb(const_cast<JsonbValue *>(value));
	return JsonbToCString(NULL, &jb->root, VARSIZE(jb));
}

} // namespace

Datum json_to_column(const char *fn, Oid relid, const TargetColumn *col, const JsonbValue *value,
                     bool *isnull)
{
	// JSON null is SQL NULL; the input function still sees it, so that a
	// domain's NOT NULL constraint is enforced.
	char *text = value->type == jbvNull ? NULL : json_value_text(value, col);
	*isnull = text == NULL;

	MemoryContext cxt = CurrentMemoryContext;
	// A copy for this call: an input function keeps state in fn_extra
	// (domain_in its CHECK's evaluation), and a nested call on the same
	// statement (a domain CHECK that calls pg_idem) must not share it.
	FmgrInfo input;
	fmgr_info_copy(&input, const_cast<FmgrInfo *>(&col->input), cxt);
	Datum result = 0;
	PG_TRY();
	{
		result = InputFunctionCall(&input, text, col->ioparam, col->typmod);
	}
	PG_CATCH();
	{
		// Re-raise with the column named; the transaction aborts as before.
		MemoryContextSwitchTo(cxt);
		ErrorData *error = CopyErrorData();
		FlushErrorState();
		ereport(ERROR, errcode(error->sqlerrcode),
		        errmsg("%s: column \"%s\" of relation \"%s\": %s", fn, col->name,
		               get_rel_name(relid), error->message),
		        error->detail ? errdetail_internal("%s", error->detail) : 0,
		        error->hint ? errhint("%s", error->hint) : 0);
	}
	PG_END_TRY();
	return result;
}

Datum field_to_column(const char *fn, Oid relid, const TargetColumn *col, const JsonFields &fields,
                      int i, bool *isnull)
{
	if (fields.datums == NULL)
		return json_to_column(fn, relid, col, &fields.values[i], isnull);
	JsonbValue value;
	if (fields.nulls[i]) {
		value.type = jbvNull;
	} else if (fields.types[i] == col->type) {
		*isnull = false;
		return fields.datums[i];
	} else if (fields.types[i] == TEXTOID) {
		text *string = DatumGetTextPP(fields.datums[i]);
		value.type = jbvString;
		value.val.string.val = VARDATA_ANY(string);
		value.val.string.len = int(VARSIZE_ANY_EXHDR(string));
	} else {
		// An integer: jsonb_build_object makes the numeric of its decimal
		// text, which is this one (scale 0).
		int64 n = fields.types[i] == INT2OID   ? DatumGetInt16(fields.datums[i])
		          : fields.types[i] == INT4OID ? DatumGetInt32(fields.datums[i])
		                                       : DatumGetInt64(fields.datums[i]);
		value.type = jbvNumeric;
		value.val.numeric = int64_to_numeric(n);
	}
	return json_to_column(fn, relid, col, &value, isnull);
}

void append_signature(StringInfo sig, const char *tag, Oid relid, const JsonFields &fields)
{
	// Binary, not printf: this runs on every call, and formatting was most
	// of what building the signature cost. The tag ends at its NUL, the
	// relation and the count have fixed sizes, and the count makes the
	// signature decode one way only: without it, a column named like the
	// next tag could move from one list to the other and leave the
	// signature unchanged.
	appendBinaryStringInfo(sig, tag, int(strlen(tag)) + 1);
	appendBinaryStringInfo(sig, reinterpret_cast<const char *>(&relid), sizeof relid);
	appendBinaryStringInfo(sig, reinterpret_cast<const char *>(&fields.count), sizeof fields.count);
	for (int i = 0; i < fields.count; i++)
		appendBinaryStringInfo(sig, fields.names[i], int(strlen(fields.names[i])) + 1);
}

char *qualified_table_name(Relation rel)
{
	return quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
	                                  RelationGetRelationName(rel));
}

} // namespace idem
