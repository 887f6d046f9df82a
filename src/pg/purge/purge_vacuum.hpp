// The purge worker's own VACUUM of idem_records (purge_vacuum.cpp).
// Include after postgres.h.
#pragma once

namespace idem
{

// Vacuums idem_records if autovacuum's own test says it is due (dead tuples
// over the table's threshold) and pg_idem.purge_vacuum is on. Called by the
// purge worker between transactions, after a round.
void vacuum_records_if_due();

} // namespace idem
