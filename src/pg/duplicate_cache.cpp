// The duplicate cache: see duplicate_cache.hpp, and "Duplicate cache" in
// README.md.
//
// A wrong "duplicate" drops a message forever, so the cache answers only
// what the table path would answer, and misses whenever in doubt.
//
// What an entry says. "Key id K of database D had, in idem_records (relation
// OID R, relfilenode F), a committed record that no transaction was changing,
// live until E." It is made only from a duplicate answer of the table path
// (records.cpp), and only when
//   - the record's tuple was inserted by a committed transaction other than
//     ours (not in progress, not prepared),
//   - its xmax is invalid, aborted, or a lock-only xmax whose locker has
//     ended (a lock changes nothing); a deleter or updater, even in progress
//     or prepared, refuses it, and so does any multixact,
//   - the key id is exact (record_key.hpp's short form): a SHA-256 id is
//     never cached, so a collision still reaches the table's scope and key
//     comparison and raises its error,
//   - the database's invalidation counter, read before the table lookup, is
//     unchanged when the entry is inserted (checked under the EXCLUSIVE lock).
// A lookup answers only if the database, the relation OID and relfilenode
// (DROP/CREATE EXTENSION, TRUNCATE change them; the relation is opened with
// the table path's own lock, which also reads pending invalidations) and
// the full key id match, and the transaction start is before E: then the
// table path would have found the same live record.
//
// Invalidation. Every C path that changes or deletes a record (idem_forget,
// idem_retry, takeovers in idem_try_insert and idem_begin, idem_begin's
// dead marking, idem_complete, idem_fail, reconciliation, purge) calls
// cache_invalidate after its modification: under EXCLUSIVE it drops the
// key's entry and bumps the counter. A populate that read the table before
// the modification sees the bump and refuses; one whose entry got in before
// is removed; one that reads after it sees the xmax (or, after the modifier
// commits, the new version, which is then the truth). A prepared
// transaction's change leaves its xmax in the tuple, so nothing is cached
// until it resolves. Plain SQL DML on idem_records bypasses this (README).
//
// The table. cache_size entries rounded up to whole buckets of `ways`
// entries (set associative): a key lives only in bucket hash % buckets, so
// a lookup compares at most `ways` entries, and insertion replaces an empty
// entry, else an expired one, else the first without its reference bit
// (clearing bits as it goes: a clock within the bucket). Nothing is
// allocated after start. Shared memory is rebuilt after a crash, so the
// cache starts empty after any restart.
//
// Locking: shared->lock (tranche "pg_idem duplicate cache") SHARED for
// lookups, EXCLUSIVE for insertion, removal and eviction. An entry's
// fields change only under EXCLUSIVE; the reference bit is an atomic set
// under SHARED. The counters are atomics, bumped under EXCLUSIVE, read
// without the lock before a table lookup (followed by a barrier) and again
// under EXCLUSIVE before an insertion.
extern "C" {
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/transam.h"
#include "access/xact.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/rel.h"
}

#include "core/record_key.hpp"
#include "pg/duplicate_cache.hpp"
#include "pg/extension_objects.hpp"
#include "pg/guard.hpp"
#include "pg/records.hpp"
#include "pg/settings.hpp"

#include <cstring>

