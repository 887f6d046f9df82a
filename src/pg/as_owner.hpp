// The functions that use pg_idem's tables act for their caller and run as
// the extension's owner.
//
// They are SECURITY INVOKER (since 0.3) and switch to the owner themselves,
// as SECURITY DEFINER would, but only after taking note of the caller: the
// current user when the function is entered, which is the role PostgreSQL's
// own privilege checks would judge (inside a SECURITY DEFINER function, its
// owner; in a maintenance command running an index expression, the table's
// owner). SECURITY DEFINER would hide it: the outer user that remains
// visible is the session's, even a superuser's under autovacuum, which
// would let a table owner's expression act in any scope. The caller is
// what scope grants are checked for (scope_grants.hpp).
//
// An error restores the caller's identity with the (sub)transaction's abort,
// as it does for SECURITY DEFINER. Include after postgres.h, fmgr.h and
// guard.hpp.
#pragma once

extern "C" {
#include "miscadmin.h"
}

#include "pg/extension_objects.hpp"

namespace idem
{

template <typename Body> Datum run_as_owner(Body body, FunctionCallInfo fcinfo)
{
	Oid caller;
	int context;
	GetUserIdAndSecContext(&caller, &context);
	SetUserIdAndSecContext(extension_objects().owner, context | SECURITY_LOCAL_USERID_CHANGE);
	Datum result = body(fcinfo, caller);
	SetUserIdAndSecContext(caller, context);
	return result;
}

} // namespace idem

// IDEM_SQL_FUNCTION for a function that runs as the owner: its body is
// given `caller`, the role it acts for.
#define IDEM_SQL_FUNCTION_AS_OWNER(name)                                                           \
	extern "C" {                                                                                   \
	PG_FUNCTION_INFO_V1(name);                                                                     \
	}                                                                                              \
	static Datum name##_body(FunctionCallInfo fcinfo, Oid caller);                                 \
	extern "C" Datum name(PG_FUNCTION_ARGS)                                                        \
	{                                                                                              \
		return idem::guarded(                                                                      \
		    [](FunctionCallInfo f) { return idem::run_as_owner(name##_body, f); }, fcinfo);        \
	}                                                                                              \
	static Datum name##_body(FunctionCallInfo fcinfo, Oid caller)
