// See stats.hpp. idem_stats() and idem_stats_reset() are here too.
//
// The table. A shared hash table of entries keyed by (database, scope), of a
// fixed size set at server start by pg_idem.stats_max_scopes (as
// pg_stat_statements.max sizes pg_stat_statements). It never evicts: no
// count is dropped for lack of room. Once it holds stats_max_scopes scopes, a
// scope not yet in it is counted in its database's "other" entry (scope NULL
// in idem_stats). The first max_other_entries databases that need one get
// one; after that (more databases than that, all over the limit) counts go
// to a last entry shared by all databases (database NULL). So every count
// lands somewhere and nothing ever fails for lack of room.
//
// Locking. The shared table follows pg_stat_statements' protocol; counting
// goes through a slot of the counting backend's own first:
// - shared->lock, the LWLock of the tranche "pg_idem stats", protects the
//   hash table's structure and the entry counts in the header. Looking an
//   entry up takes it SHARED; creating entries (the first count of a new
//   database and scope, while there is room) and removing them
//   (idem_stats_reset) take it EXCLUSIVE.
// - Each entry's mutex, a spinlock, protects its counters. Adding to them or
//   reading them needs the LWLock in either mode (so that the entry cannot
//   vanish) and the mutex, held for a few instructions.
// - Backend slots. Every backend has a slot in shared memory, at its
//   0-based backend number (compat::my_backend_index), written by it
//   alone, with the counts of the last slot_scopes scopes it counted,
//   each tagged with the key of the entry its counts belong to (its own,
//   or the "other" entry it was routed to).
//   A count is an addition to the backend's own slot, between two
//   increments of the slot's changecount (odd while it writes), as
//   PgBackendStatus is written: no lock, no atomic operation, no cache line
//   that another backend writes. So the hot path contends with nobody. The
//   LWLock (SHARED) is taken only when a backend counts a scope that is not
//   in its slot: it routes the scope to its entry (creating it under
//   EXCLUSIVE), and when the slot is full it first adds its oldest scope's
//   counts to that scope's entry (under the mutex) and clears them.
// - Readers (idem_stats) take the LWLock EXCLUSIVE, so that no such move
//   from a slot to an entry is half done, copy the entries, then add every
//   slot's counts, each slot copied until its changecount is even and
//   unchanged across the copy (as pgstat_read_current_status does).
// - A reset bumps shared->generation under EXCLUSIVE. Slots of an earlier
//   generation count for nothing: readers skip them, and their owner
//   clears them at its next count. A count made while a reset runs may be
//   lost with the rest; it happened as good as before the reset.
// - A backend that exits leaves its slot as it is: its counts still show,
//   and the next backend with its number moves them to their entries
//   before it counts anything.
// - Nothing that can raise an error runs under a spinlock; under the LWLock
//   only hash searches, except that idem_stats() pallocs its copy under
//   EXCLUSIVE (an error there releases the lock with the transaction, as in
//   pg_stat_statements).
// - At server start and at shutdown the postmaster reads and writes the
//   table and the slots without any lock, spinlocks included: no other
//   process exists at those moments, and one that was killed by an
//   immediate shutdown may have left a spinlock held. At shutdown it first
//   adds every slot's counts to their entries.
//
// The stats file. When the postmaster exits normally (a smart, fast or
// immediate shutdown) it writes every entry to pg_stat/pg_idem_stats.stat
// (a temporary file, then a durable rename); at start it loads the file and
// deletes it. After a crash (the postmaster reinitializes shared memory, or
// is itself killed) nothing is written,
// and the next start finds no file (the previous start deleted it), so the
// counters start at zero rather than from a stale copy. Loaded entries go
// through the same overflow rules, so a lower stats_max_scopes folds the
// excess into "other" entries.
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

#include "core/record_key.hpp"
#include "pg/as_owner.hpp"
#include "pg/compat.hpp"
#include "pg/guard.hpp"
#include "pg/scopes/scope_grants.hpp"
#include "pg/settings.hpp"
#include "pg/stats/stats.hpp"

