// pg_idem's configuration parameters (GUCs), defined in module.cpp.
#pragma once

namespace idem {

// pg_idem.default_ttl, in seconds: the lifetime of a record when neither the
// call nor its scope says otherwise.
extern int default_ttl_seconds;

// pg_idem.default_lease, in seconds: how long an idem_begin claim is held
// when neither the call nor its scope says otherwise.
extern int default_lease_seconds;

// pg_idem.default_max_attempts: claims of one key before it is dead.
extern int default_max_attempts;

} // namespace idem
