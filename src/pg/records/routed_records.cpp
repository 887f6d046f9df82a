// routed_records.hpp: claiming and ending claims in SQL, on distributed
// records. Each statement names the route and the key id, so Citus routes
// it to one shard; each is written as the single-node path behaves
// (records.cpp), which it replaces there.
extern "C" {
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
}

#include "pg/extension_objects.hpp"
#include "pg/guard.hpp"
#include "pg/records/record_statements.hpp"
#include "pg/records/records.hpp"
#include "pg/records/routed_records.hpp"

namespace idem
{

bool routed_try_insert(const RecordRef &ref, TimestampTz now, TimestampTz expires_at)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "pg_idem: SPI_connect failed");
	// An expired record that is not in progress counts as absent and is
	// brought back to life, as records.cpp's takeover does; a live one is
	// a duplicate (no row returned). idem_same_key makes a key id shared
	// by two keys an error on the worker.
	Oid types[] = {BYTEAOID, TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	RecordStatement st = record_statement(
	    "routed:try_insert",
	    psprintf(
	        "INSERT INTO %%s AS r (key_id, scope, key, status, recorded_at, expires_at, route) "
	        "VALUES ($1, $2, $3, 'completed', $4, $5, $6) "
	        "ON CONFLICT (%%s) DO UPDATE SET status = 'completed', "
	        "attempts = r.attempts OPERATOR(pg_catalog.+) 1, attempt_base = r.attempts, "
	        "recorded_at = $4, expires_at = $5, lease_expires_at = NULL, "
	        "holder_pid = NULL, holder_started_at = NULL, "
	        "fingerprint = NULL, result = NULL, last_error = NULL "
	        "WHERE %s.idem_same_key(r.scope, r.key, $2, $3) "
	        "AND r.expires_at OPERATOR(pg_catalog.<=) $4 "
	        "AND r.status OPERATOR(pg_catalog.<>) 'in_progress' "
	        "RETURNING 1",
	        extension_objects().schema_name),
	    5, types, true);
	Datum values[] = {PointerGetDatum(ref.id), PointerGetDatum(ref.scope), PointerGetDatum(ref.key),
	                  TimestampTzGetDatum(now), TimestampTzGetDatum(expires_at)};
	bool first = run_record_statement(st, ref, values, NULL, false, 0, SPI_OK_INSERT_RETURNING) > 0;
	SPI_finish();
	return first;
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

// idem_same_key(stored_scope, stored_key, scope, key): true when the record
// a key id found is that key's; a SHA-256 collision of two long keys is an
// error, never a duplicate (src/core/record_key.hpp).
IDEM_SQL_FUNCTION(idem_same_key)
{
	text *stored_scope = PG_GETARG_TEXT_PP(0);
	text *stored_key = PG_GETARG_TEXT_PP(1);
	text *scope = PG_GETARG_TEXT_PP(2);
	text *key = PG_GETARG_TEXT_PP(3);
	auto same = [](text *a, text *b) {
		size_t len = VARSIZE_ANY_EXHDR(a);
		return len == VARSIZE_ANY_EXHDR(b) && memcmp(VARDATA_ANY(a), VARDATA_ANY(b), len) == 0;
	};
	if (!same(stored_scope, scope) || !same(stored_key, key))
		ereport(ERROR, errcode(ERRCODE_INTERNAL_ERROR), errmsg("pg_idem key id collision"),
		        errhint("Report this: it is a SHA-256 prefix collision."));
	PG_RETURN_BOOL(true);
}