#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace idem
{

namespace
{

constexpr const char tranche_name[] = "pg_idem stats";
constexpr const char file_path[] = PGSTAT_STAT_PERMANENT_DIRECTORY "/pg_idem_stats.stat";
constexpr const char temp_path[] = PGSTAT_STAT_PERMANENT_DIRECTORY "/pg_idem_stats.tmp";
constexpr uint32 file_magic = 0x1de57a75;
constexpr uint32 file_format = 2; // 2: the header gives the size of an entry
// Databases that can have an "other" entry of their own.
constexpr int max_other_entries = 64;

static_assert(max_scope_bytes <= 255, "a scope's length must fit the key's uint8");

// The hash key. Zeroed before it is filled: the hash covers every byte.
struct Key {
	Oid dbid;
	uint8 scope_len; // 0: the database's "other" entry (no scope is empty)
	char scope[max_scope_bytes];
};

struct Entry {
	Key key; // first: dynahash's key
	slock_t mutex;
	TimestampTz since; // when counting began (creation, or a reset)
	int64 counts[stat_counters];
};

// An entry without its mutex: in the file, and in idem_stats()'s copy.
struct Counts {
	Key key;
	TimestampTz since;
	int64 counts[stat_counters];
};

// idem_stats()'s index of its rows.
struct RowOfKey {
	Key key;
	long row;
};

struct FileHeader {
	uint32 magic;
	uint32 format;
	uint32 counters;
	uint32 entry_size; // sizeof(Counts), which a longer scope would change
	int32 entries;
};

struct SharedStats {
	LWLock *lock;
	int scopes;                  // entries with a scope
	int others;                  // "other" entries of a database
	pg_atomic_uint32 generation; // bumped by every reset
	int slots;                   // backend slots, one per backend number
	Size slot_size;              // the slots are slot_size apart
	Entry all_databases;         // the last resort, dbid InvalidOid
};

// The scopes a backend slot holds; a backend that counts more in turn moves
// the oldest one's counts to its entry.
constexpr int slot_scopes = 8;

struct SlotScope {
	Key routed; // the key of the entry the counts belong to
	int64 counts[stat_counters];
};

// A backend's slot (file header). Written by its owner only.
struct BackendSlot {
	uint32 changecount; // odd while the owner writes
	uint32 generation;  // shared->generation when its counts began
	int used;           // scopes[0 .. used) hold counts
	SlotScope scopes[slot_scopes];
};

SharedStats *shared = NULL;
HTAB *table = NULL;
char *slots_area = NULL;

// This process's slot: what it has adopted, and the scope (not routed)
// each of its scopes[] counts, in the same order.
struct OwnSlot {
	BackendSlot *slot; // NULL until adopted (or no backend number)
	uint32 generation;
	int next_evicted; // round robin over scopes[] once full
	Key counted[slot_scopes];
};
OwnSlot own = {NULL, 0, 0, {}};

long table_size()
{
	return long(stats_max_scopes) + max_other_entries;
}

Size slot_size()
{
	return CACHELINEALIGN(sizeof(BackendSlot));
}

BackendSlot *slot_at(int i)
{
	return reinterpret_cast<BackendSlot *>(slots_area + Size(i) * shared->slot_size);
}

void make_key(Key *key, Oid dbid, const char *scope, size_t len)
{
	memset(key, 0, sizeof *key);
	key->dbid = dbid;
	// Longer scopes are refused before anything counts them.
	if (len > max_scope_bytes)
		len = max_scope_bytes;
	key->scope_len = uint8(len);
	if (len > 0)
		memcpy(key->scope, scope, len);
}

void init_entry(Entry *entry)
{
	SpinLockInit(&entry->mutex);
	entry->since = GetCurrentTimestamp();
	memset(entry->counts, 0, sizeof entry->counts);
}

bool any_counts(const int64 *counts)
{
	for (int i = 0; i < stat_counters; i++)
		if (counts[i] != 0)
			return true;
	return false;
}

Entry *find(const Key *key)
{
	return static_cast<Entry *>(hash_search(table, key, HASH_FIND, NULL));
}

// Makes the entry of `key`, known to be absent. Needs EXCLUSIVE (or no
// other process). NULL only if the table is out of room, which the callers'
// counting prevents.
Entry *create(const Key *key)
{
	bool found;
	Entry *entry = static_cast<Entry *>(hash_search(table, key, HASH_ENTER_NULL, &found));
	if (entry != NULL && !found)
		init_entry(entry);
	return entry;
}

// The entry that counts for `key`: its own, else its database's "other"
// entry, else the one of all databases. With `may_create` false (under
// SHARED) returns NULL where an entry would have to be made; with it true
// (under EXCLUSIVE) makes it.
Entry *route(const Key *key, bool may_create)
{
	Entry *entry = find(key);
	if (entry != NULL)
		return entry;
	if (key->dbid == InvalidOid)
		return &shared->all_databases;
	if (key->scope_len > 0 && shared->scopes < stats_max_scopes) {
		if (!may_create)
			return NULL;
		if ((entry = create(key)) != NULL) {
			shared->scopes++;
			return entry;
		}
	}
	Key other;
	make_key(&other, key->dbid, NULL, 0);
	if (key->scope_len > 0 && (entry = find(&other)) != NULL)
		return entry;
	if (shared->others < max_other_entries) {
		if (!may_create)
			return NULL;
		if ((entry = create(&other)) != NULL) {
			shared->others++;
			return entry;
		}
	}
	return &shared->all_databases;
}

// The entry whose key is `routed` (a key route() gave), or NULL once a
// reset removed it. Under the LWLock, or alone.
Entry *entry_of(const Key *routed)
{
	return routed->dbid == InvalidOid ? &shared->all_databases : find(routed);
}

// Under the LWLock.
void add_counts(Entry *entry, const int64 *counts)
{
	SpinLockAcquire(&entry->mutex);
	for (int i = 0; i < stat_counters; i++)
		entry->counts[i] += counts[i];
	SpinLockRelease(&entry->mutex);
}

bool same_key(const Key &a, const Key &b)
{
	return a.dbid == b.dbid && a.scope_len == b.scope_len &&
	       memcmp(a.scope, b.scope, a.scope_len) == 0;
}

// The owner's write of its slot, as PGSTAT_BEGIN_WRITE_ACTIVITY.
void begin_slot_write(BackendSlot *slot)
{
	slot->changecount++;
	pg_write_barrier();
}

void end_slot_write(BackendSlot *slot)
{
	pg_write_barrier();
	slot->changecount++;
}

// In a write of the owner, under the LWLock: moves one scope's counts to
// their entry.
void move_to_entry(SlotScope *scope)
{
	Entry *entry = entry_of(&scope->routed);
	if (entry != NULL)
		add_counts(entry, scope->counts);
	memset(scope->counts, 0, sizeof scope->counts);
}

// Under the LWLock: makes our backend number's slot ours, in generation `gen`.
// Counts a previous owner left in this generation move to their entries;
// those of an earlier generation were reset.
void adopt(BackendSlot *slot, uint32 gen)
{
	begin_slot_write(slot);
	if (slot->generation == gen)
		for (int i = 0; i < slot->used && i < slot_scopes; i++)
			move_to_entry(&slot->scopes[i]);
	slot->used = 0;
	slot->generation = gen;
	end_slot_write(slot);
	own.slot = slot;
	own.generation = gen;
	own.next_evicted = 0;
}

// The hot path: adds to our slot if it holds key's scope in the current
// generation; false if it does not.
bool add_to_own_slot(const Key &key, const int64 *counts)
{
	BackendSlot *slot = own.slot;
	if (slot == NULL || pg_atomic_read_u32(&shared->generation) != own.generation)
		return false;
	for (int i = 0; i < slot->used; i++) {
		if (!same_key(own.counted[i], key))
			continue;
		begin_slot_write(slot);
		for (int c = 0; c < stat_counters; c++)
			slot->scopes[i].counts[c] += counts[c];
		end_slot_write(slot);
		return true;
	}
	return false;
}

void add(Oid dbid, const char *scope, size_t len, const int64 *counts)
{
	if (shared == NULL)
		return;
	Key key;
	make_key(&key, dbid, scope, len);
	if (add_to_own_slot(key, counts))
		return;

	LWLockAcquire(shared->lock, LW_SHARED);
	Entry *entry = route(&key, false);
	if (entry == NULL) {
		// First count of this scope: make its entry. Another backend may
		// have made it meanwhile; route() finds it then.
		LWLockRelease(shared->lock);
		LWLockAcquire(shared->lock, LW_EXCLUSIVE);
		entry = route(&key, true);
	}
	int index = compat::my_backend_index();
	BackendSlot *slot = index >= 0 && index < shared->slots ? slot_at(index) : NULL;
	if (slot == NULL) {
		add_counts(entry, counts);
		LWLockRelease(shared->lock);
		return;
	}
	// Under the lock, the generation cannot change.
	uint32 gen = pg_atomic_read_u32(&shared->generation);
	if (own.slot != slot || own.generation != gen)
		adopt(slot, gen);
	begin_slot_write(slot);
	int i;
	if (slot->used < slot_scopes) {
		i = slot->used++;
	} else {
		i = own.next_evicted;
		own.next_evicted = (i + 1) % slot_scopes;
		move_to_entry(&slot->scopes[i]);
	}
	slot->scopes[i].routed = entry->key;
	memcpy(slot->scopes[i].counts, counts, sizeof slot->scopes[i].counts);
	own.counted[i] = key;
	end_slot_write(slot);
	LWLockRelease(shared->lock);
}

// A consistent copy of a slot (file header); the reader holds EXCLUSIVE.
// Alone (the postmaster at shutdown), the slot is taken as it is: its
// owner may have been killed in the middle of a write.
void copy_slot(const BackendSlot *slot, BackendSlot *out, bool alone)
{
	const volatile BackendSlot *v = slot;
	for (;;) {
		uint32 before = v->changecount;
		pg_read_barrier();
		if ((before & 1) == 0 || alone) {
			out->generation = v->generation;
			out->used = Max(0, Min(int(v->used), slot_scopes));
			memcpy(out->scopes, const_cast<const SlotScope *>(slot->scopes),
			       sizeof(SlotScope) * out->used);
			pg_read_barrier();
			if (v->changecount == before || alone)
				return;
		}
		pg_spin_delay();
	}
}

// Under EXCLUSIVE, or alone: calls add_to(routed key, counts) for every
// scope of every slot of the current generation.
template <typename Add> void for_each_slot_scope(bool alone, Add add_to)
{
	uint32 gen = pg_atomic_read_u32(&shared->generation);
	BackendSlot copy;
	for (int b = 0; b < shared->slots; b++) {
		copy_slot(slot_at(b), &copy, alone);
		if (copy.generation != gen)
			continue;
		for (int i = 0; i < copy.used; i++)
			add_to(copy.scopes[i].routed, copy.scopes[i].counts);
	}
}

// Under EXCLUSIVE (or alone): forgets every entry.
void clear_table()
{
	HASH_SEQ_STATUS seq;
	hash_seq_init(&seq, table);
	Entry *entry;
	while ((entry = static_cast<Entry *>(hash_seq_search(&seq))) != NULL)
		hash_search(table, &entry->key, HASH_REMOVE, NULL);
	shared->scopes = 0;
	shared->others = 0;
	init_entry(&shared->all_databases);
}

void fill_counts(Counts *out, const Entry *entry)
{
	out->key = entry->key;
	out->since = entry->since;
	memcpy(out->counts, entry->counts, sizeof out->counts);
}

void copy_counts(Counts *out, Entry *entry)
{
	SpinLockAcquire(&entry->mutex);
	fill_counts(out, entry);
	SpinLockRelease(&entry->mutex);
}

// Adds an entry read from the file (alone, at start).
void merge_loaded(const Counts &loaded)
{
	Key key;
	make_key(&key, loaded.key.dbid, loaded.key.scope, loaded.key.scope_len);
	Entry *entry = route(&key, true);
	for (int i = 0; i < stat_counters; i++)
		entry->counts[i] += loaded.counts[i];
	if (loaded.since < entry->since)
		entry->since = loaded.since;
}

// At start, in the postmaster: loads and deletes the file of the last
// clean shutdown, if any. A damaged file is logged and ignored.
void load_file()
{
	FILE *file = AllocateFile(file_path, PG_BINARY_R);
	if (file == NULL) {
		if (errno != ENOENT)
			ereport(LOG, errcode_for_file_access(),
			        errmsg("pg_idem: could not read file \"%s\": %m", file_path));
		return;
	}
	FileHeader header;
	bool ok = fread(&header, sizeof header, 1, file) == 1 && header.magic == file_magic &&
	          header.format == file_format && header.counters == uint32(stat_counters) &&
	          header.entry_size == uint32(sizeof(Counts)) && header.entries >= 0;
	for (int32 i = 0; ok && i < header.entries; i++) {
		Counts loaded;
		ok = fread(&loaded, sizeof loaded, 1, file) == 1 && loaded.key.scope_len <= max_scope_bytes;
		if (ok)
			merge_loaded(loaded);
	}
	FreeFile(file);
	if (!ok) {
		ereport(LOG, errmsg("pg_idem: ignoring invalid data in file \"%s\"", file_path),
		        errdetail("The pg_idem statistics start at zero."));
		clear_table();
	}
	unlink(file_path);
}

bool write_entries(FILE *file)
{
	bool with_all = any_counts(shared->all_databases.counts);
	FileHeader header = {file_magic, file_format, uint32(stat_counters), uint32(sizeof(Counts)),
	                     int32(hash_get_num_entries(table) + (with_all ? 1 : 0))};
	if (fwrite(&header, sizeof header, 1, file) != 1)
		return false;
	HASH_SEQ_STATUS seq;
	hash_seq_init(&seq, table);
	Entry *entry;
	while ((entry = static_cast<Entry *>(hash_seq_search(&seq))) != NULL) {
		Counts out;
		fill_counts(&out, entry);
		if (fwrite(&out, sizeof out, 1, file) != 1) {
			hash_seq_term(&seq);
			return false;
		}
	}
	if (with_all) {
		Counts out;
		fill_counts(&out, &shared->all_databases);
		if (fwrite(&out, sizeof out, 1, file) != 1)
			return false;
	}
	return true;
}

// on_shmem_exit of the postmaster: writes the file when it exits normally
// (code 0) only; not when it reinitializes after a crash (code 1).
void write_file(int code, Datum)
{
	if (code != 0 || shared == NULL || table == NULL)
		return;
	for_each_slot_scope(true, [](const Key &routed, const int64 *counts) {
		if (Entry *entry = entry_of(&routed))
			for (int i = 0; i < stat_counters; i++)
				entry->counts[i] += counts[i];
	});
	FILE *file = AllocateFile(temp_path, PG_BINARY_W);
	bool ok = file != NULL && write_entries(file);
	int saved_errno = errno;
	if (file != NULL && FreeFile(file) != 0 && ok) {
		ok = false;
		saved_errno = errno;
	}
	if (!ok) {
		errno = saved_errno;
		ereport(LOG, errcode_for_file_access(),
		        errmsg("pg_idem: could not write file \"%s\": %m", temp_path));
		unlink(temp_path);
		return;
	}
	(void)durable_rename(temp_path, file_path, LOG);
}

void require_preloaded(const char *fn)
{
	if (shared == NULL)
		ereport(ERROR, errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
		        errmsg("%s: pg_idem statistics are off", fn),
		        errdetail("They are kept in shared memory, which pg_idem only has when "
		                  "it is loaded by shared_preload_libraries."),
		        errhint("Add pg_idem to shared_preload_libraries and restart the server."));
}

} // namespace

// PostgreSQL calls this through the guard (guard.hpp).
extern "C" void idem_stats_write_file(int code, Datum arg)
{
	guard([&] { write_file(code, arg); });
}

void stats_request_shmem()
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(SharedStats)));
	RequestAddinShmemSpace(hash_estimate_size(table_size(), sizeof(Entry)));
	RequestAddinShmemSpace(mul_size(Size(MaxBackends), slot_size()) + PG_CACHE_LINE_SIZE);
	RequestNamedLWLockTranche(tranche_name, 1);
}

