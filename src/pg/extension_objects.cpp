// See extension_objects.hpp.
extern "C" {
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_class.h"
#include "catalog/pg_enum_d.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_proc_d.h"
#include "catalog/pg_type_d.h"
#include "commands/extension.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
}

#include "pg/extension_objects.hpp"
#include "pg/guard.hpp"
#include "pg/relation_invalidation.hpp"

#include <initializer_list>

namespace idem
{

namespace
{

ExtensionObjects objects;
uint64 generation = 0;

// The schema of an extension (PostgreSQL 15 keeps its own version static).
Oid extension_schema(Oid ext)
{
	Relation rel = table_open(ExtensionRelationId, AccessShareLock);
	HeapTuple tuple = get_catalog_object_by_oid(rel, Anum_pg_extension_oid, ext);
	Oid schema = HeapTupleIsValid(tuple)
	                 ? reinterpret_cast<Form_pg_extension>(GETSTRUCT(tuple))->extnamespace
	                 : InvalidOid;
	table_close(rel, AccessShareLock);
	return schema;
}

Oid function_without_arguments(const char *name, Oid schema)
{
	return GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid, CStringGetDatum(name),
	                       PointerGetDatum(buildoidvector(NULL, 0)), ObjectIdGetDatum(schema));
}

void forget(Oid relid)
{
	if (relid == InvalidOid || relid == objects.records || relid == objects.scopes ||
	    relid == objects.streams || relid == objects.scope_grants) {
		objects.valid = false;
		generation++;
	}
}

Oid enum_label(Oid type, const char *label)
{
	return GetSysCacheOid2(ENUMTYPOIDNAME, Anum_pg_enum_oid, ObjectIdGetDatum(type),
	                       CStringGetDatum(label));
}

const char *qualified(const char *schema, const char *name)
{
	return MemoryContextStrdup(TopMemoryContext, quote_qualified_identifier(schema, name));
}

// A renamed schema changes the names kept here without a relcache
// invalidation of the tables in it.
void forget_names(Datum, int, uint32)
{
	objects.valid = false;
	generation++;
}

} // namespace

// PostgreSQL calls this through the guard (guard.hpp).
extern "C" void idem_extension_objects_forget_names(Datum arg, int cache_id, uint32 hash)
{
	guard([&] { forget_names(arg, cache_id, hash); });
}

const ExtensionObjects &extension_objects()
{
	if (objects.valid)
		return objects;

	Oid ext = get_extension_oid("pg_idem", true);
	if (!OidIsValid(ext))
		ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		        errmsg("extension \"pg_idem\" is not installed in this database"),
		        errhint("Run CREATE EXTENSION pg_idem."));
	Oid schema = extension_schema(ext);
	ExtensionObjects found;
	found.records = get_relname_relid("idem_records", schema);
	found.records_pkey = get_relname_relid("idem_records_pkey", schema);
	found.scopes = get_relname_relid("idem_scopes", schema);
	found.streams = get_relname_relid("idem_streams", schema);
	found.streams_pkey = get_relname_relid("idem_streams_pkey", schema);
	found.scope_grants = get_relname_relid("idem_scope_grants", schema);
	// 0.3's SQL keeps reconciliation functions by signature, for pg_upgrade.
	found.scopes_by_signature = OidIsValid(found.scopes) &&
	                            get_attnum(found.scopes, "reconcile_bound_in") != InvalidAttrNumber;
	found.status_type = GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid,
	                                    CStringGetDatum("idem_status"), ObjectIdGetDatum(schema));
	// idem_streams came with 0.2: a database still on 0.1's SQL has none,
	// and only the stream functions need it (they say so).
	if (!OidIsValid(found.records) || !OidIsValid(found.records_pkey) ||
	    !OidIsValid(found.scopes) || !OidIsValid(found.status_type))
		ereport(ERROR, errcode(ERRCODE_UNDEFINED_TABLE), errmsg("pg_idem's tables are missing"),
		        errhint("If the extension was installed by an older pg_idem, run ALTER "
		                "EXTENSION pg_idem UPDATE."));
	HeapTuple records = SearchSysCache1(RELOID, ObjectIdGetDatum(found.records));
	if (!HeapTupleIsValid(records))
		elog(ERROR, "pg_idem: cache lookup failed for relation %u", found.records);
	found.owner = reinterpret_cast<Form_pg_class>(GETSTRUCT(records))->relowner;
	ReleaseSysCache(records);
	found.status_in_progress = enum_label(found.status_type, "in_progress");
	found.status_completed = enum_label(found.status_type, "completed");
	found.status_failed = enum_label(found.status_type, "failed");
	found.status_dead = enum_label(found.status_type, "dead");
	found.records_trigger_function = function_without_arguments("idem_records_changed", schema);
	found.cache_enabled_function = function_without_arguments("idem_cache_enabled", schema);

	const char *schema_name = get_namespace_name(schema);
	for (const char *old :
	     {objects.schema_name, objects.records_name, objects.scopes_name, objects.streams_name,
	      objects.scope_grants_name, objects.status_type_name})
		if (old != NULL)
			pfree(const_cast<char *>(old));
	found.schema_name = MemoryContextStrdup(TopMemoryContext, quote_identifier(schema_name));
	found.records_name = qualified(schema_name, "idem_records");
	found.scopes_name = qualified(schema_name, "idem_scopes");
	found.streams_name = qualified(schema_name, "idem_streams");
	found.scope_grants_name = qualified(schema_name, "idem_scope_grants");
	found.status_type_name = qualified(schema_name, "idem_status");
	found.valid = true;
	objects = found;
	return objects;
}

uint64 extension_objects_generation()
{
	return generation;
}

bool leading_columns_as_installed(TupleDesc desc, const InstalledColumn *columns, int n)
{
	if (desc->natts < n)
		return false;
	for (int i = 0; i < n; i++) {
		Form_pg_attribute column = TupleDescAttr(desc, i);
		if (column->attisdropped || column->atttypid != columns[i].type ||
		    strcmp(NameStr(column->attname), columns[i].name) != 0)
			return false;
	}
	return true;
}

void extension_objects_register_callbacks()
{
	on_relation_invalidation(forget);
	CacheRegisterSyscacheCallback(NAMESPACEOID, idem_extension_objects_forget_names, 0);
}

} // namespace idem
