// record_statements.hpp: statements about one record, on one node or routed.
extern "C" {
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
}

#include "pg/extension_objects.hpp"
#include "pg/records/record_statements.hpp"
#include "pg/records/records.hpp"
#include "pg/records/routes.hpp"

#include <cstring>

namespace idem
{

RecordStatement record_statement(const char *signature, const char *sql_format, int nargs,
                                 Oid *types, bool insertion)
{
	const ExtensionObjects &objects = extension_objects();
	bool routed = records_distributed();
	const char *sig = routed ? psprintf("%s:routed", signature) : signature;
	Statement *st = statement_lookup(sig, strlen(sig), objects.records);
	if (!statement_ready(st)) {
		Oid *all = static_cast<Oid *>(palloc((nargs + 1) * sizeof(Oid)));
		memcpy(all, types, nargs * sizeof(Oid));
		all[nargs] = INT8OID;
		const char *second;
		if (insertion)
			second = routed ? "route, key_id" : "key_id";
		else if (routed)
			second = psprintf("route OPERATOR(pg_catalog.=) $%d "
			                  "AND key_id OPERATOR(pg_catalog.=) $1",
			                  nargs + 1);
		else
			second = "key_id OPERATOR(pg_catalog.=) $1";
		statement_prepare(st, psprintf(sql_format, objects.records_name, second), nargs + 1, all);
	}
	return RecordStatement{st, nargs};
}

uint64 run_record_statement(const RecordStatement &rs, const RecordRef &ref, Datum *values,
                            const char *nulls, bool read_only, long limit, int expected)
{
	Datum *all = static_cast<Datum *>(palloc((rs.nargs + 1) * sizeof(Datum)));
	char *all_nulls = static_cast<char *>(palloc(rs.nargs + 2));
	memcpy(all, values, rs.nargs * sizeof(Datum));
	if (nulls != NULL)
		memcpy(all_nulls, nulls, rs.nargs);
	else
		memset(all_nulls, ' ', rs.nargs);
	all[rs.nargs] = Int64GetDatum(ref.route);
	all_nulls[rs.nargs] = ref.routed ? ' ' : 'n';
	all_nulls[rs.nargs + 1] = '\0';
	int rc = SPI_execute_plan(rs.st->plan, all, all_nulls, read_only, limit);
	if (rc != expected)
		elog(ERROR, "pg_idem: unexpected SPI result %s", SPI_result_code_string(rc));
	return SPI_processed;
}

} // namespace idem
