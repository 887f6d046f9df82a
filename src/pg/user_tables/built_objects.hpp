// JSON objects that are never built: a call such as
//
//   idem_versioned_update('users', jsonb_build_object('id', $1), $2,
//                         jsonb_build_object('points', $3))
//
// spends more on building its two objects (jsonb_build_object, then the
// function taking them apart again) than on anything it does itself. A
// planner support function rewrites it, once per plan, into a call of a
// sibling function that takes the same fields as plain arguments:
//
//   idem_versioned_update_fields('users', 1, 'id', $1, $2,
//                                1, 'points', $3, 'version')
//
// Each object becomes its number of fields, its keys, then its values. The
// arguments keep the order in which they were written, so that they are
// evaluated as before (a volatile one, or the first to fail); the sibling
// takes the fields in the order jsonb would have listed the keys (so that
// the call names its columns, builds its statement and reports its errors
// in the same order). Only objects whose keys are distinct non-null
// constants, and whose values are smallint, integer, bigint or text, are
// rewritten: for those the sibling converts each value exactly as its JSON
// would have been converted (see field_to_column), so the rewrite changes
// no result and no error. Anything else is left as written. Include after
// postgres.h.
#pragma once

extern "C" {
#include "fmgr.h"
#include "nodes/pg_list.h"
#include "nodes/primnodes.h"
}

#include <initializer_list>

#include "pg/user_tables/user_table.hpp"

namespace idem
{

// What the planner support function of a user-table function returns for
// `request`: a call of its sibling `sibling` (a _fields function, returning
// boolean) in which each argument at a position in `objects` (0-based) is
// replaced by its fields (count, keys, values) and the others are kept; or
// NULL, to leave the call as written: another request, another number of
// arguments than `nargs`, an object that cannot be rewritten, outside a
// plan, for a caller who may not execute the function called (the executor
// then says so), or in an extension not yet updated to have `sibling`. The
// plan depends on the function called, so that a GRANT or REVOKE on it
// plans the call again; the sibling checks the privilege on every call too
// (check_original_execute).
Node *rewrite_built_objects(Node *request, const char *sibling, int nargs,
                            std::initializer_list<int> objects);

// The function a _fields sibling stands for, found once per backend (and
// again if the sibling is another, after the extension was created anew).
struct OriginalFunction {
	Oid sibling;
	Oid oid;
};

// Raises the error a call of the function `name` (argument types given)
// would raise when its caller may not execute it. A sibling checks it on
// every call, so that a REVOKE on the function holds for plans made before
// it, for another role running them, and for the sibling called by hand.
void check_original_execute(OriginalFunction *original, FunctionCallInfo fcinfo, const char *name,
                            int nargs, const Oid *argtypes);

// Is argument `arg` of a rewritten call there, and of type `type`?
bool argument_is(FunctionCallInfo fcinfo, int arg, Oid type);

// Reads the fields of one object from the arguments of a rewritten call,
// starting at *next_arg (its count), and moves *next_arg past them. Errors
// (22023) for arguments a rewrite would not have written.
JsonFields typed_fields(const char *fn, FunctionCallInfo fcinfo, int *next_arg);

// The error for arguments a rewrite would not have written (22023).
[[noreturn]] void malformed_fields(const char *fn);

} // namespace idem
