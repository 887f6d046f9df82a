// The read that follows a missed idem_versioned_update (is the row there,
// and at which version?) without SQL, where that reads exactly what the
// SQL read would: one probe of the unique index on the key columns, with
// the snapshot SPI would have taken. A redelivered message misses every
// time, and the executor of a SELECT cost it several times the probe.
//
// The probe is used only when the SQL read could not differ: an ordinary
// table (the read is ONLY, which is the parent's own index), a unique btree
// index on exactly the key columns with their own equality and collation
// (the scan keys are btree's: through PostgreSQL 18's temporal keys, a
// unique GiST index, the same strategy number means "overlaps"), no
// row-level security, and SELECT on the table for the caller. Otherwise,
// or for the locking read, versioned_update.cpp reads with SQL as before.
// Include after postgres.h.
#pragma once

extern "C" {
#include "utils/relcache.h"
}

#include "pg/user_tables/user_table.hpp"

namespace idem
{

struct VersionProbe {
	Oid index; // InvalidOid: no probe, read with SQL
	int nkeys;
	int *key_of;          // index column i is compared with key value key_of[i]
	RegProcedure *equals; // and with this function
	Oid *collations;
	AttrNumber version_attnum;
	Oid version_type; // smallint, integer or bigint
};

// The probe of `rel` for the key columns `keys`, through `index` (a unique
// index whose key columns are among them, with their own equality and
// collation), allocated in `cxt`; probe->index is InvalidOid if `index` is
// not a btree index or does not have exactly the key columns.
void describe_version_probe(Relation rel, Oid index, const TargetColumn *keys, int nkeys,
                            const TargetColumn &version, VersionProbe *probe, MemoryContext cxt);

// Reads the version of the row the key names, as the SQL read would; false
// if it cannot here and SQL must read. *exists false: no row; *isnull: the
// row's version is null.
bool probe_version(const VersionProbe &probe, Oid relid, const Datum *key_values, bool *exists,
                   int64 *version, bool *isnull);

} // namespace idem
