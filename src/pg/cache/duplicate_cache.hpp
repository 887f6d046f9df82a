// The duplicate cache (pg_idem.cache_size): recently seen committed records,
// so that idem_try_insert can answer "duplicate", and idem_begin
// "completed" (with the stored result, when it is small enough to keep:
// pg_idem.cache_result_size), without reading idem_records. Exists only
// when pg_idem is preloaded with a cache_size above 0; otherwise every
// function below does nothing and every lookup misses. The rules that keep
// a cached answer exact are at the top of duplicate_cache.cpp (the
// table; duplicate_cache_triggers.cpp and duplicate_cache_epochs.cpp are
// the other two parts). Include after postgres.h.
#pragma once

extern "C" {
#include "datatype/timestamp.h"
#include "utils/relcache.h"
}

#include "core/record_key.hpp"

namespace idem
{

struct ExtensionObjects;

void cache_request_shmem();
void cache_init_shmem();
// In _PG_init of a preloading server: the hooks that keep the cache from
// answering for an idem_records that a TRUNCATE or DROP emptied.
void cache_register_hooks();

// Whether a claim of this transaction may use the cache at all: the cache
// exists, the transaction runs in READ COMMITTED (in REPEATABLE READ the
// table path may raise 40001 for a record the snapshot cannot see), and it
// has not truncated or dropped an idem_records.
bool cache_usable();

// The invalidation counter of key id `id` (of its partition). Read it before
// the table lookup whose answer may be remembered.
uint64 cache_generation(const bytea *id);

// Whether the cache knows key id `id` (records.hpp's RecordRef::id) as a
// live committed record of the current idem_records at `now` (the
// transaction start). Opens no relation:
// the entry's relation OID and table epoch say whether it is current.
bool cache_lookup(const ExtensionObjects &loc, const bytea *id, TimestampTz now);

// What idem_begin answers for a completed record.
struct CachedCompletion {
	int attempts;
	TimestampTz expires_at;
	Datum result; // a palloc'd jsonb, or 0 when the record's result is NULL
};

// Whether the cache can give idem_begin's answer for key id `id` at `now`
// (the wall clock): a completed record of the current idem_records, live
// at `now`, whose result was kept, and whose fingerprint, if both it and
// `fingerprint` (or NULL) have one, is the same. Fills `out`
// on true.
bool cache_lookup_completed(const ExtensionObjects &loc, const bytea *id, TimestampTz now,
                            const text *fingerprint, CachedCompletion *out);

// The columns of a record that an entry keeps, read by records.cpp from the
// tuple cache_remember is given (never from what a caller meant to write).
struct CacheableRecord {
	Oid status;
	TimestampTz expires_at;
	int attempts;
	bool has_lease;          // lease_expires_at is not NULL
	bool has_last_error;     // last_error is not NULL
	const text *fingerprint; // NULL when none
	Datum result;            // jsonb as stored (perhaps toasted), 0 when NULL
};

// Remembers a record the table path found: the record of key id `id` that
// `slot` holds in `rel` (whose columns are `record`), if its tuple is settled (inserter
// committed and not ours, no deleter or locker still running but our own
// lock) and no invalidation happened in this database since `generation`
// was read. Otherwise does nothing.
void cache_remember(Relation rel, struct TupleTableSlot *slot, const bytea *id,
                    const CacheableRecord &record, uint64 generation);

// After any change or deletion of the record of key id `id` (in the
// caller's transaction, committed or not): drops its entry and bumps the
// database's invalidation counter.
void cache_invalidate(const bytea *id);

// Around pg_idem's own UPDATE or DELETE in SQL of the record of key id `id`,
// which calls cache_invalidate(id) right after it: the trigger
// idem_records_changing then lets that row's change keep the transaction on
// the cache. Meanwhile nothing in this backend uses the cache (a user's
// trigger that the change fires could otherwise meet the key's entry).
// begin returns the change it interrupts (a pg_idem call in such a
// trigger), which end restores. An error in between ends it, and keeps the
// transaction off the cache, when the (sub)transaction aborts.
struct OwnChange {
	size_t len; // 0: none
	uint8 id[max_key_id_bytes];
};
OwnChange cache_own_change_begin(const bytea *id);
void cache_own_change_end(const OwnChange &interrupted);

} // namespace idem
