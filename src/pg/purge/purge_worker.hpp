// Registration of the purge workers (see purge_worker.cpp). Called from
// _PG_init while shared_preload_libraries is processed.
#pragma once

namespace idem
{

void register_purge_workers();

} // namespace idem
