// The duplicate cache: see duplicate_cache.hpp, and
// docs/internals/duplicate-cache.md (its design and correctness argument).
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
//   - the table has its three triggers as made (below), enabled ALWAYS,
//     read under the filler's ROW EXCLUSIVE lock, which CREATE, ALTER and
//     DROP TRIGGER wait for: a database still on 0.1's SQL, or one whose
//     operator disabled or replaced one, is never cached,
//   - the key id is exact (record_key.hpp's short form): a SHA-256 id is
//     never cached, so a collision still reaches the table's scope and key
//     comparison and raises its error,
//   - the key's invalidation counter, read before the table lookup, is
//     unchanged when the entry is inserted (checked under the EXCLUSIVE lock).
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
// Table epochs. A TRUNCATE or a DROP of a table named idem_records (DROP
// EXTENSION, DROP TABLE, DROP SCHEMA ... CASCADE) removes every record at
// once, without the row triggers; an ALTER TABLE of it may rewrite every
// record (a column's new type, USING anything) or rename it; a CREATE (OR
// REPLACE), ALTER (ENABLE, DISABLE, RENAME) or DROP of one of its triggers,
// or a new definition of a function they run, may stop changes from
// reaching the cache. The object access hook notes each in the transaction
// that does it (and the trigger idem_records_truncating a TRUNCATE, also
// one that logical replication applies, which no hook sees); that
// transaction then bumps its database's epoch just before it commits or
// prepares, so every entry made before stops answering. A TRUNCATE or DROP
// holds its ACCESS EXCLUSIVE lock by then, and a trigger's change its SHARE
// ROW EXCLUSIVE, until it ends, so no entry can be made in between: a
// filler holds ROW EXCLUSIVE on idem_records while it reads the record and
// inserts the entry. (A function's new definition takes no such lock: a
// transaction that held its lock on idem_records since before that commit
// may still fill with what it knew. Replacing pg_idem's functions while
// claims run is not supported.) Before that
// commit a hit answers what the table still holds for everyone else; and
// the transaction itself, which already sees the table emptied, does not
// use the cache at all from the hook on. (The hook may run before the lock
// is granted, which is why the bump waits for the commit.) A DROP DATABASE
// bumps at once, and again when it commits: WITH (FORCE) ends the other
// backends of the database only after the hook.
//
// Invalidation. Every C path that changes or deletes a record (idem_forget,
// idem_retry, takeovers in idem_try_insert and idem_begin, idem_begin's
// dead marking, idem_complete, idem_fail, reconciliation, purge) calls
// cache_invalidate after its modification: under EXCLUSIVE it drops the
// key's entry and bumps the key's counter. A populate that read the table before
// the modification sees the bump and refuses; one whose entry got in before
// is removed; one that reads after it sees the xmax (or, after the modifier
// commits, the new version, which is then the truth; idem_begin's locking
// read waits for that commit). A prepared transaction's change leaves its
// xmax in the tuple, so nothing is cached until it resolves. Plain SQL DML
// on idem_records (also through a parent table, or replicated) goes
// through the row triggers below (docs/internals/duplicate-cache.md): the AFTER one invalidates each
// changed key after its change, and the BEFORE one keeps the changing
// transaction off the cache until it ends, since it could otherwise meet
// an entry between a row's change and the end of the statement, when the
// AFTER one fires. pg_idem's own changes in SQL are exempt from the BEFORE
// one (cache_own_change_begin): they invalidate at once.
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
// one cache line. What only idem_begin's answer reads (status, attempts,
// fingerprint and the room for a result of cache_result_size bytes) is the
// entry's EntryReplay, in an array of its own, so that the entries a hit
// reads lie a cache line apart, not a result's size: fewer pages to find
// them in. Nothing is allocated after start. Shared memory is rebuilt after
// a crash, so the cache starts empty after any restart.
//
// Locking: shared->lock (tranche "pg_idem duplicate cache") EXCLUSIVE for
// insertion, removal and eviction; lookups take no lock. Each bucket has a
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
// atomics, bumped under EXCLUSIVE, read without the lock (a counter before
// a table lookup, followed by a barrier, and again under EXCLUSIVE before
// an insertion). Nothing that can raise an error (detoasting, palloc) runs
// under the lock.
extern "C" {
#include "postgres.h"

#include "access/detoast.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database_d.h"
#include "catalog/pg_language_d.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/primnodes.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
}

