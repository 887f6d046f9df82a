// Where pg_idem's own tables and types are in this database. Looked up once
// per backend and forgotten when their relcache entries are invalidated
// (DROP EXTENSION, or idem_configure changing a scope). Include after
// postgres.h.
#pragma once

extern "C" {
#include "access/tupdesc.h"
}

namespace idem
{

struct ExtensionObjects {
	bool valid;
	Oid records;              // idem_records
	Oid records_pkey;         // its primary key, on key_id
	Oid scopes;               // idem_scopes
	Oid streams;              // idem_streams
	Oid streams_pkey;         // its primary key, on (stream, part)
	Oid scope_grants;         // idem_scope_grants, InvalidOid before 0.3's SQL
	bool scopes_by_signature; // idem_scopes.reconcile_function is a signature (0.3's SQL)
	Oid owner;                // the owner of idem_records: the extension's owner
	Oid status_type;          // idem_status and its labels
	Oid status_in_progress;
	Oid status_completed;
	Oid status_failed;
	Oid status_dead;
	Oid records_trigger_function; // idem_records_changed(), InvalidOid on 0.1's SQL
	Oid cache_enabled_function;   // idem_cache_enabled(), the same
	const char *schema_name;      // quoted, for SQL text
	const char *records_name;     // schema-qualified and quoted, for SQL text
	const char *scopes_name;
	const char *streams_name;
	const char *scope_grants_name;
	const char *status_type_name;
};

const ExtensionObjects &extension_objects();

// Counts the invalidations of pg_idem's tables (any relcache invalidation
// of one of them, DROP EXTENSION, a renamed schema): a cache of what they
// hold is current while this has not changed. One relcache callback serves
// them all (PostgreSQL has ten slots for every library together).
uint64 extension_objects_generation();

// A column of one of pg_idem's tables, as the install script makes it.
struct InstalledColumn {
	const char *name;
	Oid type;
};

// Whether `desc` begins with `columns` (n of them), none dropped: what C
// code that reads or writes those columns by number needs.
bool leading_columns_as_installed(TupleDesc desc, const InstalledColumn *columns, int n);

void extension_objects_register_callbacks();

} // namespace idem
