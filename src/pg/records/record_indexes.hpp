// The indexes of idem_records, opened for one insertion of pg_idem's own
// (records.cpp, insert_speculatively). Include after postgres.h.
#pragma once

extern "C" {
#include "nodes/execnodes.h"
}

namespace idem
{

// Opens the indexes of rri's relation that the tuple in `slot` goes into
// and fills ri_NumIndices, ri_IndexRelationDescs and ri_IndexRelationInfo,
// as ExecOpenIndices(rri, false) does, in the current memory context; but
// a partial index whose predicate the tuple does not satisfy is left out
// (ExecInsertIndexTuples would skip it). With `slot` NULL, for insertions
// of many tuples, every index is opened, and ExecInsertIndexTuples tests
// each partial index's predicate tuple by tuple. `pkey`, an index of the relation
// that the caller has open, is used as it is. `estate` gives the predicates
// their per-tuple memory.
void open_record_indexes(ResultRelInfo *rri, Relation pkey, TupleTableSlot *slot, EState *estate);

// Closes what open_record_indexes opened, as ExecCloseIndices does (but
// `pkey`, which the caller closes).
void close_record_indexes(ResultRelInfo *rri, Relation pkey);

void record_indexes_register_callbacks();

} // namespace idem
