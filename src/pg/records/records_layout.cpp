// records_layout.hpp: whether an idem_records has the columns the C code
// reads and writes by number.
extern "C" {
#include "postgres.h"

#include "catalog/pg_type_d.h"
}

#include "pg/extension_objects.hpp"
#include "pg/records/records_layout.hpp"

namespace idem
{

bool records_layout_as_installed(TupleDesc desc, const ExtensionObjects &loc)
{
	const InstalledColumn columns[] = {
	    {"key_id", BYTEAOID},
	    {"scope", TEXTOID},
	    {"key", TEXTOID},
	    {"status", loc.status_type},
	    {"attempts", INT4OID},
	    {"attempt_base", INT4OID},
	    {"recorded_at", TIMESTAMPTZOID},
	    {"expires_at", TIMESTAMPTZOID},
	    {"lease_expires_at", TIMESTAMPTZOID},
	    {"holder_pid", INT4OID},
	    {"holder_started_at", TIMESTAMPTZOID},
	    {"fingerprint", TEXTOID},
	    {"result", JSONBOID},
	    {"last_error", TEXTOID},
	};
	static_assert(sizeof columns / sizeof columns[0] == col_last_error,
	              "every column of RecordColumn");
	return leading_columns_as_installed(desc, columns, col_last_error);
}

} // namespace idem
