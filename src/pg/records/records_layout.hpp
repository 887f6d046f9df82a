// The columns of idem_records, as the C code reads and writes them by
// number: the table path (records.cpp) and the duplicate cache's check that
// a table it fills from is the one the install script made
// (duplicate_cache_triggers.cpp). Include after postgres.h.
#pragma once

extern "C" {
#include "access/attnum.h"
#include "access/tupdesc.h"
}

namespace idem
{

struct ExtensionObjects;

// Column numbers of idem_records, in the order src/pg_idem--0.1.sql creates them.
enum RecordColumn : AttrNumber {
	col_key_id = 1,
	col_scope = 2,
	col_key = 3,
	col_status = 4,
	col_attempts = 5,
	col_attempt_base = 6,
	col_recorded_at = 7,
	col_expires_at = 8,
	col_lease_expires_at = 9,
	col_holder_pid = 10,
	col_holder_started_at = 11,
	col_fingerprint = 12,
	col_result = 13,
	col_last_error = 14,
	// Added by pg_idem 0.3 (src/pg_idem--0.2--0.3.sql).
	col_claim_token = 15,
	col_ttl = 16,
	// Added for Citus (the end of src/pg_idem--0.2--0.3.sql).
	col_route = 17,
};

// Whether `desc` has idem_records' columns where the table path reads them
// by number: names and types as the install script makes them, none
// dropped.
bool records_layout_as_installed(TupleDesc desc, const ExtensionObjects &loc);

} // namespace idem
