// The purge worker vacuums idem_records itself, right after a round that
// leaves it due.
//
// Space freed by the purge is reused only after VACUUM, and autovacuum looks
// at a database once per autovacuum_naptime (a minute by default). With a
// TTL of a few minutes the table then grows by a minute of inserts before
// every reuse. So after each round the worker applies autovacuum's own test
// (dead tuples > vacuum threshold + scale factor x reltuples, from the
// table's reloptions or else the autovacuum GUCs, capped from PostgreSQL 18
// on at autovacuum_vacuum_max_threshold) and, when it passes, runs
// the same lazy VACUUM autovacuum would run:
//   - SKIP_LOCKED: if autovacuum (or anyone) is vacuuming it, skip;
//   - no truncation: truncating takes an ACCESS EXCLUSIVE lock, which would
//     block consumers; the next inserts reuse the empty pages anyway;
//   - throttled like autovacuum (the table's autovacuum_vacuum_cost_delay
//     and _limit, else autovacuum's GUCs), so it does not starve consumers;
//   - not when autovacuum is switched off for the table;
//   - in a ring of vacuum_buffer_usage_limit shared buffers, as VACUUM and
//     autovacuum use, so it does not push consumers' pages out of the cache.
// VACUUM takes a SHARE UPDATE EXCLUSIVE lock, which conflicts with no
// consumer's lock, and sets PROC_IN_VACUUM, so it holds back no one's
// horizon. vacuum() runs its own transactions; it is entered with one open,
// as from a top-level command, and needs a memory context that outlives
// them (PortalContext before PostgreSQL 16, its vac_context argument since;
// see compat::vacuum).
extern "C" {
#include "postgres.h"

#include "access/table.h"
#include "access/xact.h"
#include "commands/extension.h"
#include "commands/vacuum.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "pgstat.h"
#include "postmaster/autovacuum.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
}

#include "pg/compat.hpp"
#include "pg/extension_objects.hpp"
#include "pg/purge/purge_vacuum.hpp"
#include "pg/settings.hpp"

namespace idem
{

namespace
{

struct VacuumPlan {
	Oid records = InvalidOid;
	bool due = false;
	double cost_delay = 0;
	int cost_limit = 0;
};

// Autovacuum's test (relation_needs_vacanalyze) for idem_records, and the
// cost settings autovacuum would use for it.
VacuumPlan plan_vacuum()
{
	VacuumPlan plan;
	if (!OidIsValid(get_extension_oid("pg_idem", true)))
		return plan;
	plan.records = extension_objects().records;
	Relation rel = table_open(plan.records, AccessShareLock);
	const AutoVacOpts *opts =
	    rel->rd_options ? &reinterpret_cast<StdRdOptions *>(rel->rd_options)->autovacuum : NULL;
	double reltuples = rel->rd_rel->reltuples < 0 ? 0 : rel->rd_rel->reltuples;
	table_close(rel, AccessShareLock);

	if (opts && !opts->enabled)
		return plan;
	int threshold =
	    opts && opts->vacuum_threshold >= 0 ? opts->vacuum_threshold : autovacuum_vac_thresh;
	double scale =
	    opts && opts->vacuum_scale_factor >= 0 ? opts->vacuum_scale_factor : autovacuum_vac_scale;
	PgStat_StatTabEntry *stats = pgstat_fetch_stat_tabentry(plan.records);
	plan.due =
	    stats && double(compat::dead_tuples(stats)) >
	                 compat::autovacuum_capped_threshold(threshold + scale * reltuples, opts);

	plan.cost_delay = opts && opts->vacuum_cost_delay >= 0 ? opts->vacuum_cost_delay
	                  : autovacuum_vac_cost_delay >= 0     ? autovacuum_vac_cost_delay
	                                                       : VacuumCostDelay;
	plan.cost_limit = opts && opts->vacuum_cost_limit > 0 ? opts->vacuum_cost_limit
	                  : autovacuum_vac_cost_limit > 0     ? autovacuum_vac_cost_limit
	                                                      : VacuumCostLimit;
	return plan;
}

} // namespace

void vacuum_records_if_due()
{
	if (!purge_vacuum)
		return;
	// Our own deletes must be in the shared statistics before we read them.
	pgstat_report_stat(true);

	static MemoryContext vacuum_context = NULL;
	if (vacuum_context == NULL)
		vacuum_context =
		    AllocSetContextCreate(TopMemoryContext, "pg_idem purge vacuum", ALLOCSET_DEFAULT_SIZES);

	StartTransactionCommand();
	VacuumPlan plan = plan_vacuum();
	if (!plan.due) {
		CommitTransactionCommand();
		return;
	}
	pgstat_report_activity(STATE_RUNNING, "pg_idem purge: vacuuming idem_records");

	MemoryContext old_portal = PortalContext;
	PortalContext = vacuum_context;
	MemoryContext caller = MemoryContextSwitchTo(vacuum_context);
	// Value-initialised: later versions add fields, and vacuum() must not
	// read garbage in any of them.
	VacuumParams params{};
	params.options =
	    VACOPT_VACUUM | compat::vacopt_process_main | VACOPT_SKIP_LOCKED | VACOPT_PROCESS_TOAST;
	params.freeze_min_age = -1;
	params.freeze_table_age = -1;
	params.multixact_freeze_min_age = -1;
	params.multixact_freeze_table_age = -1;
	params.is_wraparound = false;
	params.log_min_duration = Log_autovacuum_min_duration;
	params.index_cleanup = VACOPTVALUE_UNSPECIFIED;
	params.truncate = VACOPTVALUE_DISABLED;
	params.nworkers = -1;
	compat::set_vacuum_params_added_after_15(&params);
	List *relations = list_make1(makeVacuumRelation(NULL, plan.records, NIL));
	MemoryContextSwitchTo(caller);

	double saved_delay = VacuumCostDelay;
	int saved_limit = VacuumCostLimit;
	VacuumCostDelay = plan.cost_delay;
	VacuumCostLimit = plan.cost_limit;
	PG_TRY();
	{
		compat::vacuum(relations, &params, vacuum_context, true);
	}
	PG_FINALLY();
	{
		VacuumCostDelay = saved_delay;
		VacuumCostLimit = saved_limit;
		PortalContext = old_portal;
	}
	PG_END_TRY();
	CommitTransactionCommand();
	MemoryContextReset(vacuum_context);
	pgstat_report_activity(STATE_IDLE, NULL);
}

} // namespace idem
