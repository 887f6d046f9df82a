// idem_try_insert_many(scope, keys, ttl): idem_try_insert for a batch of
// keys of one scope, in one call and one pass below SQL (records.cpp). It
// returns the positions in `keys` (1-based, as WITH ORDINALITY numbers
// them) of the keys it recorded: a batch's one statement joins them with
// the batch's messages.
//
// Every key is checked before anything is written, so bad input leaves
// nothing behind. A key given twice is claimed once, at its first
// position. The keys are claimed in key id order, whatever the batch's
// order: two batches that share keys wait for each other at their first
// common key and never deadlock.
extern "C" {
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

#include "pg/as_owner.hpp"
#include "pg/batches.hpp"
#include "pg/guard.hpp"
#include "pg/records/records.hpp"
#include "pg/records/routes.hpp"
#include "pg/scopes/scope_grants.hpp"
#include "pg/scopes/scopes.hpp"
#include "pg/stats/stats.hpp"

#include <algorithm>
#include <cstring>

namespace
{

const char fn[] = "idem_try_insert_many";

// A key of the batch: its record and its position in `keys` (1-based).
struct BatchKey {
	idem::RecordRef ref;
	int position;
};

bool id_before(const BatchKey &a, const BatchKey &b)
{
	size_t la = VARSIZE_ANY_EXHDR(a.ref.id), lb = VARSIZE_ANY_EXHDR(b.ref.id);
	int c = memcmp(VARDATA_ANY(a.ref.id), VARDATA_ANY(b.ref.id), std::min(la, lb));
	if (c != 0)
		return c < 0;
	if (la != lb)
		return la < lb;
	return a.position < b.position;
}

bool same_id(const BatchKey &a, const BatchKey &b)
{
	size_t len = VARSIZE_ANY_EXHDR(a.ref.id);
	return len == VARSIZE_ANY_EXHDR(b.ref.id) &&
	       memcmp(VARDATA_ANY(a.ref.id), VARDATA_ANY(b.ref.id), len) == 0;
}

// Errors about one key name its position.
void key_context(void *arg)
{
	errcontext("key %d of the batch", *static_cast<int *>(arg));
}

// The batch's keys, checked, with their key ids (and their routes, the
// same number of them, when `routes` is given), in key id order and each
// once (at its first position). Returns how many there are; *given is how
// many the batch had.
int batch_keys(text *scope, ArrayType *keys, ArrayType *routes, BatchKey **out, int *given_out)
{
	Datum *elems;
	bool *nulls;
	int n = idem::batch_elements(fn, "keys", keys, TEXTOID, &elems, &nulls);
	Datum *route_elems = NULL;
	bool *route_nulls = NULL;
	if (routes != NULL &&
	    idem::batch_elements(fn, "routes", routes, INT8OID, &route_elems, &route_nulls) != n)
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: routes must have one element per key", fn));
	BatchKey *batch = static_cast<BatchKey *>(palloc(sizeof(BatchKey) * n));
	int position = 0;
	ErrorContextCallback context;
	context.callback = key_context;
	context.arg = &position;
	context.previous = error_context_stack;
	error_context_stack = &context;
	for (int i = 0; i < n; i++) {
		position = i + 1;
		if (nulls[i])
			idem::batch_null_element(fn, "keys", i);
		batch[i].ref = idem::record_ref(fn, scope, DatumGetTextPP(elems[i]));
		batch[i].position = position;
		if (routes != NULL) {
			if (route_nulls[i])
				idem::batch_null_element(fn, "routes", i);
			batch[i].ref.routed = true;
			batch[i].ref.route = DatumGetInt64(route_elems[i]);
		}
	}
	error_context_stack = context.previous;

	std::sort(batch, batch + n, id_before);
	*out = batch;
	*given_out = n;
	return static_cast<int>(std::unique(batch, batch + n, same_id) - batch);
}

} // namespace

IDEM_SQL_FUNCTION_AS_OWNER(idem_try_insert_many)
{
	text *scope = PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0);
	idem::check_record_scope(fn, scope);
	if (PG_ARGISNULL(1))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: keys must not be null", fn));
	// routes (routes.hpp): required once the records are distributed.
	ArrayType *routes = PG_NARGS() > 3 && !PG_ARGISNULL(3) ? PG_GETARG_ARRAYTYPE_P(3) : NULL;
	BatchKey *batch;
	int given;
	int n = batch_keys(scope, PG_GETARG_ARRAYTYPE_P(1), routes, &batch, &given);
	idem::check_scope(fn, caller, scope);
	if (routes == NULL && idem::records_distributed())
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: routes must not be null: pg_idem's records are distributed", fn),
		        errhint("Pass the business rows' distribution values as routes, one per key."));
	// Before anything is written: a call where no set is accepted is an
	// error here.
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	// The records are written below SQL, so the checks a plain INSERT gets
	// from the executor are made here.
	PreventCommandIfReadOnly(fn);
	PreventCommandDuringRecovery(fn);
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	TimestampTz expires_at = idem::record_expiry(
	    fn, now, PG_ARGISNULL(2) ? NULL : PG_GETARG_INTERVAL_P(2), idem::scope_settings(scope));

	idem::RecordRef *refs = static_cast<idem::RecordRef *>(palloc(sizeof(idem::RecordRef) * n));
	for (int i = 0; i < n; i++)
		refs[i] = batch[i].ref;
	bool *first = static_cast<bool *>(palloc(sizeof(bool) * n));
	idem::records_try_insert_many(refs, n, now, expires_at, first);

	// A key repeated in the batch is a duplicate delivery, skipped.
	idem::StatsDelta delta;
	memset(&delta, 0, sizeof delta);
	delta.n[idem::stat_duplicates] = given - n;
	int *recorded = static_cast<int *>(palloc(sizeof(int) * n));
	int n_recorded = 0;
	for (int i = 0; i < n; i++) {
		delta.n[first[i] ? idem::stat_claims : idem::stat_duplicates]++;
		if (first[i])
			recorded[n_recorded++] = batch[i].position;
	}
	idem::stats_add(scope, delta);

	std::sort(recorded, recorded + n_recorded);
	ReturnSetInfo *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
	for (int i = 0; i < n_recorded; i++) {
		Datum value = Int32GetDatum(recorded[i]);
		bool isnull = false;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &isnull);
	}
	return (Datum)0;
}