#include "core/claim_rules.hpp"
#include "core/record_key.hpp"
#include "pg/compat.hpp"
#include "pg/duplicate_cache.hpp"
#include "pg/extension_objects.hpp"
#include "pg/guard.hpp"
#include "pg/records.hpp"
#include "pg/relation_invalidation.hpp"
#include "pg/settings.hpp"

#include <cstring>

namespace idem {

namespace {

constexpr const char tranche_name[] = "pg_idem duplicate cache";
constexpr int ways = 8;
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
};
static_assert(offsetof(Entry, id) + 25 <= 64,
	      "a lookup of an id of up to 25 bytes reads one 64-byte line of its entry");

constexpr Size entry_stride = TYPEALIGN(PG_CACHE_LINE_SIZE, sizeof(Entry));

// What only idem_begin's answer reads, kept apart from the entries (same
// index) so that they stay small.
struct EntryReplay {
	Oid status;
	int32 attempts;
	uint32 result_len;    // bytes of the kept result after it; 0: NULL
	bool has_fingerprint; // then `fingerprint` holds its digest
	uint8 fingerprint[fingerprint_digest_length];
	// Followed by the room for a result: replay_size in all.
};

// A bucket's tags and version: one cache line, its tag line. Its `ways`
// entries are elsewhere (SharedCache::area).
struct BucketTags {
	uint32 tag[ways]; // 0 for an unused entry, else tag_of(its key's hash)
	uint32 version;	  // odd while a writer changes the bucket (file header)
};

constexpr Size tag_line_size = TYPEALIGN(PG_CACHE_LINE_SIZE, sizeof(BucketTags));

struct SharedCache {
	LWLock *lock;
	int buckets;
	Size replay_size;
	Size result_size; // pg_idem.cache_result_size, as the table was built
	pg_atomic_uint64 generation[generations];
	// Table epochs (file header), shared the same way; bumped under
	// EXCLUSIVE, read under either lock.
	pg_atomic_uint64 epoch[epochs];
	// From the first cache line boundary on: every bucket's tag line, then
	// every bucket's entries, then their EntryReplays.
	char area[FLEXIBLE_ARRAY_MEMBER];
};

SharedCache *shared = NULL;
char *tag_lines = NULL; // in shared->area
char *entries = NULL;	// in shared->area, after the tag lines
char *replays = NULL;	// in shared->area, after the entries

// Whether this transaction truncated, dropped or altered an idem_records,
// or created, altered or dropped a trigger of one (file header): then it
// neither asks nor fills the cache until it ends, and bumps its database's
// epoch when it commits.
bool records_replaced = false;

// Whether this transaction changed a row of an idem_records in SQL (the
// trigger idem_records_changing): the row trigger forgets each key only
// when the statement ends, and other sessions cannot refill it while the
// change is uncommitted, but until then this transaction could still meet
// the entry. It neither asks nor fills the cache until it ends.
bool records_changed = false;

// The record pg_idem's own SQL is changing now (cache_own_change_begin).
OwnChange own_change = {0, {}};

// Whether the triggers of the idem_records `guard_relid` keep the cache
// exact (guarded_by_triggers): -1 until worked out. Forgotten when that
// table's relcache entry is invalidated (any CREATE, ALTER or DROP TRIGGER
// on it) or any function's catalog row changes.
int guard_verdict = -1;
Oid guard_relid = InvalidOid;
// Bumped with each reset of guard_verdict: the catalog lookups that work
// it out may process invalidations, and a reset meanwhile must win.
uint64 guard_resets = 0;

// A database this transaction dropped: its epoch is bumped at the drop and
// again at commit, after the backends still connected to it are gone.
Oid dropped_database = InvalidOid;

object_access_hook_type previous_object_access = NULL;

int bucket_count() { return (cache_size + ways - 1) / ways; }

Size replay_size()
{
	return TYPEALIGN(PG_CACHE_LINE_SIZE, sizeof(EntryReplay) + Size(cache_result_size));
}

Size entry_count() { return mul_size(Size(bucket_count()), ways); }

Size tag_lines_size() { return mul_size(Size(bucket_count()), tag_line_size); }

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

pg_atomic_uint64 *epoch_of(Oid dbid) { return &shared->epoch[dbid % epochs]; }

// The bucket of `hash`, from its low 32 bits (multiplied and shifted rather
// than divided); the tag is made of the high ones.
Size bucket_index(uint64 hash) { return (uint64(uint32(hash)) * uint64(shared->buckets)) >> 32; }

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
	return reinterpret_cast<Entry *>(entries + (bucket_index(hash) * ways + Size(i)) * entry_stride);
}

