// Where a record lives on a Citus cluster: its route, and whether
// idem_records is distributed (idem_distribute). On one node a route is
// stored with the record and changes nothing else; on a distributed
// idem_records every read and write of a record is SQL that Citus routes to
// the shard of its route (routed_records.hpp), and a call without a route
// is refused. Include after postgres.h.
#pragma once

extern "C" {
#include "fmgr.h"
}

namespace idem
{

struct RecordRef;

// Whether idem_records is a Citus distributed table here (on the
// coordinator, or on a worker that has Citus' metadata). Asked of Citus'
// catalog once per backend, and again after any invalidation of pg_idem's
// tables (extension_objects_generation): create_distributed_table and
// idem_distribute's ALTER TABLEs invalidate idem_records.
bool records_distributed();

// Reads the optional route argument `argno` (absent in an older SQL
// definition, or NULL: none) into ref. When the records are distributed a
// call without one is an error (22004) naming `fn`: its record could not
// be found in, nor written to, the shard of its business row.
void take_route(const char *fn, FunctionCallInfo fcinfo, int argno, RecordRef &ref);

// On distributed records, whether this node is the Citus coordinator, where
// the purge worker purges and reconciles for every shard (on a worker it
// would only race it). Inside SPI.
bool records_coordinator();

} // namespace idem
