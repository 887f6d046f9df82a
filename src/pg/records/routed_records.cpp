// routed_records.hpp: claiming and ending claims in SQL, on distributed
// records. Each statement names the route and the key id, so Citus routes
// it to one shard; each is written as the single-node path behaves
// (records.cpp), which it replaces there.
extern "C" {
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
}

#include "pg/extension_objects.hpp"
#include "pg/records/record_statements.hpp"
#include "pg/records/records.hpp"
#include "pg/records/routed_records.hpp"

namespace idem
{

namespace
{

// Whether the record a key id found is that key's: a key id shared by two
// keys (a SHA-256 collision of long keys) is an error, never a duplicate
// (src/core/record_key.hpp).
void check_same_key(text *stored_scope, text *stored_key, text *scope, text *key)
{
	auto same = [](text *a, text *b) {
		size_t len = VARSIZE_ANY_EXHDR(a);
		return len == VARSIZE_ANY_EXHDR(b) && memcmp(VARDATA_ANY(a), VARDATA_ANY(b), len) == 0;
	};
	if (!same(stored_scope, scope) || !same(stored_key, key))
		ereport(ERROR, errcode(ERRCODE_INTERNAL_ERROR), errmsg("pg_idem key id collision"),
		        errhint("Report this: it is a SHA-256 prefix collision."));
}

// The record a routed key id found: absent, live (a duplicate) or expired
// (not in progress, past its expiry: counts as absent).
enum class Holder { absent, live, expired };

// Reads the record that holds ref's key id in its shard, as the statement's
// snapshot sees it (check_same_key).
Holder read_holder(const RecordRef &ref, TimestampTz now)
{
	Oid types[] = {BYTEAOID, TIMESTAMPTZOID};
	RecordStatement st =
	    record_statement("routed:holder",
	                     "SELECT scope, key, expires_at OPERATOR(pg_catalog.<=) $2 "
	                     "AND status OPERATOR(pg_catalog.<>) 'in_progress' FROM %s WHERE %s",
	                     2, types);
	Datum values[] = {PointerGetDatum(ref.id), TimestampTzGetDatum(now)};
	if (run_record_statement(st, ref, values, NULL, false, 1, SPI_OK_SELECT) == 0)
		return Holder::absent;
	HeapTuple row = SPI_tuptable->vals[0];
	TupleDesc desc = SPI_tuptable->tupdesc;
	bool isnull;
	check_same_key(DatumGetTextPP(SPI_getbinval(row, desc, 1, &isnull)),
	               DatumGetTextPP(SPI_getbinval(row, desc, 2, &isnull)), ref.scope, ref.key);
	return DatumGetBool(SPI_getbinval(row, desc, 3, &isnull)) ? Holder::expired : Holder::live;
}

// A safety valve, as records.cpp's: each round needs a concurrent commit to
// lose.
constexpr int max_rounds = 1000;

} // namespace

// A new key, the common case, is one short INSERT ... ON CONFLICT DO
// NOTHING (Citus's work on the worker grows with the statement's text). On
// a conflict the record is read: live, a duplicate; expired (not in
// progress), brought back to life by an UPDATE that still finds it expired,
// as records.cpp's takeover; gone (purged, or its insertion rolled back)
// since the conflict, the key is tried again. The INSERT waits for a
// concurrent holder of the key, and raises 40001 in REPEATABLE READ for a
// record its snapshot cannot see, as INSERT ... ON CONFLICT does.
bool routed_try_insert(const RecordRef &ref, TimestampTz now, TimestampTz expires_at)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	Oid types[] = {BYTEAOID, TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	RecordStatement insert = record_statement(
	    "routed:insert",
	    "INSERT INTO %s (key_id, scope, key, status, recorded_at, expires_at, route) "
	    "VALUES ($1, $2, $3, 'completed', $4, $5, $6) ON CONFLICT (%s) DO NOTHING",
	    5, types, true);
	RecordStatement takeover =
	    record_statement("routed:takeover",
	                     "UPDATE %s SET status = 'completed', "
	                     "attempts = attempts OPERATOR(pg_catalog.+) 1, attempt_base = attempts, "
	                     "recorded_at = $4, expires_at = $5, lease_expires_at = NULL, "
	                     "holder_pid = NULL, holder_started_at = NULL, "
	                     "fingerprint = NULL, result = NULL, last_error = NULL "
	                     "WHERE %s AND expires_at OPERATOR(pg_catalog.<=) $4 "
	                     "AND status OPERATOR(pg_catalog.<>) 'in_progress'",
	                     5, types);
	Datum values[] = {PointerGetDatum(ref.id), PointerGetDatum(ref.scope), PointerGetDatum(ref.key),
	                  TimestampTzGetDatum(now), TimestampTzGetDatum(expires_at)};
	for (int round = 0; round < max_rounds; round++) {
		if (run_record_statement(insert, ref, values, NULL, false, 0, SPI_OK_INSERT) > 0) {
			SPI_finish();
			return true;
		}
		switch (read_holder(ref, now)) {
		case Holder::live:
			SPI_finish();
			return false;
		case Holder::expired:
			if (run_record_statement(takeover, ref, values, NULL, false, 0, SPI_OK_UPDATE) > 0) {
				SPI_finish();
				return true;
			}
			break; // renewed or purged first: look again
		case Holder::absent:
			break;
		}
		CHECK_FOR_INTERRUPTS();
	}
	elog(ERROR, "pg_idem: could not settle the state of a key after %d rounds", max_rounds);
}

bool routed_end_claim(const RecordRef &ref, const pg_uuid_t *token, const ClaimEnd &end)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	// The claim, locked, if the token holds it. Its expiry is computed
	// here: Citus runs no STABLE function of a column (timestamptz +
	// interval) in an UPDATE.
	Oid lock_types[] = {BYTEAOID, UUIDOID};
	RecordStatement lock = record_statement(
	    "routed:end_claim:lock",
	    "SELECT ttl FROM %s WHERE %s AND status OPERATOR(pg_catalog.=) 'in_progress' "
	    "AND claim_token OPERATOR(pg_catalog.=) $2 FOR UPDATE",
	    2, lock_types);
	Datum lock_values[] = {PointerGetDatum(ref.id), UUIDPGetDatum(const_cast<pg_uuid_t *>(token))};
	if (run_record_statement(lock, ref, lock_values, NULL, false, 1, SPI_OK_SELECT) == 0) {
		SPI_finish();
		return false;
	}
	bool isnull;
	Datum own_ttl = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	Datum ttl = isnull ? IntervalPGetDatum(const_cast<Interval *>(end.ttl)) : own_ttl;
	Datum expires_at =
	    DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(end.recorded_at), ttl);

	const ExtensionObjects &objects = extension_objects();
	Oid types[] = {
	    BYTEAOID, objects.status_type, TIMESTAMPTZOID, TIMESTAMPTZOID, BOOLOID, JSONBOID, BOOLOID,
	    BOOLOID};
	RecordStatement update = record_statement(
	    "routed:end_claim",
	    "UPDATE %s SET status = $2, recorded_at = $3, expires_at = $4, "
	    "lease_expires_at = NULL, holder_pid = NULL, holder_started_at = NULL, "
	    "claim_token = NULL, "
	    "result = CASE WHEN $5 THEN $6 ELSE result END, "
	    "last_error = CASE WHEN $7 THEN NULL ELSE last_error END, "
	    "attempt_base = attempt_base OPERATOR(pg_catalog.+) CASE WHEN $8 THEN 1 ELSE 0 END "
	    "WHERE %s",
	    8, types);
	Datum values[] = {PointerGetDatum(ref.id),
	                  ObjectIdGetDatum(end.status),
	                  TimestampTzGetDatum(end.recorded_at),
	                  expires_at,
	                  BoolGetDatum(end.set_result),
	                  end.result,
	                  BoolGetDatum(end.clear_last_error),
	                  BoolGetDatum(end.release)};
	char nulls[] = "        ";
	if (end.result == 0)
		nulls[5] = 'n';
	bool ended = run_record_statement(update, ref, values, nulls, false, 0, SPI_OK_UPDATE) > 0;
	SPI_finish();
	return ended;
}

} // namespace idem
