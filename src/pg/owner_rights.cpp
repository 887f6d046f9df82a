// See owner_rights.hpp.
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
}

#include "pg/extension_objects.hpp"
#include "pg/owner_rights.hpp"

namespace idem {

Datum with_owner_rights(Datum (*body)(FunctionCallInfo), FunctionCallInfo fcinfo)
{
	Oid owner = extension_objects().owner;
	Oid caller;
	int caller_context;
	GetUserIdAndSecContext(&caller, &caller_context);
	SetUserIdAndSecContext(owner, caller_context | SECURITY_LOCAL_USERID_CHANGE);
	Datum result = body(fcinfo);
	SetUserIdAndSecContext(caller, caller_context);
	return result;
}

} // namespace idem