// The EntryReplay of entry e, and the room for its result.
EntryReplay *replay_of_entry(const Entry *e)
{
	Size i = Size(reinterpret_cast<const char *>(e) - entries) / entry_stride;
	return reinterpret_cast<EntryReplay *>(replays + i * shared->replay_size);
}

char *result_of(EntryReplay *r) { return reinterpret_cast<char *>(r) + sizeof(EntryReplay); }

BucketTags *bucket_tags(uint64 hash)
{
	return reinterpret_cast<BucketTags *>(tag_lines + bucket_index(hash) * tag_line_size);
}

// The `ways` tags of the bucket of `hash`.
uint32 *tags_of_bucket(uint64 hash) { return bucket_tags(hash)->tag; }

// Under EXCLUSIVE, around every change of a bucket's tags or entries.
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

uint32 tag_of(uint64 hash) { return uint32(hash >> 32) | 1; }

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

// Under EXCLUSIVE: drops the entry of (dbid, id), if any.
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

// Whether `function` is pg_idem's C function `symbol`, as the install
// script makes it (CREATE OR REPLACE FUNCTION keeps its OID).
bool is_own_function(Oid function, const char *symbol)
{
	HeapTuple row = SearchSysCache1(PROCOID, ObjectIdGetDatum(function));
	if (!HeapTupleIsValid(row))
		return false;
	bool ours = reinterpret_cast<Form_pg_proc>(GETSTRUCT(row))->prolang == ClanguageId;
	bool isnull;
	Datum src = SysCacheGetAttr(PROCOID, row, Anum_pg_proc_prosrc, &isnull);
	if (ours && !isnull) {
		char *name = TextDatumGetCString(src);
		ours = strcmp(name, symbol) == 0;
		pfree(name);
	}
	ReleaseSysCache(row);
	return ours && !isnull;
}

// Whether trigger `t` is one of idem_records' as the install script makes
// it: enabled ALWAYS, not deferred, no column list or arguments, pg_idem's
// function, and WHEN (idem_cache_enabled()) or none, `row`-level or not,
// BEFORE or not, for UPDATE OR DELETE or for TRUNCATE.
bool made_as_installed(const Trigger &t, const ExtensionObjects &loc, bool row, bool before,
		       bool truncate)
{
	int16 type = t.tgtype;
	if (t.tgenabled != TRIGGER_FIRES_ALWAYS || t.tgdeferrable || t.tginitdeferred ||
	    t.tgnattr != 0 || t.tgnargs != 0 || t.tgfoid != loc.records_trigger_function ||
	    bool(TRIGGER_FOR_ROW(type)) != row || bool(TRIGGER_FOR_BEFORE(type)) != before ||
	    !(truncate ? TRIGGER_FOR_TRUNCATE(type)
		       : TRIGGER_FOR_UPDATE(type) && TRIGGER_FOR_DELETE(type)))
		return false;
	if (t.tgqual == NULL)
		return true;
	Node *when = static_cast<Node *>(stringToNode(t.tgqual));
	return IsA(when, FuncExpr) && reinterpret_cast<FuncExpr *>(when)->funcid ==
					  loc.cache_enabled_function &&
	       reinterpret_cast<FuncExpr *>(when)->args == NIL;
}

