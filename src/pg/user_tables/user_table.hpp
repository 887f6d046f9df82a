// The caller's own table, as idem_try_insert_row and idem_versioned_update
// see it: checking that the target is a table, finding its columns, and
// turning JSON values into column values. Include after postgres.h.
#pragma once

extern "C" {
#include "fmgr.h"
#include "utils/jsonb.h"
#include "utils/relcache.h"
}

namespace idem
{

// A column a JSON value is converted into.
struct TargetColumn {
	const char *name;
	AttrNumber attnum;
	Oid type;
	int32 typmod;
	bool is_json;    // json or jsonb (or a domain over one): takes JSON text
	bool is_integer; // smallint, integer or bigint (or a domain over one)
	Oid ioparam;
	FmgrInfo input;
};

// The names and values of a JSON object, in jsonb's key order (which is
// deterministic, so the same set of keys always lists the same way). Or
// the fields of an object that was never built (built_objects.hpp): then
// `values` is NULL and the values are SQL values of the types listed
// there, converted as their JSON would have been.
struct JsonFields {
	int count;
	const char **names;
	JsonbValue *values;
	const Datum *datums; // the values never built, or NULL
	const bool *nulls;
	const Oid *types;
};

// Locks the target as a plain INSERT or UPDATE would (RowExclusiveLock) and
// checks that it exists and is an ordinary or partitioned table, and that
// the caller may use its schema (a statement names the table by its schema,
// as a plain one does, but a cached statement is not parsed again for
// another role). The checks come before the lock, as a name lookup refuses
// a schema before it locks, so that a role cannot queue a lock on a table it
// may not reach; and again after it, which also brings this backend's
// caches up to date with any concurrent ALTER or DROP (or a move to another
// schema) before cached statements are trusted.
void lock_target_table(const char *fn, Oid relid);

// The fields of `json`, which must be a JSON object (22023 otherwise).
JsonFields json_object_fields(const char *fn, const char *argname, Jsonb *json);

// Describes the column `name` of `rel` into `col`, allocating in `cxt`.
// Unknown, dropped and system columns are 42703.
void describe_column(const char *fn, Relation rel, const char *name, TargetColumn *col,
                     MemoryContext cxt);

// Converts a JSON value to the column's type with the type's input function,
// so typmods and domain constraints apply. A failure names the column.
Datum json_to_column(const char *fn, Oid relid, const TargetColumn *col, const JsonbValue *value,
                     bool *isnull);

// Field `i` of `fields` in the column's type: json_to_column of its JSON
// value, or of the JSON that jsonb_build_object would have made of it. A
// value of the column's own type (smallint, integer, bigint or text, no
// domain) is taken as it is: its JSON would have given it back unchanged.
Datum field_to_column(const char *fn, Oid relid, const TargetColumn *col, const JsonFields &fields,
                      int i, bool *isnull);

// Builds a cache signature: a tag, the relation, and a list of names.
void append_signature(StringInfo sig, const char *tag, Oid relid, const JsonFields &fields);

// "schema"."table", quoted as needed.
char *qualified_table_name(Relation rel);

} // namespace idem
