// The duplicate cache's table: see duplicate_cache.hpp, and
// docs/internals/duplicate-cache.md. Three files make the cache, one concern each:
//   duplicate_cache.cpp           the table in shared memory (a set-associative
//                                 table read under a seqlock per bucket), its
//                                 lookups, insertions and invalidations;
//   duplicate_cache_triggers.cpp  whether idem_records' triggers keep it
//                                 exact, and those triggers' functions;
//   duplicate_cache_epochs.cpp    table epochs: what empties or replaces an
//                                 idem_records without its row triggers,
//                                 noted by the object access hook.
//
// A wrong "duplicate" drops a message forever, so the cache answers only
// what the table path would answer, and misses whenever in doubt.
//
// What an entry says. "Key id K of database D had, in idem_records (relation
// OID R, in the database's table epoch T), a committed record that no
// transaction was changing,
// live until E, with status S and attempts A", and, when the record was
// replayable, "with fingerprint P (or none) and result J (or NULL)". All of
// it is read from the record's tuple itself (records.cpp), never from what
// a caller meant to write. It is made from a record the table path found:
// a duplicate of idem_try_insert, or a 'completed' answer of idem_begin
// (records_offer_to_cache), and only when
//   - the record's tuple was inserted by a committed transaction other than
//     ours (not in progress, not prepared),
//   - its xmax is invalid, aborted, a lock-only xmax whose locker has ended
//     (a lock changes nothing), or a lock-only xmax of our own transaction
//     (idem_begin's SELECT ... FOR UPDATE): while we hold that lock nobody
//     else can change or delete the row, so it is the latest committed
//     version; whoever changes it after our transaction ends invalidates
//     after that change, and our own later changes (idem_forget, a plain
//     UPDATE through the trigger, ...) invalidate too. A deleter or
//     updater, even in progress or prepared, refuses it, and so does any
//     multixact,
//   - the table has its three triggers as made (duplicate_cache_triggers.cpp),
//     enabled ALWAYS,
//     read under the filler's ROW EXCLUSIVE lock, which CREATE, ALTER and
//     DROP TRIGGER wait for: a database still on 0.1's SQL, or one whose
//     operator disabled or replaced one, is never cached,
//   - the key id is exact (record_key.hpp's short form): a SHA-256 id is
//     never cached, so a collision still reaches the table's scope and key
//     comparison and raises its error,
//   - the key's invalidation counter, read before the table lookup, is
//     unchanged when the entry is inserted (checked under the EXCLUSIVE lock
//     of the key's partition).
//     Counters are per partition of database and key hash, so a change of
//     another key only refuses an insertion when it falls in the same one of
//     the `generations` partitions.
// A record is replayable (idem_begin may answer from its entry) when it is
// completed, has neither a lease nor a last error (idem_begin returns both
// columns; idem_complete clears them, but a reconciled record keeps its last
// error), its fingerprint is none or any text (kept as the SHA-256 of its
// bytes, fingerprint_digest: equal digests are the table's text equality,
// barring a SHA-256 collision), and its result
// is NULL or, detoasted, at most pg_idem.cache_result_size bytes (kept as
// those bytes, so the answer is the same jsonb the table would give).
//
// A lookup answers only if the database, the relation OID, the table epoch
// and the full key id match, and `now` is before E: then the table path
// would have found the same live record. It opens no relation and takes no
// lock on it, so a hit costs no lock to take and none to release.
// idem_try_insert's lookup takes any such entry as a duplicate.
// idem_begin's takes only a replayable one whose status is completed and
// whose fingerprint does not differ from the call's (both present and
// unequal: a miss, and the table path answers the mismatch by the scope's
// setting); it answers 'completed' with A, J, and no lease or last error,
// which is what decide_and_write (claim.cpp) would answer for that record
// at `now`.
//
// Table epochs (duplicate_cache_epochs.cpp). A TRUNCATE, DROP or ALTER of
// an idem_records, or a change of its triggers, bumps its database's epoch
// when the transaction that does it commits, so that every entry made
// before stops answering; that transaction itself does not use the cache
// from the change on.
//
// Invalidation. Every C path that changes or deletes a record (idem_forget,
// idem_retry, takeovers in idem_try_insert and idem_begin, idem_begin's
// dead marking, idem_complete, idem_fail, reconciliation, purge) calls
// cache_invalidate after its modification: under the EXCLUSIVE lock of the
// key's partition it drops the key's entry and bumps the key's counter. A
// populate that read the table before the modification sees the bump and
// refuses; one whose entry got in before is removed; one that reads after
// it sees the xmax (or, after the modifier commits, the new version, which
// is then the truth; idem_begin's locking read waits for that commit). A
// prepared transaction's change leaves its xmax in the tuple, so nothing is
// cached until it resolves. Plain SQL DML on idem_records (also through a parent table, or
// replicated) goes through the row triggers (duplicate_cache_triggers.cpp, docs/internals): the
// AFTER one invalidates each changed key after its change, and the BEFORE
// one keeps the changing transaction off the cache until it ends, since it
// could otherwise meet an entry between a row's change and the end of the
// statement, when the AFTER one fires. pg_idem's own changes in SQL are
// exempt from the BEFORE one (cache_own_change_begin): they invalidate at
// once.
//
// The table. cache_size entries rounded up to whole buckets of `ways`
// entries (set associative): a key lives only in one bucket (bucket_index),
// so a lookup reads the bucket's `ways` tags (the high 32 bits of the hash,
// side by side) and only the entries whose tag matches (at most `ways`,
// almost always one or none), and insertion replaces an empty entry, else
// an expired one, else the first without its reference bit (clearing bits
// as it goes: a clock within the bucket). The tags (and the bucket's
// version, below) are a cache line per bucket, all of them side by side
// (16 bytes per entry), so that a miss (every new key) reads one line and a
// hit one more, of its entry. An entry is an Entry: what a lookup compares,
// and the record's status and attempts, one cache line. A fingerprint and
// the room for a result of cache_result_size bytes, which only idem_begin's
// answer reads, are the entry's EntryReplay, in an array of its own, so that
// the entries a hit reads lie a cache line apart, not a result's size: fewer
// pages to find them in. An entry whose record has neither (every duplicate
// idem_try_insert finds) leaves its EntryReplay alone (Entry::kept_apart
// false): neither its insertion nor a lookup touches that array, whose pages
// (most of the cache's memory) each backend would otherwise fault in one by
// one. Nothing is allocated after start. Shared memory is rebuilt after
// a crash, so the cache starts empty after any restart.
//
// Locking: the buckets are split into lock_partitions partitions, each with
// an LWLock of the tranche "pg_idem duplicate cache" (a bucket's partition
// is its index modulo lock_partitions, lock_of). Insertion, removal and
// eviction in a bucket take its partition's lock EXCLUSIVE; lookups take no
// lock. Every change that concerns one key (its insertion, its
// invalidation, the eviction of its stale entry) is in that key's bucket,
// so the changes of one key are ordered by one lock, as they were when the
// whole cache had one: fillers of keys in other partitions no longer wait
// for each other (with one lock, the insertions of the duplicates the
// table answered queued on it). A bump of an epoch, which concerns every
// key of a database, takes every partition's lock, in order. Each bucket has a
// version, in its tag line, that a writer makes odd before it changes the
// bucket's tags or entries and even again after (a seqlock, as
// PgBackendStatus's changecount): a lookup reads the version, then the tags
// and the entry, then the version again, and answers only if it was even
// and unchanged; otherwise what it read may be torn, and it misses. So a
// lookup writes nothing to shared memory but an entry's reference bit, and
// only when the bit is clear; it contends with no other lookup. What a
// lookup copies before the second read of the version is bounded (key and
// result lengths) so that torn values cannot overrun anything. A lookup
// first reads its bucket's tags (may_hold) and misses at once if none is
// its key's. The reference bit is atomic. The counters and epochs are
// atomics, bumped under EXCLUSIVE (a counter under the lock of the
// partition of the key it is bumped for: keys of other partitions that
// share it bump it under theirs, which only refuses insertions), read
// without a lock (a counter before a table lookup, followed by a barrier,
// and again under the key's partition's lock before an insertion). Nothing
// that can raise an error (detoasting, palloc) runs under a lock.
extern "C" {
#include "postgres.h"

#include "access/detoast.h"
#include "access/htup_details.h"
#include "access/transam.h"
#include "access/xact.h"
#include "common/hashfn.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
}

