// Library entry point: the module magic, the configuration parameters and the
// cache invalidation callbacks that the other files rely on.
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/guc.h"
}

#include "pg/plan_cache.hpp"
#include "pg/claims/claim_wait.hpp"
#include "pg/cache/duplicate_cache.hpp"
#include "pg/extension_objects.hpp"
#include "pg/guard.hpp"
#include "pg/purge/purge_status.hpp"
#include "pg/purge/purge_worker.hpp"
#include "pg/records/record_indexes.hpp"
#include "pg/scopes/scope_grants.hpp"
#include "pg/scopes/scopes.hpp"
#include "pg/settings.hpp"
#include "pg/stats/stats.hpp"

#include <climits>

extern "C" {
PG_MODULE_MAGIC;
void _PG_init(void);
}

namespace
{

shmem_request_hook_type previous_shmem_request = NULL;
shmem_startup_hook_type previous_shmem_startup = NULL;

// Shared memory exists only when pg_idem is in shared_preload_libraries;
// everything that uses it has a fallback without (see claim_wait.hpp).
void request_shmem()
{
	if (previous_shmem_request)
		previous_shmem_request();
	idem::claim_wait_request_shmem();
	idem::purge_status_request_shmem();
	idem::stats_request_shmem();
	idem::cache_request_shmem();
}

void startup_shmem()
{
	if (previous_shmem_startup)
		previous_shmem_startup();
	idem::claim_wait_init_shmem();
	idem::purge_status_init_shmem();
	idem::stats_init_shmem();
	idem::cache_init_shmem();
}

} // namespace

// PostgreSQL calls these through the guard (guard.hpp).
extern "C" void idem_shmem_request(void)
{
	idem::guard(request_shmem);
}
extern "C" void idem_shmem_startup(void)
{
	idem::guard(startup_shmem);
}

namespace idem
{
int default_ttl_seconds = 7 * 24 * 60 * 60;
int default_lease_seconds = 5 * 60;
int default_max_attempts = 5;
char *purge_databases = NULL;
int purge_naptime_ms = 10000;
int purge_batch_size = 1000;
int purge_rate_limit = 0;
bool purge_reconcile = true;
bool purge_vacuum = true;
bool purge_yield = true;
int reconcile_timeout_ms = 10000;
int stats_max_scopes = 1000;
int cache_size = 0;
int cache_result_size = 256;
int test_cache_fill_lock = 0;
} // namespace idem