// Whether `rel` has the three triggers of idem_records as the install script
// makes them (made_as_installed), with pg_idem's functions, so that every
// change made in SQL reaches the cache. A database still on 0.1's SQL has
// none, and an operator may disable or replace them: such records are
// never cached. Read under the filler's ROW EXCLUSIVE lock on rel, which
// CREATE, ALTER and DROP TRIGGER wait for; each of those, and a new
// definition of either function, bumps the epoch at commit
// (replaces_records), so no entry made before answers after. Worked out
// once per relcache entry (guard_verdict).
bool guarded_by_triggers(Relation rel)
{
	if (guard_verdict >= 0 && guard_relid == RelationGetRelid(rel))
		return guard_verdict == 1;
	uint64 resets = guard_resets;
	const ExtensionObjects &loc = extension_objects();
	const TriggerDesc *desc = rel->trigdesc;
	bool changed = false;
	bool changing = false;
	bool truncating = false;
	for (int i = 0; desc != NULL && i < desc->numtriggers; i++) {
		const Trigger &t = desc->triggers[i];
		if (strcmp(t.tgname, "idem_records_changed") == 0)
			changed = made_as_installed(t, loc, true, false, false);
		else if (strcmp(t.tgname, "idem_records_changing") == 0)
			changing = made_as_installed(t, loc, true, true, false);
		else if (strcmp(t.tgname, "idem_records_truncating") == 0)
			truncating = made_as_installed(t, loc, false, true, true);
	}
	bool guarded = changed && changing && truncating &&
		       records_layout_as_installed(RelationGetDescr(rel), loc) &&
		       is_own_function(loc.records_trigger_function, "idem_records_changed") &&
		       is_own_function(loc.cache_enabled_function, "idem_cache_enabled");
	// Changed meanwhile: what was read may be stale, so keep nothing, and
	// work it out again next time.
	if (guard_resets != resets)
		return false;
	guard_relid = RelationGetRelid(rel);
	guard_verdict = guarded ? 1 : 0;
	return guarded;
}

// Whether `id` is the key id whose record pg_idem's own SQL is changing.
bool own_change_of(const bytea *id)
{
	size_t len = VARSIZE_ANY_EXHDR(id);
	return own_change.len > 0 && len == own_change.len &&
	       memcmp(VARDATA_ANY(id), own_change.id, len) == 0;
}

// Whether the cache may have an answer for ref's key in this transaction;
// sets *hash to the key's hash. Most misses (every new key) end here,
// without a lock and before anything is allocated.
bool may_answer(const RecordRef &ref, uint64 *hash)
{
	if (!cache_usable() || !exact_id(ref.id))
		return false;
	*hash = hash_id(ref.id);
	return may_hold(*hash);
}

