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
#include "nodes/supportnodes.h"
}

#include "pg/user_tables/user_table.hpp"

namespace idem
{

// The arguments that stand for `arg` in a rewritten call (count, keys,
// values), or NIL when `arg` is not a jsonb_build_object call that can be
// rewritten.
List *built_object_arguments(Node *arg);

// The function `name`, of the schema of the function `request` simplifies
// and with the argument types given, that the call may be rewritten into;
// or InvalidOid, to leave it as written: outside a plan, for a caller who
// may not execute the function called (the executor then says so), or in
// an extension not yet updated to have `name`. The plan depends on the
// function called, so that a GRANT or REVOKE on it plans the call again;
// the sibling checks the privilege on every call too
// (check_original_execute).
Oid rewrite_function(SupportRequestSimplify *request, const char *name, int nargs,
                     const Oid *argtypes);

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
