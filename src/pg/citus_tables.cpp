// See citus_tables.hpp.
extern "C" {
#include "postgres.h"

#include "catalog/pg_namespace_d.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "utils/lsyscache.h"
}

#include "pg/citus_tables.hpp"

namespace idem
{

bool citus_manages(Oid relid)
{
	Oid catalog = get_relname_relid("pg_dist_partition", PG_CATALOG_NAMESPACE);
	if (!OidIsValid(catalog))
		return false; // no Citus in this database
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	Oid types[] = {OIDOID};
	Datum values[] = {ObjectIdGetDatum(relid)};
	int rc = SPI_execute_with_args("SELECT 1 FROM pg_catalog.pg_dist_partition "
	                               "WHERE logicalrelid OPERATOR(pg_catalog.=) $1",
	                               1, types, values, NULL, true, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "pg_idem: unexpected SPI result %s", SPI_result_code_string(rc));
	bool found = SPI_processed > 0;
	SPI_finish();
	return found;
}

} // namespace idem
