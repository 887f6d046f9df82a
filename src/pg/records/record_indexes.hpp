// The indexes of idem_records, opened for one insertion of pg_idem's own
// (records.cpp, insert_speculatively). Include after postgres.h.
#pragma once

extern "C" {
#include "nodes/execnodes.h"
}

namespace idem
{

// Opens the indexes of rri's relation for an insertion and fills
// ri_NumIndices, ri_IndexRelationDescs and ri_IndexRelationInfo, as
// ExecOpenIndices(rri, false) does, in the current memory context. `pkey`,
// an index of the relation the caller has open, is used as it is.
void open_record_indexes(ResultRelInfo *rri, Relation pkey);

// Closes what open_record_indexes opened, as ExecCloseIndices does (but
// `pkey`, which the caller closes).
void close_record_indexes(ResultRelInfo *rri, Relation pkey);

void record_indexes_register_callbacks();

} // namespace idem
