// The duplicate cache (pg_idem.cache_size): recently seen committed records,
// so that idem_try_insert can answer "duplicate" without reading
// idem_records. Exists only when pg_idem is preloaded with a cache_size
// above 0; otherwise every function below does nothing and every lookup
// misses. The rules that keep a cached answer exact are at the top of
// duplicate_cache.cpp. Include after postgres.h.
#pragma once

extern "C" {
#include "datatype/timestamp.h"
#include "utils/relcache.h"
}

namespace idem {

struct ExtensionObjects;
struct RecordRef;

void cache_request_shmem();
void cache_init_shmem();

// Whether a claim of this transaction may use the cache at all: the cache
// exists, and the transaction runs in READ COMMITTED (in REPEATABLE READ the
// table path may raise 40001 for a record the snapshot cannot see).
bool cache_usable();

// The database's invalidation counter. Read it before the table lookup
// whose answer may be remembered.
uint64 cache_generation();

// Whether the cache knows ref's key as a live committed record of the
// current idem_records at `now` (the transaction start). Opens idem_records
// (RowExclusiveLock, as the table path would) to compare its identity.
bool cache_lookup(const ExtensionObjects &loc, const RecordRef &ref, TimestampTz now);

// Remembers a duplicate answer of the table path: the record `slot` holds in
// `rel`, if its tuple is settled (inserter committed and not ours, no
// deleter or locker still running) and no invalidation happened in this
// database since `generation` was read. Otherwise does nothing.
void cache_remember(Relation rel, struct TupleTableSlot *slot, const RecordRef &ref,
		    TimestampTz expires_at, Oid status, uint64 generation);

// After any change or deletion of the record of key id `id` (in the
// caller's transaction, committed or not): drops its entry and bumps the
// database's invalidation counter.
void cache_invalidate(const bytea *id);

} // namespace idem