namespace idem {

namespace {

constexpr const char tranche_name[] = "pg_idem duplicate cache";
constexpr int ways = 8;
// Invalidation counters; databases share one when their OIDs meet modulo
// this, which only costs refused insertions.
constexpr int generations = 64;

struct Entry {
	bool used;
	uint8 id_len;
	Oid dbid;
	Oid relid;
	Oid relfilenode;
	Oid status;
	uint64 hash;
	TimestampTz expires_at;
	pg_atomic_uint32 referenced;
	uint8 id[max_key_id_bytes];
};

struct SharedCache {
	LWLock *lock;
	int buckets;
	pg_atomic_uint64 generation[generations];
	Entry entries[FLEXIBLE_ARRAY_MEMBER];
};

SharedCache *shared = NULL;

int bucket_count() { return (cache_size + ways - 1) / ways; }

Size shared_size()
{
	return add_size(offsetof(SharedCache, entries),
			mul_size(mul_size(bucket_count(), ways), sizeof(Entry)));
}

pg_atomic_uint64 *generation_of(Oid dbid) { return &shared->generation[dbid % generations]; }

// Cacheable ids are exact: the short form, tag 0.
bool exact_id(const bytea *id)
{
	return VARSIZE_ANY_EXHDR(id) > 0 && reinterpret_cast<const uint8 *>(VARDATA_ANY(id))[0] == 0;
}

uint64 hash_id(const bytea *id)
{
	return hash_bytes_extended(reinterpret_cast<const unsigned char *>(VARDATA_ANY(id)),
				   int(VARSIZE_ANY_EXHDR(id)), 0);
}

Entry *bucket_of(uint64 hash) { return &shared->entries[(hash % uint64(shared->buckets)) * ways]; }

bool same_key(const Entry *e, Oid dbid, uint64 hash, const bytea *id)
{
	size_t len = VARSIZE_ANY_EXHDR(id);
	return e->used && e->dbid == dbid && e->hash == hash && e->id_len == len &&
	       memcmp(e->id, VARDATA_ANY(id), len) == 0;
}

// Under EXCLUSIVE: drops the entry of (dbid, id), if any.
void remove_locked(Oid dbid, uint64 hash, const bytea *id)
{
	Entry *bucket = bucket_of(hash);
	for (int i = 0; i < ways; i++)
		if (same_key(&bucket[i], dbid, hash, id))
			bucket[i].used = false;
}

// Whether a transaction id has ended and is not ours (prepared transactions
// count as running).
bool ended(TransactionId xid)
{
	return !TransactionIdIsCurrentTransactionId(xid) && !TransactionIdIsInProgress(xid);
}

// The tuple rules of the file header.
bool settled(HeapTupleHeader h)
{
	TransactionId xmin = HeapTupleHeaderGetXmin(h);
	if (!HeapTupleHeaderXminFrozen(h) && TransactionIdIsNormal(xmin)) {
		if (!ended(xmin) || !TransactionIdDidCommit(xmin))
			return false;
	}
	uint16 mask = h->t_infomask;
	TransactionId xmax = HeapTupleHeaderGetRawXmax(h);
	if ((mask & HEAP_XMAX_INVALID) || !TransactionIdIsValid(xmax))
		return true;
	if (mask & HEAP_XMAX_IS_MULTI)
		return false;
	if (!ended(xmax))
		return false;
	// Ended: a locker is harmless; a deleter or updater must have aborted.
	return HEAP_XMAX_IS_LOCKED_ONLY(mask) || !TransactionIdDidCommit(xmax);
}

} // namespace

void cache_request_shmem()
{
	if (cache_size <= 0)
		return;
	RequestAddinShmemSpace(MAXALIGN(shared_size()));
	RequestNamedLWLockTranche(tranche_name, 1);
}

void cache_init_shmem()
{
	// Again after a crash: the postmaster builds shared memory anew.
	shared = NULL;
	if (cache_size <= 0)
		return;
	bool found;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	SharedCache *s = static_cast<SharedCache *>(
	    ShmemInitStruct("pg_idem duplicate cache", shared_size(), &found));
	if (!found) {
		s->lock = &(GetNamedLWLockTranche(tranche_name))->lock;
		s->buckets = bucket_count();
		for (int i = 0; i < generations; i++)
			pg_atomic_init_u64(&s->generation[i], 0);
		for (int i = 0; i < s->buckets * ways; i++) {
			s->entries[i].used = false;
			pg_atomic_init_u32(&s->entries[i].referenced, 0);
		}
	}
	shared = s;
	LWLockRelease(AddinShmemInitLock);
}

bool cache_usable() { return shared != NULL && !IsolationUsesXactSnapshot(); }

uint64 cache_generation()
{
	if (shared == NULL)
		return 0;
	uint64 g = pg_atomic_read_u64(generation_of(MyDatabaseId));
	// The table lookup that follows must not be read before the counter.
	pg_memory_barrier();
	return g;
}

bool cache_lookup(const ExtensionObjects &loc, const RecordRef &ref, TimestampTz now)
{
	if (!cache_usable() || !exact_id(ref.id))
		return false;
	Relation rel = table_open(loc.records, RowExclusiveLock);
	Oid relid = RelationGetRelid(rel);
	Oid relfilenode = rel->rd_node.relNode;
	table_close(rel, NoLock);

	uint64 hash = hash_id(ref.id);
	bool hit = false;
	bool stale = false;
	LWLockAcquire(shared->lock, LW_SHARED);
	Entry *bucket = bucket_of(hash);
	for (int i = 0; i < ways; i++) {
		Entry *e = &bucket[i];
		if (!same_key(e, MyDatabaseId, hash, ref.id))
			continue;
		if (e->relid != relid || e->relfilenode != relfilenode) {
			stale = true;
		} else if (now < e->expires_at) {
			hit = true;
			pg_atomic_write_u32(&e->referenced, 1);
		}
		break;
	}
	LWLockRelease(shared->lock);
	if (stale) {
		// Another idem_records than the one it was read from: evict.
		LWLockAcquire(shared->lock, LW_EXCLUSIVE);
		Entry *b = bucket_of(hash);
		for (int i = 0; i < ways; i++)
			if (same_key(&b[i], MyDatabaseId, hash, ref.id) &&
			    (b[i].relid != relid || b[i].relfilenode != relfilenode))
				b[i].used = false;
		LWLockRelease(shared->lock);
	}
	return hit;
}

void cache_remember(Relation rel, TupleTableSlot *slot, const RecordRef &ref,
		    TimestampTz expires_at, Oid status, uint64 generation)
{
	if (!cache_usable() || !exact_id(ref.id))
		return;
	bool should_free;
	HeapTuple tuple = ExecFetchSlotHeapTuple(slot, false, &should_free);
	bool ok = settled(tuple->t_data);
	if (should_free)
		heap_freetuple(tuple);
	if (!ok)
		return;

	uint64 hash = hash_id(ref.id);
	size_t len = VARSIZE_ANY_EXHDR(ref.id);
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (pg_atomic_read_u64(generation_of(MyDatabaseId)) == generation) {
		Entry *bucket = bucket_of(hash);
		Entry *victim = NULL;
		// The key's own entry first (a key is never in a bucket twice),
		// then an empty one.
		for (int i = 0; i < ways && victim == NULL; i++)
			if (same_key(&bucket[i], MyDatabaseId, hash, ref.id))
				victim = &bucket[i];
		for (int i = 0; i < ways && victim == NULL; i++)
			if (!bucket[i].used)
				victim = &bucket[i];
		TimestampTz now = GetCurrentTransactionStartTimestamp();
		for (int i = 0; i < ways && victim == NULL; i++)
			if (bucket[i].expires_at <= now)
				victim = &bucket[i];
		// Second chance: the first entry not used since the last pass.
		for (int pass = 0; pass < 2 && victim == NULL; pass++)
			for (int i = 0; i < ways && victim == NULL; i++) {
				if (pg_atomic_read_u32(&bucket[i].referenced) == 0)
					victim = &bucket[i];
				else
					pg_atomic_write_u32(&bucket[i].referenced, 0);
			}
		if (victim == NULL)
			victim = &bucket[0];
		victim->used = true;
		victim->id_len = uint8(len);
		victim->dbid = MyDatabaseId;
		victim->relid = RelationGetRelid(rel);
		victim->relfilenode = rel->rd_node.relNode;
		victim->status = status;
		victim->hash = hash;
		victim->expires_at = expires_at;
		pg_atomic_write_u32(&victim->referenced, 0);
		memcpy(victim->id, VARDATA_ANY(ref.id), len);
	}
	LWLockRelease(shared->lock);
}

void cache_invalidate(const bytea *id)
{
	// Only exact ids are ever cached, and a counter only protects the
	// insertion of the key whose record changed.
	if (shared == NULL || !exact_id(id))
		return;
	uint64 hash = hash_id(id);
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	remove_locked(MyDatabaseId, hash, id);
	pg_atomic_fetch_add_u64(generation_of(MyDatabaseId), 1);
	LWLockRelease(shared->lock);
}

} // namespace idem

// The AFTER UPDATE OR DELETE row trigger of idem_records: forgets the key of
// the old row (and of the new one, should an UPDATE change key_id), after the
// modification, as cache_invalidate requires.
IDEM_SQL_FUNCTION(idem_records_changed)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR, errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
			errmsg("idem_records_changed: not called as a trigger"));
	TriggerData *trigger = reinterpret_cast<TriggerData *>(fcinfo->context);
	if (idem::shared != NULL) {
		TupleDesc desc = RelationGetDescr(trigger->tg_relation);
		bool isnull;
		HeapTuple rows[] = {trigger->tg_trigtuple, trigger->tg_newtuple};
		for (HeapTuple row : rows) {
			if (row == NULL)
				continue;
			Datum id = heap_getattr(row, 1, desc, &isnull);
			if (!isnull)
				idem::cache_invalidate(DatumGetByteaPP(id));
		}
	}
	return PointerGetDatum(NULL);
}

// idem_cache_enabled(): whether the duplicate cache exists on this server.
IDEM_SQL_FUNCTION(idem_cache_enabled) { PG_RETURN_BOOL(idem::shared != NULL); }
