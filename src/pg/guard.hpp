// The one door between PostgreSQL and C++.
//
// Every SQL-callable function is declared with IDEM_SQL_FUNCTION, which gives
// it C linkage and runs its body inside guarded(): a C++ exception that
// escapes the body (std::bad_alloc from the core, say) is caught there and only
// then, outside the catch block, turned into ereport(ERROR). No exception ever
// unwinds into PostgreSQL's C frames.
//
// The reverse direction, ereport(ERROR) longjmp-ing through C++ frames, is
// handled by a rule instead of a wrapper: PostgreSQL-layer code (src/pg/) keeps
// no object with a non-trivial destructor alive across a call that can
// ereport. It allocates with palloc and uses PostgreSQL's own containers; the
// core (src/core/) is called with plain buffers and never calls back.
//
// Include after postgres.h and fmgr.h.
#pragma once

#include <exception>
#include <new>

namespace idem {

template <typename Body> Datum guarded(Body body, FunctionCallInfo fcinfo)
{
	char message[256];
	try {
		return body(fcinfo);
	} catch (const std::bad_alloc &) {
		strlcpy(message, "out of memory", sizeof message);
	} catch (const std::exception &e) {
		strlcpy(message, e.what(), sizeof message);
	} catch (...) {
		strlcpy(message, "unknown C++ exception", sizeof message);
	}
	// Raised outside the catch blocks so that the exception object is freed.
	ereport(ERROR, errcode(ERRCODE_INTERNAL_ERROR), errmsg("pg_idem: %s", message));
	pg_unreachable();
}

} // namespace idem

#define IDEM_SQL_FUNCTION(name)                                                                    \
	extern "C" {                                                                               \
	PG_FUNCTION_INFO_V1(name);                                                                 \
	}                                                                                          \
	static Datum name##_body(FunctionCallInfo fcinfo);                                         \
	extern "C" Datum name(PG_FUNCTION_ARGS) { return idem::guarded(name##_body, fcinfo); }     \
	static Datum name##_body(FunctionCallInfo fcinfo)