// Finds the entry of ref's key (whose hash may_answer gave) that may answer
// at `now` and hands it to `answer`, which copies what it needs; returns
// whether `answer` took it and the bucket did not change meanwhile (false
// when there is none). Without a lock (file header): `answer` must not
// raise errors, must bound what it copies, and its copy counts only if this
// returns true. An entry made from another idem_records than the current
// one, or in an earlier epoch, is evicted.
template <typename Answer>
bool lookup(const ExtensionObjects &loc, const RecordRef &ref, uint64 hash, TimestampTz now,
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
	int slot = find_slot(MyDatabaseId, hash, ref.id);
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
		LWLockAcquire(shared->lock, LW_EXCLUSIVE);
		epoch = pg_atomic_read_u64(epoch_of(MyDatabaseId));
		slot = find_slot(MyDatabaseId, hash, ref.id);
		if (slot >= 0) {
			e = in_bucket(hash, slot);
			if (e->relid != relid || e->epoch != epoch) {
				begin_change(hash);
				tags_of_bucket(hash)[slot] = 0;
				end_change(hash);
			}
		}
		LWLockRelease(shared->lock);
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
	r.replayable = record.status == extension_objects().status_completed &&
		       !record.has_lease && !record.has_last_error;
	if (!r.replayable)
		return r;
	if (record.fingerprint != NULL) {
		r.has_fingerprint = true;
		fingerprint_digest(VARDATA_ANY(record.fingerprint),
				   VARSIZE_ANY_EXHDR(record.fingerprint), r.fingerprint);
	}
	if (record.result != 0) {
		if (toast_raw_datum_size(record.result) > shared->result_size)
			r.replayable = false;
		else
			r.result = PG_DETOAST_DATUM(record.result);
	}
	return r;
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

bool cache_usable()
{
	return shared != NULL && !IsolationUsesXactSnapshot() && !records_replaced &&
	       !records_changed && own_change.len == 0;
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

bool cache_lookup(const ExtensionObjects &loc, const RecordRef &ref, TimestampTz now)
{
	uint64 hash;
	return may_answer(ref, &hash) && lookup(loc, ref, hash, now, [](const Entry *) { return true; });
}

bool cache_lookup_completed(const ExtensionObjects &loc, const RecordRef &ref, TimestampTz now,
			    const text *fingerprint, CachedCompletion *out)
{
	uint64 hash;
	if (!may_answer(ref, &hash))
		return false;
	uint8 call_fingerprint[fingerprint_digest_length];
	if (fingerprint != NULL)
		fingerprint_digest(VARDATA_ANY(fingerprint), VARSIZE_ANY_EXHDR(fingerprint),
				   call_fingerprint);
	// Room for a result, taken before the lock (palloc may raise errors).
	char *result = shared->result_size > 0 ? static_cast<char *>(palloc(shared->result_size))
					       : NULL;
	Oid completed = loc.status_completed;
	uint32 result_len = 0;
	bool hit = lookup(loc, ref, hash, now, [&](Entry *e) {
		if (!e->replayable)
			return false;
		EntryReplay *r = replay_of_entry(e);
		if (r->status != completed)
			return false;
		if (fingerprint != NULL && r->has_fingerprint &&
		    memcmp(r->fingerprint, call_fingerprint, sizeof call_fingerprint) != 0)
			return false;
		out->attempts = r->attempts;
		out->expires_at = e->expires_at;
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

void cache_remember(Relation rel, TupleTableSlot *slot, const RecordRef &ref,
		    const CacheableRecord &record, uint64 generation)
{
	if (!cache_usable() || !exact_id(ref.id) || !guarded_by_triggers(rel))
		return;
	bool should_free;
	HeapTuple tuple = ExecFetchSlotHeapTuple(slot, false, &should_free);
	bool ok = settled(tuple->t_data);
	if (should_free)
		heap_freetuple(tuple);
	if (!ok)
		return;
	Replay replay = replay_of(record);
	if (test_cache_fill_lock != 0) {
		Datum key = Int64GetDatum(test_cache_fill_lock);
		DirectFunctionCall1(pg_advisory_lock_int8, key);
		DirectFunctionCall1(pg_advisory_unlock_int8, key);
	}

	uint64 hash = hash_id(ref.id);
	size_t len = VARSIZE_ANY_EXHDR(ref.id);
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (pg_atomic_read_u64(generation_of(MyDatabaseId, hash)) == generation) {
		uint32 *tags = tags_of_bucket(hash);
		// The key's own entry first (a key is never in a bucket twice),
		// then an empty one.
		int slot = find_slot(MyDatabaseId, hash, ref.id);
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
		EntryReplay *kept = replay_of_entry(victim);
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
		memcpy(victim->id, VARDATA_ANY(ref.id), len);
		kept->status = record.status;
		kept->attempts = int32(record.attempts);
		kept->has_fingerprint = replay.has_fingerprint;
		memcpy(kept->fingerprint, replay.fingerprint, sizeof replay.fingerprint);
		kept->result_len = 0;
		if (replay.replayable && replay.result != NULL) {
			kept->result_len = VARSIZE(replay.result);
			memcpy(result_of(kept), replay.result, kept->result_len);
		}
		end_change(hash);
	}
	LWLockRelease(shared->lock);
}

OwnChange cache_own_change_begin(const bytea *id)
{
	OwnChange interrupted = own_change;
	size_t len = VARSIZE_ANY_EXHDR(id);
	Assert(len > 0 && len <= max_key_id_bytes);
	memcpy(own_change.id, VARDATA_ANY(id), len);
	own_change.len = len;
	return interrupted;
}

void cache_own_change_end(const OwnChange &interrupted) { own_change = interrupted; }

void cache_invalidate(const bytea *id)
{
	// Only exact ids are ever cached, and a counter only protects the
	// insertion of the key whose record changed.
	if (shared == NULL || !exact_id(id))
		return;
	uint64 hash = hash_id(id);
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	remove_locked(MyDatabaseId, hash, id);
	pg_atomic_fetch_add_u64(generation_of(MyDatabaseId, hash), 1);
	LWLockRelease(shared->lock);
}

namespace {

void bump_epoch(Oid dbid)
{
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	pg_atomic_fetch_add_u64(epoch_of(dbid), 1);
	LWLockRelease(shared->lock);
}

// The row of object `oid` in `catalog` (found by its OID index `index` on
// column `oid_column`) as the running command sees it, its own uncommitted
// changes included (SnapshotSelf): an object access hook runs before the
// command counter increment that would show them to the catalog snapshot.
// Returns whether there is one, after calling `read` with it.
template <typename Read>
bool read_current_row(Oid catalog, Oid index, AttrNumber oid_column, Oid oid, Read read)
{
	Relation rel = table_open(catalog, AccessShareLock);
	ScanKeyData key;
	ScanKeyInit(&key, oid_column, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(oid));
	SysScanDesc scan = systable_beginscan(rel, index, true, SnapshotSelf, 1, &key);
	HeapTuple row = systable_getnext(scan);
	bool found = HeapTupleIsValid(row);
	if (found)
		read(row);
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

// Whether relid is a table named idem_records, in any schema, before the
// running command or after it (a rename away or back): a user's own table
// of that name only costs the entries of its database.
bool named_records(Oid relid)
{
	char *before = get_rel_name(relid);
	bool named = before != NULL && strcmp(before, "idem_records") == 0;
	if (before != NULL)
		pfree(before);
	read_current_row(RelationRelationId, ClassOidIndexId, Anum_pg_class_oid, relid,
			 [&](HeapTuple row) {
				 const char *now =
				     NameStr(reinterpret_cast<Form_pg_class>(GETSTRUCT(row))->relname);
				 named = named || strcmp(now, "idem_records") == 0;
			 });
	return named;
}

bool trigger_function_name(const char *name)
{
	return strcmp(name, "idem_records_changed") == 0 || strcmp(name, "idem_cache_enabled") == 0;
}

// Whether `function` is named like one of the functions idem_records'
// triggers run, before the running command or after it.
bool named_trigger_function(Oid function)
{
	char *before = get_func_name(function);
	bool named = before != NULL && trigger_function_name(before);
	if (before != NULL)
		pfree(before);
	read_current_row(ProcedureRelationId, ProcedureOidIndexId, Anum_pg_proc_oid, function,
			 [&](HeapTuple row) {
				 named = named ||
					 trigger_function_name(NameStr(
					     reinterpret_cast<Form_pg_proc>(GETSTRUCT(row))->proname));
			 });
	return named;
}

// Whether `access` may change an idem_records without its row triggers: a
// TRUNCATE, DROP or ALTER TABLE of it (a rename, a column added, dropped or
// given a new type USING anything), a CREATE (OR REPLACE), ALTER (ENABLE,
// DISABLE, RENAME) or DROP of one of its triggers (a trigger that cannot be
// found counts), or a new definition of a function named like those its
// triggers run.
bool replaces_records(ObjectAccessType access, Oid class_id, Oid object_id)
{
	bool defines = access == OAT_POST_CREATE || access == OAT_POST_ALTER || access == OAT_DROP;
	if (class_id == RelationRelationId)
		return (access == OAT_TRUNCATE || defines) && named_records(object_id);
	if (class_id == TriggerRelationId && defines) {
		Oid table = InvalidOid;
		read_current_row(TriggerRelationId, TriggerOidIndexId, Anum_pg_trigger_oid,
				 object_id, [&](HeapTuple row) {
					 table = reinterpret_cast<Form_pg_trigger>(GETSTRUCT(row))
						     ->tgrelid;
				 });
		return !OidIsValid(table) || named_records(table);
	}
	if (class_id == ProcedureRelationId && defines)
		return named_trigger_function(object_id);
	return false;
}

void note_emptying(ObjectAccessType access, Oid class_id, Oid object_id, int sub_id, void *arg)
{
	if (previous_object_access != NULL)
		previous_object_access(access, class_id, object_id, sub_id, arg);
	if (shared == NULL)
		return;
	if (access == OAT_DROP && class_id == DatabaseRelationId) {
		bump_epoch(object_id);
		dropped_database = object_id;
	} else if (replaces_records(access, class_id, object_id))
		records_replaced = true;
}

void bump_at_commit(XactEvent event, void *)
{
	switch (event) {
	case XACT_EVENT_PRE_COMMIT:
	case XACT_EVENT_PARALLEL_PRE_COMMIT:
	case XACT_EVENT_PRE_PREPARE:
		if (records_replaced && shared != NULL)
			bump_epoch(MyDatabaseId);
		if (OidIsValid(dropped_database) && shared != NULL)
			bump_epoch(dropped_database);
		break;
	case XACT_EVENT_COMMIT:
	case XACT_EVENT_PARALLEL_COMMIT:
	case XACT_EVENT_ABORT:
	case XACT_EVENT_PARALLEL_ABORT:
	case XACT_EVENT_PREPARE:
		records_replaced = false;
		records_changed = false;
		dropped_database = InvalidOid;
		own_change.len = 0;
		break;
	}
}

// An error between cache_own_change_begin and _end that a savepoint
// catches must not leave the key exempt from idem_records_changing; what
// the change did is undone, but the transaction stays off the cache.
void end_own_change_on_abort(SubXactEvent event, SubTransactionId, SubTransactionId, void *)
{
	if (event == SUBXACT_EVENT_ABORT_SUB && own_change.len > 0) {
		own_change.len = 0;
		records_changed = true;
	}
}

void forget_guard_verdict(Oid relid)
{
	if (relid == InvalidOid || relid == guard_relid) {
		guard_verdict = -1;
		guard_resets++;
	}
}

void forget_guard_verdict_of_functions(Datum, int, uint32)
{
	guard_verdict = -1;
	guard_resets++;
}

} // namespace

void cache_register_hooks()
{
	previous_object_access = object_access_hook;
	object_access_hook = note_emptying;
	RegisterXactCallback(bump_at_commit, NULL);
	RegisterSubXactCallback(end_own_change_on_abort, NULL);
	on_relation_invalidation(forget_guard_verdict);
	CacheRegisterSyscacheCallback(PROCOID, forget_guard_verdict_of_functions, 0);
}

} // namespace idem

// idem_records' three triggers (pg_idem--0.1--0.2.sql; file header):
//   idem_records_changed, AFTER UPDATE OR DELETE, per row: forgets the key
//     of the old row (and of the new one, should an UPDATE change key_id),
//     after the change, as cache_invalidate requires;
//   idem_records_changing, BEFORE UPDATE OR DELETE, per row: keeps this
//     transaction off the cache until it ends, unless the change is
//     pg_idem's own (cache_own_change_begin), which invalidates at once;
//   idem_records_truncating, BEFORE TRUNCATE: the same, and the epoch is
//     bumped at commit (even for a TRUNCATE that logical replication
//     applies, which no object access hook sees).
IDEM_SQL_FUNCTION(idem_records_changed)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR, errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
			errmsg("idem_records_changed: not called as a trigger"));
	TriggerData *trigger = reinterpret_cast<TriggerData *>(fcinfo->context);
	TriggerEvent event = trigger->tg_event;
	TupleDesc desc = RelationGetDescr(trigger->tg_relation);
	bool isnull;
	if (TRIGGER_FIRED_BY_TRUNCATE(event)) {
		idem::records_replaced = true;
		return PointerGetDatum(NULL);
	}
	if (TRIGGER_FIRED_BEFORE(event)) {
		Datum id = heap_getattr(trigger->tg_trigtuple, 1, desc, &isnull);
		if (isnull || !idem::own_change_of(DatumGetByteaPP(id)))
			idem::records_changed = true;
		return PointerGetDatum(TRIGGER_FIRED_BY_UPDATE(event) ? trigger->tg_newtuple
								      : trigger->tg_trigtuple);
	}
	if (idem::shared != NULL) {
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
