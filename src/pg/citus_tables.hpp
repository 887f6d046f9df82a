// Tables whose rows Citus keeps elsewhere. On a Citus node a distributed,
// reference or Citus local table is a shell: its rows are in shards, and
// only SQL, which Citus plans, reaches them. Code that reads or writes a
// table below SQL must ask first. Include after postgres.h.
#pragma once

namespace idem
{

// Whether Citus manages `relid` here (it is in Citus's catalog,
// pg_dist_partition); false where Citus is not installed. Uses SPI.
bool citus_manages(Oid relid);

} // namespace idem