#include "core/claim_rules.hpp"
#include "core/record_key.hpp"
#include "pg/cache/duplicate_cache.hpp"
#include "pg/cache/duplicate_cache_internal.hpp"
#include "pg/extension_objects.hpp"
#include "pg/records/routes.hpp"
#include "pg/settings.hpp"

#include <cstring>

namespace idem
{

namespace
{

constexpr const char tranche_name[] = "pg_idem duplicate cache";
constexpr int ways = 8;
// Partitions of the buckets, each with its lock (file header). A bump of an
// epoch holds them all at once, well below PostgreSQL's limit of LWLocks
// held together (MAX_SIMUL_LWLOCKS, 200).
constexpr int lock_partitions = 32;
// Invalidation counters, one per partition of (database, key hash): keys
// that share one only cost each other refused insertions.
constexpr int generations = 1024;
// Table epochs; databases share one when their OIDs meet modulo this, which
// only costs entries that stop answering.
constexpr int epochs = 64;

// What a lookup compares: PG_CACHE_LINE_SIZE (128) bytes, of which the
// first 64 hold ids of up to 25 bytes (scope and key of about 20 bytes
// together).
struct Entry {
	uint64 hash;
	uint64 epoch; // the database's table epoch when it was made
	TimestampTz expires_at;
	Oid dbid;
	Oid relid;
	pg_atomic_uint32 referenced;
	uint8 id_len;
	bool replayable; // idem_begin may answer from it (file header)
	uint8 id[max_key_id_bytes];
	// Read by idem_begin's lookup only, hence after the id.
	Oid status;
	int32 attempts;
	// The record has a fingerprint or a result, in its EntryReplay; if not,
	// that EntryReplay is not this entry's (it may hold an earlier one's).
	bool kept_apart;
};
static_assert(offsetof(Entry, id) + 25 <= 64,
              "a lookup of an id of up to 25 bytes reads one 64-byte line of its entry");
static_assert(sizeof(Entry) <= PG_CACHE_LINE_SIZE, "an entry is one cache line");

constexpr Size entry_stride = TYPEALIGN(PG_CACHE_LINE_SIZE, sizeof(Entry));

// What only idem_begin's answer reads, kept apart from the entries (same
// index) so that they stay small; written and read only for an entry whose
// kept_apart is true.
struct EntryReplay {
	uint32 result_len;    // bytes of the kept result after it; 0: NULL
	bool has_fingerprint; // then `fingerprint` holds its digest
	uint8 fingerprint[fingerprint_digest_length];
	// Followed by the room for a result: replay_size in all.
};

// A bucket's tags and version: one cache line, its tag line. Its `ways`
// entries are elsewhere (SharedCache::area).
struct BucketTags {
	uint32 tag[ways]; // 0 for an unused entry, else tag_of(its key's hash)
	uint32 version;   // odd while a writer changes the bucket (file header)
};

constexpr Size tag_line_size = TYPEALIGN(PG_CACHE_LINE_SIZE, sizeof(BucketTags));

struct SharedCache {
	LWLockPadded *locks; // lock_partitions of them
	int buckets;
	Size replay_size;
	Size result_size; // pg_idem.cache_result_size, as the table was built
	pg_atomic_uint64 generation[generations];
	// Table epochs (file header), shared the same way; bumped under every
	// partition's lock, read under any or none.
	pg_atomic_uint64 epoch[epochs];
	// From the first cache line boundary on: every bucket's tag line, then
	// every bucket's entries, then their EntryReplays.
	char area[FLEXIBLE_ARRAY_MEMBER];
};

SharedCache *shared = NULL;
char *tag_lines = NULL; // in shared->area
char *entries = NULL;   // in shared->area, after the tag lines
char *replays = NULL;   // in shared->area, after the entries

int bucket_count()
{
	return (cache_size + ways - 1) / ways;
}

Size replay_size()
{
	return TYPEALIGN(PG_CACHE_LINE_SIZE, sizeof(EntryReplay) + Size(cache_result_size));
}

Size entry_count()
{
	return mul_size(Size(bucket_count()), ways);
}

Size tag_lines_size()
{
	return mul_size(Size(bucket_count()), tag_line_size);
}

Size shared_size()
{
	// Room to move the area to a cache line boundary.
	return add_size(add_size(offsetof(SharedCache, area) + PG_CACHE_LINE_SIZE, tag_lines_size()),
	                mul_size(entry_count(), entry_stride + replay_size()));
}

pg_atomic_uint64 *generation_of(Oid dbid, uint64 hash)
{
	return &shared->generation[(hash ^ (uint64(dbid) * UINT64CONST(0x9E3779B97F4A7C15))) %
	                           generations];
}

pg_atomic_uint64 *epoch_of(Oid dbid)
{
	return &shared->epoch[dbid % epochs];
}

// The bucket of `hash`, from its low 32 bits (multiplied and shifted rather
// than divided); the tag is made of the high ones.
Size bucket_index(uint64 hash)
{
	return (uint64(uint32(hash)) * uint64(shared->buckets)) >> 32;
}

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

// The i-th entry (0 <= i < ways) of the bucket of `hash`.
Entry *in_bucket(uint64 hash, int i)
{
	return reinterpret_cast<Entry *>(entries +
	                                 (bucket_index(hash) * ways + Size(i)) * entry_stride);
}

// The EntryReplay of entry e, and the room for its result.
EntryReplay *replay_of_entry(const Entry *e)
{
	Size i = Size(reinterpret_cast<const char *>(e) - entries) / entry_stride;
	return reinterpret_cast<EntryReplay *>(replays + i * shared->replay_size);
}

char *result_of(EntryReplay *r)
{
	return reinterpret_cast<char *>(r) + sizeof(EntryReplay);
}

// The lock of the partition of the bucket of `hash` (file header).
LWLock *lock_of(uint64 hash)
{
	return &shared->locks[bucket_index(hash) % lock_partitions].lock;
}

BucketTags *bucket_tags(uint64 hash)
{
	return reinterpret_cast<BucketTags *>(tag_lines + bucket_index(hash) * tag_line_size);
}

// The `ways` tags of the bucket of `hash`.
uint32 *tags_of_bucket(uint64 hash)
{
	return bucket_tags(hash)->tag;
}

// Under lock_of(hash) EXCLUSIVE, around every change of a bucket's tags or
// entries.
void begin_change(uint64 hash)
{
	BucketTags *b = bucket_tags(hash);
	b->version = b->version + 1;
	pg_write_barrier();
}

void end_change(uint64 hash)
{
	BucketTags *b = bucket_tags(hash);
	pg_write_barrier();
	b->version = b->version + 1;
}

uint32 read_version(uint64 hash)
{
	return static_cast<const volatile BucketTags *>(bucket_tags(hash))->version;
}

uint32 tag_of(uint64 hash)
{
	return uint32(hash >> 32) | 1;
}

// The slot (0 <= slot < ways) of the entry of (dbid, id) in the bucket of
// `hash`, or -1. Under either lock.
int find_slot(Oid dbid, uint64 hash, const bytea *id)
{
	const uint32 *tags = tags_of_bucket(hash);
	uint32 tag = tag_of(hash);
	size_t len = VARSIZE_ANY_EXHDR(id);
	for (int i = 0; i < ways; i++) {
		if (tags[i] != tag)
			continue;
		const Entry *e = in_bucket(hash, i);
		if (e->dbid == dbid && e->hash == hash && e->id_len == len &&
		    memcmp(e->id, VARDATA_ANY(id), len) == 0)
			return i;
	}
	return -1;
}

// Whether the bucket of `hash` may hold an entry for it: one of its tags is
// the hash's. Read without the lock, as a filter before the locked lookup:
// a stale or torn view can only turn what would have been a hit into a
// miss (which is always allowed), or send a miss on to the locked lookup,
// which decides again.
bool may_hold(uint64 hash)
{
	const volatile uint32 *tags = tags_of_bucket(hash);
	uint32 tag = tag_of(hash);
	for (int i = 0; i < ways; i++)
		if (tags[i] == tag)
			return true;
	return false;
}

// Under lock_of(hash) EXCLUSIVE: drops the entry of (dbid, id), if any.
void remove_locked(Oid dbid, uint64 hash, const bytea *id)
{
	int slot = find_slot(dbid, hash, id);
	if (slot >= 0) {
		begin_change(hash);
		tags_of_bucket(hash)[slot] = 0;
		end_change(hash);
	}
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
	// Our own row lock (idem_begin's FOR UPDATE): the row cannot change
	// under us, and any later change invalidates.
	if (HEAP_XMAX_IS_LOCKED_ONLY(mask) && TransactionIdIsCurrentTransactionId(xmax))
		return true;
	if (!ended(xmax))
		return false;
	// Ended: a locker is harmless; a deleter or updater must have aborted.
	return HEAP_XMAX_IS_LOCKED_ONLY(mask) || !TransactionIdDidCommit(xmax);
}

// Whether the cache may have an answer for key id `id` in this transaction;
// sets *hash to the key's hash. Most misses (every new key) end here,
// without a lock and before anything is allocated.
bool may_answer(const bytea *id, uint64 *hash)
{
	if (!cache_usable() || !exact_id(id))
		return false;
	*hash = hash_id(id);
	return may_hold(*hash);
}

// Finds the entry of key id `id` (whose hash may_answer gave) that may answer
// at `now` and hands it to `answer`, which copies what it needs; returns
// whether `answer` took it and the bucket did not change meanwhile (false
// when there is none). Without a lock (file header): `answer` must not
// raise errors, must bound what it copies, and its copy counts only if this
// returns true. An entry made from another idem_records than the current
// one, or in an earlier epoch, is evicted.
template <typename Answer>
bool lookup(const ExtensionObjects &loc, const bytea *id, uint64 hash, TimestampTz now,
            Answer answer)
{
	Oid relid = loc.records;

	uint32 version = read_version(hash);
	if (version % 2 != 0)
		return false;
	pg_read_barrier();
	bool hit = false;
	bool stale = false;
	uint64 epoch = pg_atomic_read_u64(epoch_of(MyDatabaseId));
	int slot = find_slot(MyDatabaseId, hash, id);
	Entry *e = slot >= 0 ? in_bucket(hash, slot) : NULL;
	if (e != NULL) {
		if (e->relid != relid || e->epoch != epoch)
			stale = true;
		else
			hit = now < e->expires_at && answer(e);
	}
	pg_read_barrier();
	if (read_version(hash) != version)
		return false;
	// Written only when clear: a hit leaves the line clean.
	if (hit && pg_atomic_read_u32(&e->referenced) == 0)
		pg_atomic_write_u32(&e->referenced, 1);
	if (stale) {
		// Made from another idem_records, or before it was emptied:
		// evict.
		LWLockAcquire(lock_of(hash), LW_EXCLUSIVE);
		epoch = pg_atomic_read_u64(epoch_of(MyDatabaseId));
		slot = find_slot(MyDatabaseId, hash, id);
		if (slot >= 0) {
			e = in_bucket(hash, slot);
			if (e->relid != relid || e->epoch != epoch) {
				begin_change(hash);
				tags_of_bucket(hash)[slot] = 0;
				end_change(hash);
			}
		}
		LWLockRelease(lock_of(hash));
	}
	return hit;
}

// What an entry of `record` keeps for idem_begin, prepared before the
// EXCLUSIVE lock: detoasting may read the TOAST table and raise errors.
struct Replay {
	bool replayable;
	bool has_fingerprint;
	uint8 fingerprint[fingerprint_digest_length];
	const struct varlena *result; // detoasted; NULL when the result is NULL
};

Replay replay_of(const CacheableRecord &record)
{
	Replay r;
	memset(&r, 0, sizeof r);
	r.replayable = record.status == extension_objects().status_completed && !record.has_lease &&
	               !record.has_last_error;
	if (!r.replayable)
		return r;
	if (record.fingerprint != NULL) {
		r.has_fingerprint = true;
		fingerprint_digest(VARDATA_ANY(record.fingerprint), VARSIZE_ANY_EXHDR(record.fingerprint),
		                   r.fingerprint);
	}
	if (record.result != 0) {
		if (toast_raw_datum_size(record.result) > shared->result_size)
			r.replayable = false;
		else
			r.result = PG_DETOAST_DATUM(record.result);
	}
	return r;
}

// For the isolation spec duplicate_cache_fill_race only: waits for the
// advisory lock pg_idem.test_cache_fill_lock names, between the table read
// and the insertion. The setting stays in the release build, which is the
// build the suite tests and whose settings docs/operations.md lists; off (0, the
// default), all it costs a fill is one test of a variable, predicted not
// taken, and its code lies out of line.
pg_noinline pg_attribute_cold void pause_for_test_fill_lock()
{
	Datum key = Int64GetDatum(test_cache_fill_lock);
	DirectFunctionCall1(pg_advisory_lock_int8, key);
	DirectFunctionCall1(pg_advisory_unlock_int8, key);
}

} // namespace

void cache_request_shmem()
{
	if (cache_size <= 0)
		return;
	RequestAddinShmemSpace(MAXALIGN(shared_size()));
	RequestNamedLWLockTranche(tranche_name, lock_partitions);
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
		s->locks = GetNamedLWLockTranche(tranche_name);
		s->buckets = bucket_count();
		s->replay_size = replay_size();
		s->result_size = Size(cache_result_size);
		for (int i = 0; i < generations; i++)
			pg_atomic_init_u64(&s->generation[i], 0);
		for (int i = 0; i < epochs; i++)
			pg_atomic_init_u64(&s->epoch[i], 0);
	}
	shared = s;
	tag_lines = reinterpret_cast<char *>(CACHELINEALIGN(s->area));
	entries = tag_lines + tag_lines_size();
	Size entry_total = Size(s->buckets) * ways;
	replays = entries + entry_total * entry_stride;
	if (!found) {
		memset(tag_lines, 0, tag_lines_size());
		for (Size i = 0; i < entry_total; i++)
			pg_atomic_init_u32(&reinterpret_cast<Entry *>(entries + i * entry_stride)->referenced,
			                   0);
	}
	LWLockRelease(AddinShmemInitLock);
}

