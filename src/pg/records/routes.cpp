// routes.hpp: a record's route, and whether idem_records is distributed.
extern "C" {
#include "postgres.h"

#include "executor/spi.h"
}

#include "pg/citus_tables.hpp"
#include "pg/extension_objects.hpp"
#include "pg/records/records.hpp"
#include "pg/records/routes.hpp"

namespace idem
{

namespace
{

// The answer, and the invalidation count it was found at.
bool asked = false;
bool distributed;
uint64 distributed_at;

} // namespace

bool records_distributed()
{
	uint64 generation = extension_objects_generation();
	if (!asked || distributed_at != generation) {
		distributed = citus_manages(extension_objects().records);
		distributed_at = generation;
		asked = true;
	}
	return distributed;
}

void take_route(const char *fn, FunctionCallInfo fcinfo, int argno, RecordRef &ref)
{
	ref.routed = PG_NARGS() > argno && !PG_ARGISNULL(argno);
	ref.route = ref.routed ? PG_GETARG_INT64(argno) : 0;
	if (!ref.routed && records_distributed())
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: route must not be null: pg_idem's records are distributed", fn),
		        errdetail("A record lives in the shard of its route, the distribution value "
		                  "of the business row it protects."),
		        errhint("Pass the business row's distribution value as route, the same for "
		                "every call about this key."));
}

bool records_coordinator()
{
	int rc = SPI_execute("SELECT pg_catalog.citus_is_coordinator()", true, 1);
	bool isnull;
	return rc == SPI_OK_SELECT && SPI_processed == 1 &&
	       DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

} // namespace idem
