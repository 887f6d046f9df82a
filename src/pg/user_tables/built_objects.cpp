// See built_objects.hpp.
extern "C" {
#include "postgres.h"

#include "catalog/pg_collation_d.h"
#include "catalog/pg_proc_d.h"
#include "catalog/pg_type_d.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "nodes/supportnodes.h"
#include "nodes/value.h"
#include "miscadmin.h"
#include "optimizer/planmain.h"
#include "parser/parse_func.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
}

#include "pg/compat.hpp"
#include "pg/user_tables/built_objects.hpp"

#include <algorithm>
#include <cstring>

namespace idem
{

namespace
{

// The types whose JSON field_to_column reproduces (user_table.hpp).
bool typed_field_type(Oid type)
{
	return type == INT2OID || type == INT4OID || type == INT8OID || type == TEXTOID;
}

struct BuiltField {
	const char *name;
	size_t len;
	Node *value;
};

// jsonb's key order: shorter keys first, then bytewise.
int jsonb_key_order(const BuiltField &a, const BuiltField &b)
{
	if (a.len != b.len)
		return a.len < b.len ? -1 : 1;
	return memcmp(a.name, b.name, a.len);
}

// The arguments that stand for `arg` in a rewritten call (count, keys,
// values), or NIL when `arg` is not a jsonb_build_object call that can be
// rewritten.
List *built_object_arguments(Node *arg)
{
	if (arg == NULL || !IsA(arg, FuncExpr))
		return NIL;
	FuncExpr *call = reinterpret_cast<FuncExpr *>(arg);
	int nargs = list_length(call->args);
	if (call->funcid != F_JSONB_BUILD_OBJECT_ANY || call->funcvariadic || nargs == 0 ||
	    nargs % 2 != 0)
		return NIL;

	int count = nargs / 2;
	BuiltField *fields = static_cast<BuiltField *>(palloc(sizeof(BuiltField) * count));
	for (int i = 0; i < count; i++) {
		Node *key = static_cast<Node *>(list_nth(call->args, 2 * i));
		BuiltField &field = fields[i];
		field.value = static_cast<Node *>(list_nth(call->args, 2 * i + 1));
		if (!IsA(key, Const) || !typed_field_type(exprType(field.value)))
			return NIL;
		Const *name = reinterpret_cast<Const *>(key);
		if (name->constisnull)
			return NIL;
		if (name->consttype == TEXTOID)
			field.name = text_to_cstring(DatumGetTextPP(name->constvalue));
		else if (name->consttype == UNKNOWNOID) // a literal: jsonb_build_object takes it as text
			field.name = DatumGetCString(name->constvalue);
		else
			return NIL;
		field.len = strlen(field.name);
		// A key given twice (jsonb keeps the last value) is left to
		// jsonb_build_object.
		for (int j = 0; j < i; j++)
			if (jsonb_key_order(fields[j], field) == 0)
				return NIL;
	}

	// The values stay in the order written, so that they are evaluated in
	// the same order as before (a volatile one, or the first to fail).
	List *args = list_make1(
	    makeConst(INT4OID, -1, InvalidOid, sizeof(int32), Int32GetDatum(count), false, true));
	for (int i = 0; i < count; i++)
		args = lappend(args,
		               makeConst(TEXTOID, -1, DEFAULT_COLLATION_OID, -1,
		                         PointerGetDatum(cstring_to_text(fields[i].name)), false, false));
	for (int i = 0; i < count; i++)
		args = lappend(args, fields[i].value);
	return args;
}

// The sibling `name` (one VARIADIC "any" argument) of the function `request`
// simplifies, in its schema; InvalidOid if the call must stay as written.
Oid sibling_for(SupportRequestSimplify *request, const char *name)
{
	static const Oid argtypes[] = {ANYOID};
	Oid called = request->fcall->funcid;
	if (request->root == NULL ||
	    object_aclcheck(ProcedureRelationId, called, GetUserId(), ACL_EXECUTE) != ACLCHECK_OK)
		return InvalidOid;
	char *schema = get_namespace_name(get_func_namespace(called));
	if (schema == NULL)
		return InvalidOid;
	List *qualified = list_make2(makeString(schema), makeString(pstrdup(name)));
	Oid rewritten = LookupFuncName(qualified, 1, argtypes, true);
	if (OidIsValid(rewritten))
		record_plan_function_dependency(request->root, called);
	return rewritten;
}

} // namespace

void malformed_fields(const char *fn)
{
	ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
	        errmsg("%s: malformed field arguments", fn),
	        errdetail("The _fields functions take the calls that pg_idem's planner support "
	                  "rewrites, not calls written by hand."),
	        errhint("Call the function without _fields."));
	pg_unreachable();
}