// Off for distributed records (routes.hpp): they change on the workers,
// out of sight of this node's cache and its triggers.
bool cache_usable()
{
	return shared != NULL && !IsolationUsesXactSnapshot() && !cache_xact.records_replaced &&
	       !cache_xact.records_changed && cache_xact.own_change.len == 0 && !records_distributed();
}

uint64 cache_generation(const bytea *id)
{
	if (shared == NULL || !exact_id(id))
		return 0;
	uint64 g = pg_atomic_read_u64(generation_of(MyDatabaseId, hash_id(id)));
	// The table lookup that follows must not be read before the counter.
	pg_memory_barrier();
	return g;
}

bool cache_lookup(const ExtensionObjects &loc, const bytea *id, TimestampTz now)
{
	uint64 hash;
	return may_answer(id, &hash) && lookup(loc, id, hash, now, [](const Entry *) { return true; });
}

bool cache_lookup_completed(const ExtensionObjects &loc, const bytea *id, TimestampTz now,
                            const text *fingerprint, CachedCompletion *out)
{
	uint64 hash;
	if (!may_answer(id, &hash))
		return false;
	uint8 call_fingerprint[fingerprint_digest_length];
	if (fingerprint != NULL)
		fingerprint_digest(VARDATA_ANY(fingerprint), VARSIZE_ANY_EXHDR(fingerprint),
		                   call_fingerprint);
	// Room for a result, taken before the lock (palloc may raise errors).
	char *result =
	    shared->result_size > 0 ? static_cast<char *>(palloc(shared->result_size)) : NULL;
	Oid completed = loc.status_completed;
	uint32 result_len = 0;
	bool hit = lookup(loc, id, hash, now, [&](Entry *e) {
		if (!e->replayable || e->status != completed)
			return false;
		out->attempts = e->attempts;
		out->expires_at = e->expires_at;
		if (!e->kept_apart)
			return true; // no fingerprint to differ, a NULL result
		EntryReplay *r = replay_of_entry(e);
		if (fingerprint != NULL && r->has_fingerprint &&
		    memcmp(r->fingerprint, call_fingerprint, sizeof call_fingerprint) != 0)
			return false;
		result_len = r->result_len;
		// Bounded: a torn length must not overrun `result`.
		if (result_len > shared->result_size)
			return false;
		if (result_len > 0)
			memcpy(result, result_of(r), result_len);
		return true;
	});
	out->result = hit && result_len > 0 ? PointerGetDatum(result) : 0;
	if (result != NULL && out->result == 0)
		pfree(result);
	return hit;
}

