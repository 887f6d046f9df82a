// Payload fingerprints and message keys: digests of JSON payloads that any
// producer can compute the same way (test/vectors/reference_key.py does it
// in a few lines of Python; test/vectors/*.json are shared test vectors).
//
// Canonical form. A payload is reduced to its canonical JSON text, defined
// in canonical_json.hpp: RFC 8785 (JCS), but numbers are exact decimals in
// ECMAScript's layout instead of being rounded to binary64. No whitespace;
// members sorted by name as UTF-16 code units; strings escaped only as \"
// \\ \b \f \n \r \t and \u00xx (lower case) for other control characters;
// numbers without leading or trailing zeros (1, 1.0, 1e0, 10e-1 -> 1; -0 ->
// 0; 1e21 -> 1e+21; 1e-7 -> 1e-7; 12345678901234567890 unchanged).
//
// Digest. SHA-256 of the UTF-8 canonical text, as 64 lower-case hex digits.
//
//   fingerprint = digest(canonical(payload))
//   message key = digest(canonical({ path_1: value_1, ..., path_n: value_n }))
//
// where path_i are the field paths exactly as written (backslashes
// included) and value_i the values they select. So the order in which the
// fields are listed does not matter, and fields not listed (a delivery
// timestamp, say) do not change the key: fields ["order.id", "customer"] on
// {"order": {"id": 42}, "customer": "a", "ts": "..."} give the digest of
// {"customer":"a","order.id":42}.
//
// Field paths. Segments separated by ".", read from the payload's top
// level down. A backslash makes the next "." or "\" part of the segment
// ("a\.b" is the member named "a.b", "a\\b" the member named "a\b"); a
// backslash before anything else is an error, so each path has exactly one
// spelling. A segment names an object member; when the value reached so far
// is an array, the segment must be an index in decimal without leading zeros
// ("0", "12"). A selected value may be anything, including an object, an
// array or null (null is present, not missing). Errors: no fields, an empty
// path or segment, a bad escape, invalid UTF-8, the same path twice, a
// member or index that is not there, and a segment applied to a scalar.
//
// Errors are reported, not thrown: a KeyError with a code (for the SQLSTATE)
// and a message that names the field as the caller wrote it.
#pragma once

#include "canonical_json.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace idem
{

// Digests are SHA-256 in lower-case hex.
constexpr size_t digest_hex_length = 64;

enum class KeyErrc {
	none,
	invalid_json,    // the payload; KeyError::json says how
	no_fields,       // an empty field list
	invalid_path,    // empty path or segment, bad escape, invalid UTF-8
	duplicate_field, // the same path twice
	missing_field,   // no such member, or an index out of range
	wrong_type,      // a segment applied to a scalar, or a name to an array
};

struct KeyError {
	KeyErrc code = KeyErrc::none;
	JsonErrc json = JsonErrc::none; // when code is invalid_json
	std::string message;            // lower case, no trailing period
};

// The fingerprint of a payload. Returns false and fills err when it is not
// acceptable JSON (see canonical_json.hpp).
bool fingerprint_hex(std::string_view json_text, std::string &hex, JsonError &err);
// The fingerprint of a parsed payload.
void fingerprint_hex(const JsonDocument &payload, std::string &hex);

// The message key of a payload for the given field paths.
bool message_key_hex(std::string_view json_text, const std::string_view *fields, size_t count,
                     std::string &hex, KeyError &err);
// The same for a parsed payload, so that the key and the fingerprint can
// share one parse.
bool message_key_hex(const JsonDocument &payload, const std::string_view *fields, size_t count,
                     std::string &hex, KeyError &err);

inline bool message_key_hex(std::string_view json_text, const std::vector<std::string_view> &fields,
                            std::string &hex, KeyError &err)
{
	return message_key_hex(json_text, fields.data(), fields.size(), hex, err);
}

// Checks one path's syntax and splits it into its (unescaped) segments,
// e.g. to validate a field list before any payload arrives. `number` is the
// path's 1-based position in its list, for the invalid UTF-8 message.
bool parse_field_path(std::string_view path, size_t number, std::vector<std::string> &segments,
                      KeyError &err);

} // namespace idem
