// Scope grants: which roles may use a scope (idem_grant, idem_revoke).
//
// A role may use a scope, and the stream of the same name, when it is a
// superuser, has the privileges of the extension's owner, or has the
// privileges of a role the scope was granted to (PUBLIC included). The
// answers are cached per backend, per (role, scope), and forgotten when
// idem_scope_grants changes (its trigger sends a relcache invalidation at
// commit), when a role or a role membership changes (syscache callbacks),
// or when pg_idem's tables are replaced. So a revoke reaches every session
// by its next transaction, and a check that hits the cache costs one hash
// lookup. Include after postgres.h.
#pragma once

#include <cstddef>

namespace idem
{

// Whether `role` may use every scope: a superuser, or a role with the
// privileges of the extension's owner.
bool may_use_every_scope(Oid role);

// Whether `role` may use the scope (or stream) named by `name`, `len` bytes.
bool may_use_scope(Oid role, const char *name, size_t len);

// Refuses with 42501, naming the scope (or stream) and the role, unless
// `role` may use it. `what` is "scope" or "stream".
void check_scope(const char *fn, Oid role, const text *name, const char *what = "scope");

void scope_grants_register_callbacks();

} // namespace idem
