// The purge worker's courtesy to durable commits (purge_yield.cpp).
// Include after postgres.h.
#pragma once

extern "C" {
#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
}

namespace idem
{

// The share of the WAL the worker may write while commits wait: its bytes
// against everyone else's, over the current window.
struct WalShare {
	TimestampTz since; // 0: no window yet
	XLogRecPtr insert_since;
	int64 own_since;
};

// How long to pause after a batch (pg_idem.purge_yield): 0 unless some
// backend waits for its commit's WAL to be written, flushed or replicated
// and the worker wrote more than its share, in which case long enough for
// the others to catch up (between 1 and 100 ms).
long yield_pause_ms(WalShare *share);

} // namespace idem
