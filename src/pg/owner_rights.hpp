// What SECURITY DEFINER does, done here instead of by fmgr: the SQL
// functions that read and write pg_idem's tables run as the owner of
// idem_records (the role that created the extension), so that callers need
// EXECUTE on the functions and no privilege on the tables.
//
// Why not SECURITY DEFINER: fmgr builds its state anew for every execution of
// a statement (two catalog lookups and a memory allocation per call under
// pgbench -M prepared), which cost a duplicate answered from the cache about
// 8% of its throughput (README "Performance"). Switching the user id costs
// two stores.
//
// Like fmgr_security_definer, the switch sets SECURITY_LOCAL_USERID_CHANGE
// (SET ROLE is refused inside) and does not undo itself on error: the
// abort of the transaction or subtransaction restores the caller's
// identity. None of these functions runs the caller's code; idem_reconcile
// runs a scope's reconciliation function as the role that configured it
// (reconcile.cpp).
//
// Include after postgres.h and fmgr.h, with pg/guard.hpp.
#pragma once

namespace idem {

Datum with_owner_rights(Datum (*body)(FunctionCallInfo), FunctionCallInfo fcinfo);

} // namespace idem

// IDEM_SQL_FUNCTION, whose body runs as the owner of pg_idem's tables.
#define IDEM_SQL_FUNCTION_WITH_OWNER_RIGHTS(name)                                                  \
	extern "C" {                                                                               \
	PG_FUNCTION_INFO_V1(name);                                                                 \
	}                                                                                          \
	static Datum name##_body(FunctionCallInfo fcinfo);                                         \
	static Datum name##_as_owner(FunctionCallInfo fcinfo)                                      \
	{                                                                                          \
		return idem::with_owner_rights(name##_body, fcinfo);                               \
	}                                                                                          \
	extern "C" Datum name(PG_FUNCTION_ARGS) { return idem::guarded(name##_as_owner, fcinfo); } \
	static Datum name##_body(FunctionCallInfo fcinfo)