void cache_remember(Relation rel, TupleTableSlot *slot, const bytea *id,
                    const CacheableRecord &record, uint64 generation)
{
	if (!cache_usable() || !exact_id(id) || !cache_guarded_by_triggers(rel))
		return;
	bool should_free;
	HeapTuple tuple = ExecFetchSlotHeapTuple(slot, false, &should_free);
	bool ok = settled(tuple->t_data);
	if (should_free)
		heap_freetuple(tuple);
	if (!ok)
		return;
	Replay replay = replay_of(record);
	if (unlikely(test_cache_fill_lock != 0))
		pause_for_test_fill_lock();

	uint64 hash = hash_id(id);
	size_t len = VARSIZE_ANY_EXHDR(id);
	LWLock *lock = lock_of(hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	if (pg_atomic_read_u64(generation_of(MyDatabaseId, hash)) == generation) {
		uint32 *tags = tags_of_bucket(hash);
		// The key's own entry first (a key is never in a bucket twice),
		// then an empty one.
		int slot = find_slot(MyDatabaseId, hash, id);
		for (int i = 0; i < ways && slot < 0; i++)
			if (tags[i] == 0)
				slot = i;
		// Then one that can no longer answer: expired, or of an earlier
		// epoch of our database.
		TimestampTz now = GetCurrentTransactionStartTimestamp();
		uint64 epoch = pg_atomic_read_u64(epoch_of(MyDatabaseId));
		for (int i = 0; i < ways && slot < 0; i++) {
			const Entry *e = in_bucket(hash, i);
			if (e->expires_at <= now || (e->dbid == MyDatabaseId && e->epoch != epoch))
				slot = i;
		}
		// Second chance: the first entry not used since the last pass.
		for (int pass = 0; pass < 2 && slot < 0; pass++)
			for (int i = 0; i < ways && slot < 0; i++) {
				Entry *e = in_bucket(hash, i);
				if (pg_atomic_read_u32(&e->referenced) == 0)
					slot = i;
				else
					pg_atomic_write_u32(&e->referenced, 0);
			}
		if (slot < 0)
			slot = 0;
		Entry *victim = in_bucket(hash, slot);
		begin_change(hash);
		tags[slot] = tag_of(hash);
		victim->id_len = uint8(len);
		victim->replayable = replay.replayable;
		victim->dbid = MyDatabaseId;
		victim->relid = RelationGetRelid(rel);
		victim->epoch = epoch;
		victim->hash = hash;
		victim->expires_at = record.expires_at;
		pg_atomic_write_u32(&victim->referenced, 0);
		memcpy(victim->id, VARDATA_ANY(id), len);
		victim->status = record.status;
		victim->attempts = int32(record.attempts);
		victim->kept_apart = replay.replayable && (replay.has_fingerprint || replay.result != NULL);
		if (victim->kept_apart) {
			EntryReplay *kept = replay_of_entry(victim);
			kept->has_fingerprint = replay.has_fingerprint;
			memcpy(kept->fingerprint, replay.fingerprint, sizeof replay.fingerprint);
			kept->result_len = 0;
			if (replay.result != NULL) {
				kept->result_len = VARSIZE(replay.result);
				memcpy(result_of(kept), replay.result, kept->result_len);
			}
		}
		end_change(hash);
	}
	LWLockRelease(lock);
}

void cache_invalidate(const bytea *id)
{
	// Only exact ids are ever cached, and a counter only protects the
	// insertion of the key whose record changed.
	if (shared == NULL || !exact_id(id))
		return;
	uint64 hash = hash_id(id);
	LWLock *lock = lock_of(hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	remove_locked(MyDatabaseId, hash, id);
	pg_atomic_fetch_add_u64(generation_of(MyDatabaseId, hash), 1);
	LWLockRelease(lock);
}

bool cache_exists()
{
	return shared != NULL;
}

void cache_bump_epoch(Oid dbid)
{
	// Every partition's lock, as the one lock of the whole cache was: no
	// insertion is between its read of the epoch and its entry meanwhile.
	for (int i = 0; i < lock_partitions; i++)
		LWLockAcquire(&shared->locks[i].lock, LW_EXCLUSIVE);
	pg_atomic_fetch_add_u64(epoch_of(dbid), 1);
	for (int i = lock_partitions - 1; i >= 0; i--)
		LWLockRelease(&shared->locks[i].lock);
}

} // namespace idem
