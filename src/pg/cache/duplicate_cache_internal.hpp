// What the three files of the duplicate cache share (duplicate_cache.cpp,
// duplicate_cache_triggers.cpp, duplicate_cache_epochs.cpp), and nobody
// else uses. Include after postgres.h and duplicate_cache.hpp.
#pragma once

extern "C" {
#include "utils/relcache.h"
}

namespace idem
{

// What this transaction did that keeps it off the cache until it ends
// (cache_usable). Reset when it ends (duplicate_cache_epochs.cpp).
struct CacheTransaction {
	// It truncated, dropped or altered an idem_records, or created,
	// altered or dropped a trigger of one (duplicate_cache_epochs.cpp):
	// it also bumps its database's epoch when it commits.
	bool records_replaced;
	// It changed a row of an idem_records in SQL (the trigger
	// idem_records_changing): the row trigger forgets each key only when
	// the statement ends, and other sessions cannot refill it while the
	// change is uncommitted, but until then this transaction could still
	// meet the entry.
	bool records_changed;
	// The record pg_idem's own SQL is changing now (cache_own_change_begin).
	OwnChange own_change;
};
extern CacheTransaction cache_xact;

// The table (duplicate_cache.cpp).
bool cache_exists();             // pg_idem is preloaded with a cache_size above 0
void cache_bump_epoch(Oid dbid); // every entry of that database stops answering

// The triggers (duplicate_cache_triggers.cpp).
// Whether `rel`, under the filler's ROW EXCLUSIVE lock, has idem_records'
// triggers as the install script makes them.
bool cache_guarded_by_triggers(Relation rel);
// In cache_register_hooks: what forgets that verdict, and what ends an own
// change when a subtransaction aborts.
void cache_triggers_register_callbacks();

} // namespace idem
