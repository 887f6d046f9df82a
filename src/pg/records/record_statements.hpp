// SQL statements about one record of idem_records (its key, and its route
// on a Citus cluster), prepared once per backend: the claim protocol's
// reads and writes under the record's row lock, and the operator tools.
//
// A statement's text names the table with its first %s and the record with
// its second: the key id $1 and, on distributed records (routes.hpp), the
// route too, which Citus routes the statement by. An insertion's second %s
// is its ON CONFLICT target instead, the primary key's columns. The route
// is the statement's last parameter, $(nargs + 1), always passed, NULL when
// the call gave none, so that an insertion stores it. Include after
// postgres.h.
#pragma once

#include "pg/plan_cache.hpp"

namespace idem
{

struct RecordRef;

struct RecordStatement {
	Statement *st;
	int nargs; // the statement's own parameters, before the route
};

// The statement for `signature` in this database's layout (one node, or
// distributed), prepared the first time from `sql_format`. Inside the
// caller's SPI connection.
RecordStatement record_statement(const char *signature, const char *sql_format, int nargs,
                                 Oid *types, bool insertion = false);

// Runs it about ref's record: `values` and `nulls` (NULL: none null) are
// its own parameters, to which the route is added. Errors unless SPI
// answers `expected`; returns the rows processed.
uint64 run_record_statement(const RecordStatement &rs, const RecordRef &ref, Datum *values,
                            const char *nulls, bool read_only, long limit, int expected);

} // namespace idem
