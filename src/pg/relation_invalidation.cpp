// See relation_invalidation.hpp.
extern "C" {
#include "postgres.h"

#include "utils/inval.h"
}

#include "pg/guard.hpp"
#include "pg/relation_invalidation.hpp"

namespace idem
{

namespace
{

constexpr int max_listeners = 8;
RelationListener listeners[max_listeners];
int listener_count = 0;

void relation_invalidated(Datum, Oid relid)
{
	for (int i = 0; i < listener_count; i++)
		listeners[i](relid);
}

} // namespace

// PostgreSQL calls this through the guard (guard.hpp).
extern "C" void idem_relation_invalidated(Datum arg, Oid relid)
{
	guard([&] { relation_invalidated(arg, relid); });
}

void on_relation_invalidation(RelationListener listener)
{
	if (listener_count == max_listeners)
		elog(ERROR, "pg_idem: too many relation invalidation listeners");
	if (listener_count == 0)
		CacheRegisterRelcacheCallback(idem_relation_invalidated, 0);
	listeners[listener_count++] = listener;
}

} // namespace idem