// The settings any server that loads pg_idem has, preloaded or not.
static void define_settings()
{
	DefineCustomIntVariable("pg_idem.default_ttl",
	                        "Lifetime of an idempotency record when neither the call nor its "
	                        "scope gives one.",
	                        "A record past its expiry counts as absent, purged or not.",
	                        &idem::default_ttl_seconds, 7 * 24 * 60 * 60, 1, INT_MAX, PGC_SIGHUP,
	                        GUC_UNIT_S, NULL, NULL, NULL);

	DefineCustomIntVariable("pg_idem.default_lease",
	                        "How long an idem_begin claim is held when neither the call nor "
	                        "its scope gives a lease.",
	                        "After the lease runs out, another consumer may take the key over.",
	                        &idem::default_lease_seconds, 5 * 60, 1, INT_MAX, PGC_SIGHUP,
	                        GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("pg_idem.default_max_attempts",
	                        "How many claims of one key idem_begin grants before the key is "
	                        "dead, when its scope does not say.",
	                        NULL, &idem::default_max_attempts, 5, 1, INT_MAX, PGC_SIGHUP, 0, NULL,
	                        NULL, NULL);
	DefineCustomIntVariable("pg_idem.purge_naptime", "Time between purge rounds.", NULL,
	                        &idem::purge_naptime_ms, 10000, 10, INT_MAX, PGC_SIGHUP, GUC_UNIT_MS,
	                        NULL, NULL, NULL);
	DefineCustomIntVariable(
	    "pg_idem.purge_batch_size", "Expired records deleted per purge transaction.", NULL,
	    &idem::purge_batch_size, 1000, 1, 1000000, PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("pg_idem.purge_rate_limit",
	                        "Most expired records the purge worker deletes per second.",
	                        "0 means no limit.", &idem::purge_rate_limit, 0, 0, INT_MAX, PGC_SIGHUP,
	                        0, NULL, NULL, NULL);
	DefineCustomBoolVariable("pg_idem.purge_reconcile",
	                         "Whether each purge round also reconciles expired leases.", NULL,
	                         &idem::purge_reconcile, true, PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("pg_idem.reconcile_timeout",
	                        "Longest a scope's reconciliation function may take for one "
	                        "claim before the call is canceled and the claim reported unknown.",
	                        "0 means no limit. Only a superuser may change it, since the "
	                        "functions are the scopes' configuring roles' code.",
	                        &idem::reconcile_timeout_ms, 10000, 0, INT_MAX, PGC_SUSET, GUC_UNIT_MS,
	                        NULL, NULL, NULL);
	DefineCustomBoolVariable("pg_idem.purge_yield",
	                         "Whether the purge worker pauses between batches while durable "
	                         "commits wait for the write-ahead log.",
	                         NULL, &idem::purge_yield, true, PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("pg_idem.purge_vacuum",
	                         "Whether the purge worker vacuums idem_records itself when a round "
	                         "leaves it due, without waiting for autovacuum's next visit.",
	                         NULL, &idem::purge_vacuum, true, PGC_SIGHUP, 0, NULL, NULL, NULL);
}

// The settings that size or start what only preloading creates: shared
// memory and the purge worker. A postmaster-level parameter can only be
// created while preloading; loaded later (by CREATE EXTENSION or a first
// call), there is nothing for them to configure anyway.
static void define_preload_settings()
{
	DefineCustomStringVariable(
	    "pg_idem.purge_databases", "Databases the purge worker serves, one worker each.",
	    "A comma-separated list; empty for no worker. Needs pg_idem "
	    "in shared_preload_libraries.",
	    &idem::purge_databases, "postgres", PGC_POSTMASTER, GUC_LIST_INPUT, NULL, NULL, NULL);
	// Sizes the shared table of idem_stats.
	DefineCustomIntVariable(
	    "pg_idem.stats_max_scopes", "Scopes that idem_stats counts each on their own.",
	    "Beyond that, a database's new scopes are counted together in "
	    "its row with scope NULL. Needs pg_idem in "
	    "shared_preload_libraries.",
	    &idem::stats_max_scopes, 1000, 1, 1000000, PGC_POSTMASTER, 0, NULL, NULL, NULL);
	// Sizes the duplicate cache.
	DefineCustomIntVariable("pg_idem.cache_size",
	                        "Entries of the duplicate cache, which lets idem_try_insert "
	                        "answer recent duplicates, and idem_begin completed claims, "
	                        "without reading idem_records.",
	                        "0 turns it off. Each entry takes about 270 bytes of shared "
	                        "memory plus pg_idem.cache_result_size. Needs pg_idem in "
	                        "shared_preload_libraries.",
	                        &idem::cache_size, 0, 0, 10000000, PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("pg_idem.cache_result_size",
	                        "Largest result (jsonb, detoasted) of a completed claim that "
	                        "the duplicate cache keeps, so that idem_begin can answer "
	                        "it without reading idem_records.",
	                        "Every entry reserves this much shared memory. 0 keeps only "
	                        "NULL results. Needs pg_idem in shared_preload_libraries.",
	                        &idem::cache_result_size, 256, 0, 65536, PGC_POSTMASTER, GUC_UNIT_BYTE,
	                        NULL, NULL, NULL);
	DefineCustomIntVariable("pg_idem.test_cache_fill_lock",
	                        "For tests only: before the duplicate cache inserts an entry, "
	                        "wait for the advisory lock with this key (0: off).",
	                        "Lets an isolation spec change a record between the table "
	                        "read and the insertion.",
	                        &idem::test_cache_fill_lock, 0, 0, INT_MAX, PGC_SUSET,
	                        GUC_NOT_IN_SAMPLE, NULL, NULL, NULL);
}

// What _PG_init does (through the guard).
static void initialize()
{
	// pg_upgrade restores the schema into a new server started in
	// binary-upgrade mode, preloading what the user's settings preload. A
	// purge worker connecting then makes the restore fail ("database is
	// being accessed by other users"), and nothing of pg_idem is needed
	// until the upgrade is over: start nothing, hook nothing (as pg_cron).
	if (IsBinaryUpgrade)
		return;

	// Always, in every backend that loads pg_idem: its settings, and the
	// invalidation callbacks that keep its per-backend caches current.
	define_settings();
	idem::extension_objects_register_callbacks();
	idem::plan_cache_register_callbacks();
	idem::scopes_register_callbacks();
	idem::scope_grants_register_callbacks();
	idem::record_indexes_register_callbacks();

	// Only while preloading (shared_preload_libraries): shared memory, the
	// purge worker and the duplicate cache's hooks, and their settings.
	if (process_shared_preload_libraries_in_progress) {
		define_preload_settings();
		// Only then: a server that no longer preloads pg_idem but keeps
		// its postmaster settings in postgresql.conf would otherwise warn
		// in every session that loads it (pg_stat_statements does the same).
		MarkGUCPrefixReserved("pg_idem");
		idem::register_purge_workers();
		previous_shmem_request = shmem_request_hook;
		shmem_request_hook = idem_shmem_request;
		previous_shmem_startup = shmem_startup_hook;
		shmem_startup_hook = idem_shmem_startup;
		idem::cache_register_hooks();
	}
}

extern "C" void _PG_init(void)
{
	idem::guard(initialize);
}
