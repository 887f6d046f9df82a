// idem_key(payload, VARIADIC fields) and idem_fingerprint(payload): the
// SQL face of src/core/message_key.hpp, which defines the canonical form,
// the digest and the field paths.
//
// The payload reaches the core as jsonb's text output, which the core
// canonicalises (jsonb has already dropped duplicate members and
// whitespace; the core sorts members and respells numbers). C++ objects
// live only inside compute(): it copies the digest or the error into plain
// buffers, and the ereport that may follow runs after they are destroyed.
extern "C" {
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "mb/pg_wchar.h"
#include "utils/jsonb.h"
}

#include "core/message_key.hpp"
#include "pg/compat.hpp"
#include "pg/guard.hpp"

#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace
{

struct Outcome {
	char hex[idem::digest_hex_length + 1];
	idem::KeyErrc error;
	idem::JsonErrc json; // when error is invalid_json
	char message[512];
};

// Copies the core's message (UTF-8) into `out`, cut if need be at a
// character boundary, never inside a character.
void copy_message(const std::string &message, char (&out)[512])
{
	size_t len = message.size();
	if (len >= sizeof out) {
		len = sizeof out - 1;
		while (len > 0 && (static_cast<unsigned char>(message[len]) & 0xC0) == 0x80)
			len--;
	}
	memcpy(out, message.data(), len);
	out[len] = '\0';
}

// fields == NULL: the fingerprint.
void compute(const char *json, size_t json_len, const char *const *fields, const int *field_lens,
             int nfields, Outcome *out)
{
	std::string hex;
	out->error = idem::KeyErrc::none;
	if (fields == NULL) {
		idem::JsonError err;
		if (!idem::fingerprint_hex(std::string_view(json, json_len), hex, err)) {
			out->error = idem::KeyErrc::invalid_json;
			out->json = err.code;
			copy_message(err.message, out->message);
		}
	} else {
		std::vector<std::string_view> paths;
		paths.reserve(nfields);
		for (int i = 0; i < nfields; i++)
			paths.emplace_back(fields[i], field_lens[i]);
		idem::KeyError err;
		if (!idem::message_key_hex(std::string_view(json, json_len), paths, hex, err)) {
			out->error = err.code;
			out->json = err.json;
			copy_message(err.message, out->message);
		}
	}
	if (out->error == idem::KeyErrc::none)
		strlcpy(out->hex, hex.c_str(), sizeof out->hex);
}

Datum digest_or_error(const char *fn, const Outcome &out)
{
	if (out.error == idem::KeyErrc::none)
		return CStringGetTextDatum(out.hex);
	// The core speaks UTF-8; the message goes out in the server's encoding,
	// as the field was written.
	const char *message = pg_any_to_server(out.message, int(strlen(out.message)), PG_UTF8);
	switch (out.error) {
	case idem::KeyErrc::missing_field:
	case idem::KeyErrc::wrong_type:
		ereport(ERROR, errcode(ERRCODE_SQL_JSON_MEMBER_NOT_FOUND), errmsg("%s: %s", fn, message),
		        errhint("A key must be computed from fields every message has."));
		break;
	case idem::KeyErrc::invalid_json:
		// jsonb is valid JSON; what the core refuses is a payload beyond its
		// limits (json_max_depth, json_max_exponent).
		ereport(ERROR,
		        errcode(out.json == idem::JsonErrc::too_deep ? ERRCODE_STATEMENT_TOO_COMPLEX
		                : out.json == idem::JsonErrc::number_out_of_range
		                    ? ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE
		                    : ERRCODE_INVALID_PARAMETER_VALUE),
		        errmsg("%s: %s", fn, message));
		break;
	default:
		ereport(ERROR, errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("%s: %s", fn, message));
	}
	pg_unreachable();
}

char *payload_text(const char *fn, FunctionCallInfo fcinfo, size_t *len)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: payload must not be null", fn));
	Jsonb *payload = PG_GETARG_JSONB_P(0);
	char *json = JsonbToCString(NULL, &payload->root, VARSIZE(payload));
	// The canonical form is defined on UTF-8.
	json = pg_server_to_any(json, strlen(json), PG_UTF8);
	*len = strlen(json);
	return json;
}

} // namespace

// idem_key(payload jsonb, VARIADIC fields text[]) RETURNS text
IDEM_SQL_FUNCTION(idem_key)
{
	static const char fn[] = "idem_key";
	size_t json_len;
	char *json = payload_text(fn, fcinfo, &json_len);
	if (PG_ARGISNULL(1))
		ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
		        errmsg("%s: fields must not be null", fn));
	ArrayType *array = PG_GETARG_ARRAYTYPE_P(1);
	Datum *elems;
	bool *nulls;
	int n;
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	const char **fields = static_cast<const char **>(palloc(sizeof(char *) * (n + 1)));
	int *lens = static_cast<int *>(palloc(sizeof(int) * (n + 1)));
	for (int i = 0; i < n; i++) {
		if (nulls[i])
			ereport(ERROR, errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			        errmsg("%s: field %d is null", fn, i + 1));
		text *field = DatumGetTextPP(elems[i]);
		fields[i] = pg_server_to_any(VARDATA_ANY(field), VARSIZE_ANY_EXHDR(field), PG_UTF8);
		lens[i] = fields[i] == VARDATA_ANY(field) ? VARSIZE_ANY_EXHDR(field) : strlen(fields[i]);
	}
	Outcome out;
	compute(json, json_len, fields, lens, n, &out);
	PG_RETURN_DATUM(digest_or_error(fn, out));
}

// idem_fingerprint(payload jsonb) RETURNS text
IDEM_SQL_FUNCTION(idem_fingerprint)
{
	static const char fn[] = "idem_fingerprint";
	size_t json_len;
	char *json = payload_text(fn, fcinfo, &json_len);
	Outcome out;
	compute(json, json_len, NULL, NULL, 0, &out);
	PG_RETURN_DATUM(digest_or_error(fn, out));
}
