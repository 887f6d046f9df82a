// One relcache invalidation callback for all of pg_idem, fanned out to the
// caches that listen. PostgreSQL keeps ten relcache callback slots per
// backend for every library together (MAX_RELCACHE_CALLBACKS), and a
// library that finds none free makes the command that loads it fail
// ("out of relcache_callback_list slots"); Citus alone takes five. So pg_idem
// takes one. Include after postgres.h.
#pragma once

namespace idem
{

// Called with the relation invalidated, or InvalidOid for "all of them".
using RelationListener = void (*)(Oid relid);

// Adds a listener, once per backend, in _PG_init; the first registers
// pg_idem's callback. There is room for the listeners pg_idem has.
void on_relation_invalidation(RelationListener listener);

} // namespace idem
