// idem_stats: what the functions answered, counted per database and scope in
// shared memory. Exists only when pg_idem is preloaded; without it every
// counting call below does nothing, and idem_stats() raises an error (see
// stats.cpp for the table, its locking and its file). Include after
// postgres.h.
#pragma once

namespace idem
{

// The counters of one (database, scope). The order is that of the
// columns of idem_stats, and of the counters in the stats file.
enum StatCounter {
	stat_claims,       // idem_try_insert true, idem_begin acquired (takeovers too)
	stat_duplicates,   // idem_try_insert false, idem_begin completed
	stat_in_progress,  // idem_begin in_progress
	stat_takeovers,    // idem_begin acquired a claim whose holder lost its lease
	stat_completions,  // idem_complete
	stat_failures,     // idem_fail
	stat_dead_letters, // claims that became dead (idem_fail, idem_begin, idem_reconcile)
	stat_purged,       // records deleted by idem_purge or the purge worker
	stat_reconciled,   // claims idem_reconcile settled (completed, failed or dead)
	stat_cache_hits,   // idem_try_insert or idem_begin answered by the duplicate cache
	stat_cache_misses, // idem_try_insert or idem_begin asked the cache, which could not answer
	stat_counters
};

struct StatsDelta {
	int64 n[stat_counters];
};

void stats_request_shmem();
void stats_init_shmem();

// Whether counts are kept at all (pg_idem preloaded).
bool stats_enabled();

// Adds to the counters of `scope` in the current database. Cheap: a few
// writes to this backend's own slot, no lock (the shared lock only for a
// scope not in the slot), never an error. A call counts when it returns, so
// the calls of a transaction that rolls back count too.
void stats_add(const text *scope, const StatsDelta &delta);
void stats_count(const text *scope, StatCounter counter, int64 n = 1);

// Sums the counts of a batch (purge, reconcile) per scope, so that a batch
// of many rows costs a few lookups rather than one per row. The scopes must
// stay allocated until stats_tally_flush. Plain data: no destructor.
struct StatsTally {
	static constexpr int capacity = 8;
	int used;
	const text *scope[capacity];
	StatsDelta delta[capacity];
};

void stats_tally_init(StatsTally *tally);
void stats_tally_add(StatsTally *tally, const text *scope, StatCounter counter, int64 n = 1);
void stats_tally_flush(StatsTally *tally);

} // namespace idem