Node *rewrite_built_objects(Node *request, const char *sibling, int nargs,
                            std::initializer_list<int> objects)
{
	if (!IsA(request, SupportRequestSimplify))
		return NULL;
	SupportRequestSimplify *simplify = reinterpret_cast<SupportRequestSimplify *>(request);
	FuncExpr *call = simplify->fcall;
	if (list_length(call->args) != nargs)
		return NULL;
	List *args = NIL;
	for (int i = 0; i < nargs; i++) {
		Node *arg = static_cast<Node *>(list_nth(call->args, i));
		if (std::find(objects.begin(), objects.end(), i) == objects.end()) {
			args = lappend(args, arg);
			continue;
		}
		List *fields = built_object_arguments(arg);
		if (fields == NIL)
			return NULL;
		args = list_concat(args, fields);
	}
	// Wide objects may be written, but no call takes more arguments.
	if (list_length(args) > FUNC_MAX_ARGS)
		return NULL;
	Oid fn = sibling_for(simplify, sibling);
	if (!OidIsValid(fn))
		return NULL;
	FuncExpr *rewritten =
	    makeFuncExpr(fn, BOOLOID, args, InvalidOid, call->inputcollid, COERCE_EXPLICIT_CALL);
	rewritten->location = call->location;
	return reinterpret_cast<Node *>(rewritten);
}

void check_original_execute(OriginalFunction *original, FunctionCallInfo fcinfo, const char *name,
                            int nargs, const Oid *argtypes)
{
	Oid self = fcinfo->flinfo->fn_oid;
	if (original->sibling != self) {
		char *schema = get_namespace_name(get_func_namespace(self));
		List *qualified = list_make2(makeString(schema), makeString(pstrdup(name)));
		original->oid = LookupFuncName(qualified, nargs, argtypes, false);
		original->sibling = self;
	}
	AclResult result =
	    object_aclcheck(ProcedureRelationId, original->oid, GetUserId(), ACL_EXECUTE);
	if (result != ACLCHECK_OK)
		aclcheck_error(result, OBJECT_FUNCTION, get_func_name(original->oid));
}

bool argument_is(FunctionCallInfo fcinfo, int arg, Oid type)
{
	return !get_fn_expr_variadic(fcinfo->flinfo) && arg < PG_NARGS() &&
	       get_fn_expr_argtype(fcinfo->flinfo, arg) == type;
}

JsonFields typed_fields(const char *fn, FunctionCallInfo fcinfo, int *next_arg)
{
	FmgrInfo *flinfo = fcinfo->flinfo;
	int nargs = PG_NARGS();
	int first = *next_arg;
	if (!argument_is(fcinfo, first, INT4OID) || PG_ARGISNULL(first))
		malformed_fields(fn);
	int count = PG_GETARG_INT32(first);
	if (count < 0 || count > (nargs - first - 1) / 2)
		malformed_fields(fn);

	// One allocation for the arrays below: this runs on every call.
	size_t n = size_t(count) + 1;
	char *block =
	    static_cast<char *>(palloc(n * (sizeof(BuiltField) + sizeof(char *) + sizeof(Datum) +
	                                    sizeof(Oid) + sizeof(int) + sizeof(bool))));
	BuiltField *sorted = reinterpret_cast<BuiltField *>(block);
	const char **names = reinterpret_cast<const char **>(sorted + n);
	Datum *datums = reinterpret_cast<Datum *>(names + n);
	Oid *types = reinterpret_cast<Oid *>(datums + n);
	int *arg_of = reinterpret_cast<int *>(types + n);
	bool *nulls = reinterpret_cast<bool *>(arg_of + n);

	// In jsonb's key order, as json_object_fields lists them.
	for (int i = 0; i < count; i++) {
		int name_arg = first + 1 + i;
		if (PG_ARGISNULL(name_arg) || get_fn_expr_argtype(flinfo, name_arg) != TEXTOID)
			malformed_fields(fn);
		BuiltField field;
		field.name = text_to_cstring(PG_GETARG_TEXT_PP(name_arg));
		field.len = strlen(field.name);
		int at = i;
		for (; at > 0; at--) {
			int order = jsonb_key_order(sorted[at - 1], field);
			if (order == 0)
				malformed_fields(fn);
			if (order < 0)
				break;
			sorted[at] = sorted[at - 1];
			arg_of[at] = arg_of[at - 1];
		}
		sorted[at] = field;
		arg_of[at] = first + 1 + count + i;
	}

	JsonFields fields;
	fields.count = count;
	fields.names = names;
	fields.values = NULL;
	for (int i = 0; i < count; i++) {
		names[i] = sorted[i].name;
		types[i] = get_fn_expr_argtype(flinfo, arg_of[i]);
		if (!typed_field_type(types[i]))
			malformed_fields(fn);
		nulls[i] = PG_ARGISNULL(arg_of[i]);
		datums[i] = nulls[i] ? Datum(0) : PG_GETARG_DATUM(arg_of[i]);
	}
	fields.datums = datums;
	fields.nulls = nulls;
	fields.types = types;
	*next_arg = first + 1 + 2 * count;
	return fields;
}

} // namespace idem