void stats_init_shmem()
{
	// Again after a crash: the postmaster builds shared memory anew.
	shared = NULL;
	table = NULL;
	slots_area = NULL;
	own.slot = NULL;
	bool found;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	SharedStats *s =
	    static_cast<SharedStats *>(ShmemInitStruct("pg_idem stats", sizeof(SharedStats), &found));
	if (!found) {
		s->lock = &(GetNamedLWLockTranche(tranche_name))->lock;
		s->scopes = 0;
		s->others = 0;
		pg_atomic_init_u32(&s->generation, 0);
		s->slots = MaxBackends;
		s->slot_size = slot_size();
		memset(&s->all_databases.key, 0, sizeof s->all_databases.key);
		init_entry(&s->all_databases);
	}
	HASHCTL info;
	memset(&info, 0, sizeof info);
	info.keysize = sizeof(Key);
	info.entrysize = sizeof(Entry);
	table = ShmemInitHash("pg_idem stats hash", table_size(), table_size(), &info,
	                      HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	char *area = static_cast<char *>(
	    ShmemInitStruct("pg_idem stats backends",
	                    mul_size(Size(s->slots), s->slot_size) + PG_CACHE_LINE_SIZE, &found));
	slots_area = reinterpret_cast<char *>(CACHELINEALIGN(area));
	if (!found)
		memset(slots_area, 0, mul_size(Size(s->slots), s->slot_size));
	shared = s;
	LWLockRelease(AddinShmemInitLock);

	if (!IsUnderPostmaster)
		on_shmem_exit(idem_stats_write_file, (Datum)0);
	if (!found)
		load_file();
}

bool stats_enabled()
{
	return shared != NULL;
}

void stats_add(const text *scope, const StatsDelta &delta)
{
	if (shared == NULL)
		return;
	add(MyDatabaseId, VARDATA_ANY(scope), VARSIZE_ANY_EXHDR(scope), delta.n);
}

void stats_count(const text *scope, StatCounter counter, int64 n)
{
	if (shared == NULL)
		return;
	StatsDelta delta;
	memset(&delta, 0, sizeof delta);
	delta.n[counter] = n;
	add(MyDatabaseId, VARDATA_ANY(scope), VARSIZE_ANY_EXHDR(scope), delta.n);
}

void stats_tally_init(StatsTally *tally)
{
	tally->used = 0;
}

void stats_tally_add(StatsTally *tally, const text *scope, StatCounter counter, int64 n)
{
	if (shared == NULL)
		return;
	size_t len = VARSIZE_ANY_EXHDR(scope);
	for (int i = 0; i < tally->used; i++) {
		const text *seen = tally->scope[i];
		if (VARSIZE_ANY_EXHDR(seen) == len &&
		    memcmp(VARDATA_ANY(seen), VARDATA_ANY(scope), len) == 0) {
			tally->delta[i].n[counter] += n;
			return;
		}
	}
	if (tally->used == StatsTally::capacity)
		stats_tally_flush(tally);
	int i = tally->used++;
	tally->scope[i] = scope;
	memset(&tally->delta[i], 0, sizeof tally->delta[i]);
	tally->delta[i].n[counter] = n;
}

void stats_tally_flush(StatsTally *tally)
{
	for (int i = 0; i < tally->used; i++)
		stats_add(tally->scope[i], tally->delta[i]);
	tally->used = 0;
}

} // namespace idem

