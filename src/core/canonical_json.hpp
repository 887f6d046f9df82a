// Canonical JSON: one spelling for every JSON value, so that two payloads
// that mean the same thing hash to the same fingerprint and message key.
//
// The canonical form follows RFC 8785 (JCS) except for numbers, which stay
// exact (see below):
//
//   - no whitespace;
//   - object members sorted by name, names compared as sequences of UTF-16
//     code units (RFC 8785 section 3.2.3); duplicate names are an error;
//     arrays keep their order;
//   - strings: every escape decoded (\uXXXX surrogate pairs combined), then
//     written as UTF-8 with only \" \\ \b \f \n \r \t and, for the other
//     characters below U+0020, \u00xx in lower-case hex; everything else
//     literally. Lone surrogates and invalid UTF-8 are errors;
//   - true, false, null as they are;
//   - numbers: the exact decimal value, never rounded to binary64, so ids
//     beyond 2^53 never collide. With k significant digits d1..dk (no
//     leading or trailing zeros) and n such that value = 0.d1..dk x 10^n,
//     the layout of ECMAScript's Number::toString, which RFC 8785 uses:
//        k <= n <= 21      d1..dk followed by n-k zeros      1e20 -> 100000000000000000000
//        0 < n <= 21       d1..dn "." dn+1..dk               12.50 -> 12.5
//        -6 < n <= 0       "0." -n zeros d1..dk              1e-6 -> 0.000001
//        otherwise         d1 ["." d2..dk] "e" sign (n-1)    1e21 -> 1e+21, 1e-7 -> 1e-7
//     with "-" in front of negative values. Zero in any spelling (-0, 0.0,
//     0e5) is "0"; 1, 1.0, 1e0 and 10e-1 are all "1". For every number with
//     at most 15 significant digits in the normal binary64 range (about
//     2.2e-308 to 1.8e308) this is exactly RFC 8785's output, because such a
//     decimal is the shortest one that round-trips through its double. Beyond
//     that RFC 8785 would round and this form does not. The decimal exponent
//     of the first significant digit (n-1) must lie within
//     +-json_max_exponent, which covers every value a PostgreSQL numeric,
//     and so jsonb, can hold.
//
// The parser accepts exactly RFC 8259 JSON text (any value at the top,
// whitespace around tokens; no BOM, no trailing data, no NaN or Infinity)
// nested at most json_max_depth arrays and objects deep. It is iterative,
// so no input can exhaust the stack, and it builds no tree of heap nodes:
// a document is a flat array of nodes (one per value or member name, each
// container knowing where its subtree ends) plus one buffer of decoded text.
// Each object's members are sorted once, as the object closes, into a list
// of member indices, so writing the canonical form never moves subtrees
// and costs O(size) however deep the nesting.
//
// Errors are reported, not thrown (a JsonError with a code and a message in
// PostgreSQL style); only std::bad_alloc can escape.
#pragma once

#include "sha256.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace idem
{

constexpr size_t json_max_depth = 1000;
constexpr int64_t json_max_exponent = 1000000;

enum class JsonErrc {
	none,
	syntax,              // not JSON text (including invalid UTF-8 and lone surrogates)
	too_deep,            // arrays and objects nested deeper than json_max_depth
	number_out_of_range, // a number's exponent beyond json_max_exponent
	duplicate_member,    // an object names the same member twice
};

struct JsonError {
	JsonErrc code = JsonErrc::none;
	size_t offset = 0;   // byte offset in the input where it was found
	std::string message; // lower case, no trailing period
};

class JsonDocument
{
  public:
	enum class Kind : uint8_t { null, false_value, true_value, number, string, array, object };
	// A value in the document: an index into its node array.
	using Value = size_t;
	static constexpr Value npos = SIZE_MAX;

	// Parses json_text, replacing what the document held. Returns false and
	// fills err when the text is not acceptable; the document is then empty.
	// The document keeps no reference to json_text. The accessors below
	// take values of a document that parsed successfully.
	bool parse(std::string_view json_text, JsonError &err);

	bool empty() const noexcept { return nodes_.empty(); }
	Value root() const noexcept { return 0; }
	Kind kind(Value v) const noexcept;

	// The member of an object with exactly this (UTF-8) name, or npos.
	Value member(Value object, std::string_view name) const noexcept;
	// Element `index` of an array, or npos.
	Value element(Value array, size_t index) const noexcept;
	// The number of elements of an array or members of an object.
	size_t size(Value container) const noexcept;
	// The decoded UTF-8 of a string.
	std::string_view string_value(Value string) const noexcept;

	// Appends the canonical text of v to out.
	void append_canonical(Value v, std::string &out) const;
	// Feeds the canonical text of v to h, without building it whole.
	void hash_canonical(Value v, Sha256 &h) const;

  private:
	enum class NodeKind : uint8_t {
		null,
		false_value,
		true_value,
		number, // a, b: offset and length of its canonical text in text_
		string, // a, b: offset and length of its decoded UTF-8 in text_
		array,  // a: index just past its subtree; b: element count
		object, // a: index just past its subtree; b: offset in order_
		name,   // a member name, like string; its value is the next node
	};
	struct Node {
		NodeKind kind;
		size_t a;
		size_t b;
	};

	std::string_view text_of(const Node &n) const noexcept
	{
		return std::string_view(text_.data() + n.a, n.b);
	}
	size_t next_sibling(Value v) const noexcept;
	template <typename Sink> void write(Value v, Sink &sink) const;

	friend class JsonParser;

	std::vector<Node> nodes_;
	std::string text_;
	// Per object: its member count, then the indices of its name nodes in
	// canonical order.
	std::vector<size_t> order_;
};

// Appends the canonical form of json_text to out. On error returns false,
// fills err and leaves out as it was.
bool canonical_json(std::string_view json_text, std::string &out, JsonError &err);

// Appends s, valid UTF-8, to out as a canonical JSON string (with quotes).
void append_json_string(std::string_view s, std::string &out);

// Compares two valid UTF-8 strings as sequences of UTF-16 code units, the
// order of member names in the canonical form. Returns <0, 0 or >0.
int compare_utf16(std::string_view a, std::string_view b) noexcept;

// Whether s is valid UTF-8 (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF).
bool valid_utf8(std::string_view s) noexcept;

} // namespace idem
