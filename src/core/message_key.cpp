// See message_key.hpp for the definitions of fingerprints, message keys and
// field paths.
#include "message_key.hpp"

#include "sha256.hpp"

#include <algorithm>

namespace idem
{

namespace
{

void to_hex(const uint8_t digest[Sha256::digest_size], std::string &hex)
{
	static const char digits[] = "0123456789abcdef";
	hex.resize(digest_hex_length);
	for (size_t i = 0; i < Sha256::digest_size; i++) {
		hex[2 * i] = digits[digest[i] >> 4];
		hex[2 * i + 1] = digits[digest[i] & 15];
	}
}

bool fail(KeyError &err, KeyErrc code, std::string message)
{
	err.code = code;
	err.json = JsonErrc::none;
	err.message = std::move(message);
	return false;
}

std::string quoted(std::string_view path)
{
	return "\"" + std::string(path) + "\"";
}

// Splits a path into segments; ends[i] is where segment i ends in the path
// as written, for naming the part of a path that was resolved so far.
bool split_path(std::string_view path, size_t number, std::vector<std::string> &segments,
                std::vector<size_t> &ends, KeyError &err)
{
	segments.clear();
	ends.clear();
	if (!valid_utf8(path))
		return fail(err, KeyErrc::invalid_path,
		            "field number " + std::to_string(number) + " is not valid UTF-8");
	if (path.empty())
		return fail(err, KeyErrc::invalid_path, "field \"\" is empty");
	std::string segment;
	for (size_t i = 0; i <= path.size(); i++) {
		if (i == path.size() || path[i] == '.') {
			if (segment.empty())
				return fail(err, KeyErrc::invalid_path,
				            "field " + quoted(path) + " has an empty segment");
			segments.push_back(std::move(segment));
			ends.push_back(i);
			segment.clear();
		} else if (path[i] == '\\') {
			if (i + 1 == path.size() || (path[i + 1] != '.' && path[i + 1] != '\\'))
				return fail(err, KeyErrc::invalid_path,
				            "field " + quoted(path) +
				                " has an invalid escape (a backslash must be "
				                "followed by \".\" or \"\\\")");
			segment += path[++i];
		} else {
			segment += path[i];
		}
	}
	return true;
}

// An array index: decimal digits without leading zeros. Indexes too large
// to be stored saturate, and are then out of range of any array.
bool array_index(const std::string &segment, size_t &index)
{
	if (segment.empty() || (segment[0] == '0' && segment.size() > 1))
		return false;
	index = 0;
	for (char c : segment) {
		if (c < '0' || c > '9')
			return false;
		size_t d = size_t(c - '0');
		index = index > (SIZE_MAX - d) / 10 ? SIZE_MAX : index * 10 + d;
	}
	return true;
}

const char *kind_name(JsonDocument::Kind kind)
{
	switch (kind) {
	case JsonDocument::Kind::null:
		return "null";
	case JsonDocument::Kind::false_value:
	case JsonDocument::Kind::true_value:
		return "a boolean";
	case JsonDocument::Kind::number:
		return "a number";
	case JsonDocument::Kind::string:
		return "a string";
	case JsonDocument::Kind::array:
		return "an array";
	case JsonDocument::Kind::object:
		return "an object";
	}
	return "a value";
}

// Finds the value a path selects.
bool resolve(const JsonDocument &doc, std::string_view path,
             const std::vector<std::string> &segments, const std::vector<size_t> &ends,
             JsonDocument::Value &value, KeyError &err)
{
	JsonDocument::Value v = doc.root();
	for (size_t i = 0; i < segments.size(); i++) {
		std::string reached =
		    i == 0 ? std::string("the payload") : quoted(path.substr(0, ends[i - 1]));
		JsonDocument::Kind kind = doc.kind(v);
		if (kind == JsonDocument::Kind::object) {
			v = doc.member(v, segments[i]);
		} else if (kind == JsonDocument::Kind::array) {
			size_t index;
			if (!array_index(segments[i], index))
				return fail(err, KeyErrc::wrong_type,
				            "field " + quoted(path) + " cannot be selected: " + reached +
				                " is an array and " + quoted(segments[i]) + " is not an index");
			v = doc.element(v, index);
		} else {
			return fail(err, KeyErrc::wrong_type,
			            "field " + quoted(path) + " cannot be selected: " + reached + " is " +
			                kind_name(kind) + ", not an object or array");
		}
		if (v == JsonDocument::npos)
			return fail(err, KeyErrc::missing_field,
			            "field " + quoted(path) + " is missing from the payload");
	}
	value = v;
	return true;
}

} // namespace

bool parse_field_path(std::string_view path, size_t number, std::vector<std::string> &segments,
                      KeyError &err)
{
	std::vector<size_t> ends;
	return split_path(path, number, segments, ends, err);
}

void fingerprint_hex(const JsonDocument &payload, std::string &hex)
{
	Sha256 h;
	payload.hash_canonical(payload.root(), h);
	uint8_t digest[Sha256::digest_size];
	h.finish(digest);
	to_hex(digest, hex);
}

bool fingerprint_hex(std::string_view json_text, std::string &hex, JsonError &err)
{
	JsonDocument doc;
	if (!doc.parse(json_text, err))
		return false;
	fingerprint_hex(doc, hex);
	return true;
}

bool message_key_hex(const JsonDocument &payload, const std::string_view *fields, size_t count,
                     std::string &hex, KeyError &err)
{
	if (count == 0)
		return fail(err, KeyErrc::no_fields, "the message key needs at least one field");

	// Check every path before looking any up, so that a bad path is
	// reported as such whatever the payload holds.
	std::vector<std::vector<std::string>> segments(count);
	std::vector<std::vector<size_t>> ends(count);
	for (size_t i = 0; i < count; i++)
		if (!split_path(fields[i], i + 1, segments[i], ends[i], err))
			return false;

	// The key's members in canonical order. Each path has one spelling, so
	// equal text is the same field.
	std::vector<size_t> order(count);
	for (size_t i = 0; i < count; i++)
		order[i] = i;
	std::sort(order.begin(), order.end(),
	          [fields](size_t a, size_t b) { return compare_utf16(fields[a], fields[b]) < 0; });
	for (size_t i = 1; i < count; i++)
		if (fields[order[i - 1]] == fields[order[i]])
			return fail(err, KeyErrc::duplicate_field,
			            "field " + quoted(fields[order[i]]) + " is named twice");

	std::vector<JsonDocument::Value> values(count);
	for (size_t i = 0; i < count; i++)
		if (!resolve(payload, fields[i], segments[i], ends[i], values[i], err))
			return false;

	Sha256 h;
	std::string piece;
	for (size_t i = 0; i < count; i++) {
		piece.assign(i == 0 ? "{" : ",");
		append_json_string(fields[order[i]], piece);
		piece += ':';
		h.update(piece.data(), piece.size());
		payload.hash_canonical(values[order[i]], h);
	}
	h.update("}", 1);
	uint8_t digest[Sha256::digest_size];
	h.finish(digest);
	to_hex(digest, hex);
	return true;
}

bool message_key_hex(std::string_view json_text, const std::string_view *fields, size_t count,
                     std::string &hex, KeyError &err)
{
	JsonDocument doc;
	JsonError json_err;
	if (!doc.parse(json_text, json_err)) {
		err.code = KeyErrc::invalid_json;
		err.json = json_err.code;
		err.message = std::move(json_err.message);
		return false;
	}
	return message_key_hex(doc, fields, count, hex, err);
}

} // namespace idem