// idem_stats(): one row per entry, for the view idem_stats. A role that may
// not use every scope sees only the rows of the scopes it may use in this
// database: not other databases', nor the "other" rows, which add up scopes
// of all kinds.
IDEM_SQL_FUNCTION_AS_OWNER(idem_stats)
{
	using namespace idem;
	require_preloaded("idem_stats");
	InitMaterializedSRF(fcinfo, 0);
	ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);

	// Copied under the lock (EXCLUSIVE: no backend is moving counts from
	// its slot to an entry), turned into rows without it.
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	long n = hash_get_num_entries(table);
	Counts *rows = static_cast<Counts *>(palloc(sizeof(Counts) * (n + 1)));
	long used = 0;
	HASH_SEQ_STATUS seq;
	hash_seq_init(&seq, table);
	Entry *entry;
	while ((entry = static_cast<Entry *>(hash_seq_search(&seq))) != NULL)
		copy_counts(&rows[used++], entry);
	copy_counts(&rows[used++], &shared->all_databases);
	// Each slot scope's counts go to the row of its entry.
	HASHCTL info;
	memset(&info, 0, sizeof info);
	info.keysize = sizeof(Key);
	info.entrysize = sizeof(RowOfKey);
	info.hcxt = CurrentMemoryContext;
	HTAB *row_of =
	    hash_create("idem_stats rows", used, &info, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	for (long r = 0; r < used; r++)
		static_cast<RowOfKey *>(hash_search(row_of, &rows[r].key, HASH_ENTER, NULL))->row = r;
	for_each_slot_scope(false, [&](const Key &routed, const int64 *counts) {
		RowOfKey *found = static_cast<RowOfKey *>(hash_search(row_of, &routed, HASH_FIND, NULL));
		if (found != NULL)
			for (int i = 0; i < stat_counters; i++)
				rows[found->row].counts[i] += counts[i];
	});
	LWLockRelease(shared->lock);
	// The last resort row shows only once it has counted something.
	if (!any_counts(rows[used - 1].counts))
		used--;

	bool every_scope = may_use_every_scope(caller);
	for (long r = 0; r < used; r++) {
		const Counts &row = rows[r];
		if (!every_scope && (row.key.dbid != MyDatabaseId || row.key.scope_len == 0 ||
		                     !may_use_scope(caller, row.key.scope, row.key.scope_len)))
			continue;
		Datum values[3 + stat_counters];
		bool nulls[3 + stat_counters];
		memset(nulls, 0, sizeof nulls);
		values[0] = ObjectIdGetDatum(row.key.dbid);
		nulls[0] = row.key.dbid == InvalidOid;
		if (row.key.scope_len > 0)
			values[1] = PointerGetDatum(cstring_to_text_with_len(row.key.scope, row.key.scope_len));
		else
			nulls[1] = true;
		for (int i = 0; i < stat_counters; i++)
			values[2 + i] = Int64GetDatum(row.counts[i]);
		values[2 + stat_counters] = TimestampTzGetDatum(row.since);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum)0;
}

// idem_stats_reset(): forgets every entry, of every database: only for a
// role that may use every scope.
IDEM_SQL_FUNCTION_AS_OWNER(idem_stats_reset)
{
	using namespace idem;
	require_preloaded("idem_stats_reset");
	if (!may_use_every_scope(caller))
		ereport(ERROR, errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
		        errmsg("idem_stats_reset: role \"%s\" may not reset the counters of every scope",
		               GetUserNameFromId(caller, false)),
		        errhint("Only the owner of pg_idem, or a superuser, resets idem_stats."));
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	clear_table();
	// Every slot's counts are of the old generation now (file header).
	pg_atomic_fetch_add_u32(&shared->generation, 1);
	LWLockRelease(shared->lock);
	PG_RETURN_VOID();
}
