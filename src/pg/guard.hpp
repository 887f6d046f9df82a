// The one door between PostgreSQL and C++.
//
// Every function PostgreSQL calls has C linkage and runs its body inside
// guard(): SQL-callable functions are declared with IDEM_SQL_FUNCTION (or
// IDEM_SQL_FUNCTION_AS_OWNER, as_owner.hpp), which does both; hooks,
// callbacks, _PG_init and the worker's main are extern "C" functions whose
// body is one call of guard(). A C++ exception that escapes the body
// (std::bad_alloc from the core, say) is caught there and only then, outside
// the catch block, turned into ereport(ERROR): std::bad_alloc as
// out_of_memory (53200), anything else as internal_error (XX000). No
// exception ever unwinds into PostgreSQL's C frames.
//
// As pg_duckdb's guard (cpp_wrapper.hpp) does, it checks PG_exception_stack
// before raising: an exception thrown out of a PG_TRY block skips its
// PG_END_TRY, which would leave PostgreSQL's error handling jumping into a
// frame that is gone. The guard restores what it found on entry (and
// error_context_stack, which a skipped frame may have pushed onto).
//
// The reverse direction, ereport(ERROR) longjmp-ing through C++ frames, is
// handled by a rule instead of a wrapper: PostgreSQL-layer code (src/pg/) keeps
// no object with a non-trivial destructor alive across a call that can
// ereport. It allocates with palloc and uses PostgreSQL's own containers; the
// core (src/core/) is called with plain buffers and never calls back. The
// guard's own frame holds nothing that needs destroying.
//
// Include after postgres.h.
#pragma once

extern "C" {
#include "fmgr.h"
}

#include <exception>
#include <new>

namespace idem
{

// Runs body() and returns what it returns; a C++ exception that escapes it
// becomes an ERROR (file header).
template <typename Body> decltype(auto) guard(Body body)
{
	char message[256];
	bool out_of_memory = false;
	sigjmp_buf *exception_stack = PG_exception_stack;
	ErrorContextCallback *context_stack = error_context_stack;
	try {
		return body();
	} catch (const std::bad_alloc &) {
		out_of_memory = true;
		strlcpy(message, "out of memory", sizeof message);
	} catch (const std::exception &e) {
		strlcpy(message, e.what(), sizeof message);
	} catch (...) {
		strlcpy(message, "unknown C++ exception", sizeof message);
	}
	// Outside the catch blocks, so that the exception object is freed.
	error_context_stack = context_stack;
	if (PG_exception_stack != exception_stack) {
		PG_exception_stack = exception_stack;
		elog(WARNING, "pg_idem: a C++ exception left a PG_TRY block; please report this");
	}
	ereport(ERROR, errcode(out_of_memory ? ERRCODE_OUT_OF_MEMORY : ERRCODE_INTERNAL_ERROR),
	        errmsg("pg_idem: %s", message));
	pg_unreachable();
}

// guard() for a SQL-callable function's body.
template <typename Body> Datum guarded(Body body, FunctionCallInfo fcinfo)
{
	return guard([&] { return body(fcinfo); });
}

} // namespace idem

#define IDEM_SQL_FUNCTION(name)                                                                    \
	extern "C" {                                                                                   \
	PG_FUNCTION_INFO_V1(name);                                                                     \
	}                                                                                              \
	static Datum name##_body(FunctionCallInfo fcinfo);                                             \
	extern "C" Datum name(PG_FUNCTION_ARGS)                                                        \
	{                                                                                              \
		return idem::guarded(name##_body, fcinfo);                                                 \
	}                                                                                              \
	static Datum name##_body(FunctionCallInfo fcinfo)
