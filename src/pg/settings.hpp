// pg_idem's configuration parameters (GUCs), defined in module.cpp.
#pragma once

namespace idem {

// pg_idem.default_ttl, in seconds: the lifetime of a record when neither the
// call nor its scope says otherwise.
extern int default_ttl_seconds;

} // namespace idem
