#include "core/canonical_json.hpp"

#include "sha256_hex.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace
{

using idem::JsonDocument;
using idem::JsonErrc;
using idem::JsonError;

// The canonical form, or "error: " and the message.
std::string canon(std::string_view text)
{
	std::string out;
	JsonError err;
	if (!idem::canonical_json(text, out, err))
		return "error: " + err.message;
	return out;
}

JsonErrc error_code(std::string_view text)
{
	std::string out;
	JsonError err;
	idem::canonical_json(text, out, err);
	return err.code;
}

TEST(CanonicalJson, NumberSpellingsOfOne)
{
	for (const char *one : {"1", "1.0", "1e0", "1E0", "1e+0", "10e-1", "0.1e1", "100e-2",
	                        "1.000000000000000000000000000000"})
		EXPECT_EQ(canon(one), "1") << one;
}

TEST(CanonicalJson, ZeroInAnySpelling)
{
	for (const char *zero : {"0", "-0", "0.0", "-0.0", "0e5", "0E-5", "-0.000e+99999999999999"})
		EXPECT_EQ(canon(zero), "0") << zero;
}

TEST(CanonicalJson, NumberLayout)
{
	const std::pair<const char *, const char *> cases[] = {
	    {"1e20", "100000000000000000000"},
	    {"1e21", "1e+21"},
	    {"123456789012345678901", "123456789012345678901"},
	    {"1234567890123456789012", "1.234567890123456789012e+21"},
	    {"0.000001", "0.000001"},
	    {"1e-6", "0.000001"},
	    {"1e-7", "1e-7"},
	    {"0.0000001", "1e-7"},
	    {"0.00000123", "0.00000123"},
	    {"0.000000123", "1.23e-7"},
	    {"123.4500", "123.45"},
	    {"-123.45e1", "-1234.5"},
	    {"12.5", "12.5"},
	    {"-1.5e300", "-1.5e+300"},
	    {"1.7976931348623157e308", "1.7976931348623157e+308"},
	    {"5e-324", "5e-324"},
	    {"4.50", "4.5"},
	    {"2e-3", "0.002"},
	    {"1E30", "1e+30"},
	    {"0.000000000000000000000000001", "1e-27"},
	    {"100", "100"},
	    {"-7", "-7"},
	    {"0.5", "0.5"},
	    {"00.5e0", "error: invalid JSON at offset 1: unexpected data after the value"},
	};
	for (const auto &c : cases)
		EXPECT_EQ(canon(c.first), c.second) << c.first;
}

TEST(CanonicalJson, NumbersAreExactBeyondDoubles)
{
	EXPECT_EQ(canon("9007199254740993"), "9007199254740993");
	EXPECT_NE(canon("9007199254740993"), canon("9007199254740992"));
	EXPECT_EQ(canon("12345678901234567890"), "12345678901234567890");
	EXPECT_EQ(canon("18446744073709551617"), "18446744073709551617");
	// RFC 8785 would print 333333333.3333333 (the double); the exact form
	// keeps all 17 digits.
	EXPECT_EQ(canon("333333333.33333329"), "333333333.33333329");
	EXPECT_EQ(canon("0.1000000000000000055511151231257827"),
	          "0.1000000000000000055511151231257827");
}

TEST(CanonicalJson, ExponentBounds)
{
	EXPECT_EQ(canon("1e1000000"), "1e+1000000");
	EXPECT_EQ(canon("0.1e1000001"), "1e+1000000");
	EXPECT_EQ(canon("1e-1000000"), "1e-1000000");
	EXPECT_EQ(canon("10e-1000001"), "1e-1000000");
	EXPECT_EQ(canon("1e1000001"), "error: JSON number at offset 0 is out of range (its "
	                              "decimal exponent exceeds 1000000 in magnitude)");
	EXPECT_EQ(error_code("[1e-1000001]"), JsonErrc::number_out_of_range);
	EXPECT_EQ(error_code("1e99999999999999999999999999999999"), JsonErrc::number_out_of_range);
	EXPECT_EQ(error_code("1e-99999999999999999999999999999999"), JsonErrc::number_out_of_range);
	// Many written digits count too, not only the written exponent.
	EXPECT_EQ(canon("1" + std::string(5000, '0')), "1e+5000");
	EXPECT_EQ(canon("0." + std::string(5000, '0') + "1"), "1e-5001");
	EXPECT_EQ(canon("1" + std::string(5000, '0') + "e-5000"), "1");
	// Every jsonb numeric fits: up to 131072 digits before the point.
	EXPECT_EQ(canon("9" + std::string(131071, '0')), "9e+131071");
}

TEST(CanonicalJson, StringsDecodedAndReescaped)
{
	EXPECT_EQ(canon(R"("caf\u00e9")"), "\"caf\xc3\xa9\"");
	EXPECT_EQ(canon("\"caf\xc3\xa9\""), "\"caf\xc3\xa9\"");
	EXPECT_EQ(canon(R"("\u20AC")"), "\"\xe2\x82\xac\"");
	EXPECT_EQ(canon(R"("\ud83d\ude00")"), "\"\xf0\x9f\x98\x80\"");
	EXPECT_EQ(canon(R"("\uD83D\uDE00")"), "\"\xf0\x9f\x98\x80\"");
	EXPECT_EQ(canon(R"("a\/b")"), "\"a/b\"");
	EXPECT_EQ(canon(R"("\"\\\b\f\n\r\t")"), R"("\"\\\b\f\n\r\t")");
	EXPECT_EQ(canon(R"("\u0008\u000C\u000a")"), R"("\b\f\n")");
	EXPECT_EQ(canon(R"("\u0001\u001F\u000b\u0000")"), R"("\u0001\u001f\u000b\u0000")");
	EXPECT_EQ(canon(R"("\u007f\u2028\u0022\u005c")"), "\"\x7f\xe2\x80\xa8\\\"\\\\\"");
	EXPECT_EQ(canon(R"("")"), R"("")");
	// U+0000 inside a string is kept (length-counted, not NUL-terminated).
	EXPECT_EQ(canon(R"(["a\u0000b"])"), R"(["a\u0000b"])");
}

TEST(CanonicalJson, WhitespaceAndStructure)
{
	EXPECT_EQ(canon(" \t\r\n{ \"b\" :\n[ 1 , { } , [ ] , true ,false,null ] , \"a\":\"x\" }\n"),
	          R"({"a":"x","b":[1,{},[],true,false,null]})");
	EXPECT_EQ(canon("[[[]],[{}]]"), "[[[]],[{}]]");
	EXPECT_EQ(canon(" null "), "null");
	EXPECT_EQ(canon("\"top\""), "\"top\"");
}

TEST(CanonicalJson, MembersSortedRecursively)
{
	EXPECT_EQ(canon(R"({"b":1,"a":2,"aa":3,"A":4,"":5})"), R"({"":5,"A":4,"a":2,"aa":3,"b":1})");
	EXPECT_EQ(canon(R"({"z":[{"y":1,"x":2}],"y":{"d":{"f":1,"e":2}}})"),
	          R"({"y":{"d":{"e":2,"f":1}},"z":[{"x":2,"y":1}]})");
	// Sorted by decoded text: "a\"" sorts after "a", "\u0062" is "b".
	EXPECT_EQ(canon(R"({"\u0062":1,"a\"":2,"a":3})"), R"({"a":3,"a\"":2,"b":1})");
}

TEST(CanonicalJson, MembersSortedAsUtf16)
{
	// RFC 8785 section 3.2.3's example.
	EXPECT_EQ(canon(R"({"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew",)"
	                R"("1":"One","\ud83d\ude00":"Emoji","\u0080":"Control","\u00f6":"o"})"),
	          "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\xc2\x80\":\"Control\","
	          "\"\xc3\xb6\":\"o\",\"\xe2\x82\xac\":\"Euro Sign\",\"\xf0\x9f\x98\x80\":\"Emoji\","
	          "\"\xef\xac\xb3\":\"Hebrew\"}");
	// U+1F600 (D83D DE00) before U+FF61, though its UTF-8 sorts after.
	EXPECT_EQ(canon(R"({"\uff61":1,"\ud83d\ude00":2})"),
	          "{\"\xf0\x9f\x98\x80\":2,\"\xef\xbd\xa1\":1}");
}

// UTF-8 to UTF-16, written separately from the core, to check compare_utf16.
std::u16string to_utf16(const std::string &s)
{
	std::u16string out;
	for (size_t i = 0; i < s.size();) {
		unsigned char c = s[i];
		uint32_t cp;
		size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
		cp = len == 1 ? c : c & (0xFF >> (len + 1));
		for (size_t k = 1; k < len; k++)
			cp = cp << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3F);
		i += len;
		if (cp >= 0x10000) {
			out += char16_t(0xD800 + ((cp - 0x10000) >> 10));
			out += char16_t(0xDC00 + ((cp - 0x10000) & 0x3FF));
		} else {
			out += char16_t(cp);
		}
	}
	return out;
}

std::string utf8(uint32_t cp)
{
	std::string out;
	if (cp < 0x80) {
		out += char(cp);
	} else if (cp < 0x800) {
		out += char(0xC0 | cp >> 6);
		out += char(0x80 | (cp & 0x3F));
	} else if (cp < 0x10000) {
		out += char(0xE0 | cp >> 12);
		out += char(0x80 | (cp >> 6 & 0x3F));
		out += char(0x80 | (cp & 0x3F));
	} else {
		out += char(0xF0 | cp >> 18);
		out += char(0x80 | (cp >> 12 & 0x3F));
		out += char(0x80 | (cp >> 6 & 0x3F));
		out += char(0x80 | (cp & 0x3F));
	}
	return out;
}

uint32_t random_code_point(std::mt19937_64 &rng)
{
	// Mostly the ranges where UTF-8 and UTF-16 order disagree.
	static const uint32_t starts[] = {0x61,   0x7E,   0x7FF,   0xD7FF,  0xE000,
	                                  0xFF00, 0xFFFE, 0x10000, 0x1F600, 0x10FFF0};
	uint32_t cp = starts[rng() % 10] + uint32_t(rng() % 4);
	return cp >= 0xD800 && cp <= 0xDFFF ? 0xE000 : cp;
}

TEST(CanonicalJson, CompareUtf16AgreesWithUtf16Strings)
{
	std::mt19937_64 rng(16);
	for (int i = 0; i < 20000; i++) {
		std::string a, b;
		size_t common = rng() % 3;
		for (size_t k = 0; k < common; k++) {
			std::string c = utf8(random_code_point(rng));
			a += c;
			b += c;
		}
		for (size_t k = rng() % 3; k > 0; k--)
			a += utf8(random_code_point(rng));
		for (size_t k = rng() % 3; k > 0; k--)
			b += utf8(random_code_point(rng));
		std::u16string ua = to_utf16(a), ub = to_utf16(b);
		int expected = ua < ub ? -1 : ua > ub ? 1 : 0;
		int got = idem::compare_utf16(a, b);
		ASSERT_EQ((got > 0) - (got < 0), expected) << a << " vs " << b;
	}
}

TEST(CanonicalJson, ValidUtf8)
{
	EXPECT_TRUE(idem::valid_utf8(""));
	EXPECT_TRUE(idem::valid_utf8("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf"));
	for (const char *bad :
	     {"\x80", "\xc0\xaf", "\xc1\xbf", "\xe0\x9f\xbf", "\xed\xa0\x80", "\xf0\x8f\xbf\xbf",
	      "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", "\xe2\x82", "\xc3", "\xe2\x28\xa1"})
		EXPECT_FALSE(idem::valid_utf8(bad)) << bad;
}

TEST(CanonicalJson, SyntaxErrors)
{
	const std::pair<const char *, const char *> cases[] = {
	    {"", "invalid JSON: unexpected end of input"},
	    {"   ", "invalid JSON: unexpected end of input"},
	    {"[1,]", "invalid JSON at offset 3: expected a value"},
	    {"[1 2]", "invalid JSON at offset 3: expected ',' or ']'"},
	    {"{\"a\":1 \"b\":2}", "invalid JSON at offset 7: expected ',' or '}'"},
	    {"{\"a\" 1}", "invalid JSON at offset 5: expected ':' after the member name"},
	    {"{1:2}", "invalid JSON at offset 1: expected a member name (a string)"},
	    {"{\"a\":1,}", "invalid JSON at offset 7: expected a member name (a string)"},
	    {"[1", "invalid JSON: unexpected end of input"},
	    {"\"abc", "invalid JSON: unexpected end of input"},
	    {"01", "invalid JSON at offset 1: unexpected data after the value"},
	    {"1 2", "invalid JSON at offset 2: unexpected data after the value"},
	    {"-", "invalid JSON at offset 0: invalid number"},
	    {"-a", "invalid JSON at offset 0: invalid number"},
	    {"1.", "invalid JSON at offset 0: invalid number"},
	    {"1.e5", "invalid JSON at offset 0: invalid number"},
	    {"1e", "invalid JSON at offset 0: invalid number"},
	    {"1e+", "invalid JSON at offset 0: invalid number"},
	    {"+1", "invalid JSON at offset 0: expected a value"},
	    {".5", "invalid JSON at offset 0: expected a value"},
	    {"NaN", "invalid JSON at offset 0: expected a value"},
	    {"[Infinity]", "invalid JSON at offset 1: expected a value"},
	    {"tru", "invalid JSON at offset 0: expected a value"},
	    {"True", "invalid JSON at offset 0: expected a value"},
	    {"nulls", "invalid JSON at offset 4: unexpected data after the value"},
	    {"'a'", "invalid JSON at offset 0: expected a value"},
	    {"\"a\tb\"", "invalid JSON at offset 2: control character in a string (it must be "
	                 "escaped)"},
	    {"\"\\x41\"", "invalid JSON at offset 1: invalid escape sequence"},
	    {"\"\\u12\"", "invalid JSON at offset 1: invalid \\u escape (it needs four hex digits)"},
	    {"\"\\u12g4\"", "invalid JSON at offset 1: invalid \\u escape (it needs four hex digits)"},
	    {"\"\\ud800\"", "invalid JSON at offset 1: lone high surrogate in a \\u escape"},
	    {"\"\\ud800\\u0041\"", "invalid JSON at offset 1: lone high surrogate in a \\u escape"},
	    {"\"\\ud800\\ud800\"", "invalid JSON at offset 1: lone high surrogate in a \\u escape"},
	    {"\"x\\udc00\"", "invalid JSON at offset 2: lone low surrogate in a \\u escape"},
	    {"\"\\ud800", "invalid JSON at offset 1: lone high surrogate in a \\u escape"},
	    {"\"\xff\"", "invalid JSON at offset 1: invalid UTF-8"},
	    {"\"\xed\xa0\x80\"", "invalid JSON at offset 1: invalid UTF-8"},
	    {"\xef\xbb\xbf{}", "invalid JSON at offset 0: expected a value"},
	    {"[1]\x00", "invalid JSON at offset 3: unexpected data after the value"},
	};
	for (const auto &c : cases) {
		std::string text(c.first);
		if (text == "[1]")
			text.push_back('\0');
		EXPECT_EQ(canon(text), std::string("error: ") + c.second) << c.first;
		EXPECT_EQ(error_code(text), JsonErrc::syntax) << c.first;
	}
}

TEST(CanonicalJson, DuplicateMembers)
{
	EXPECT_EQ(canon(R"({"a":1,"a":2})"), R"(error: duplicate JSON object member name "a")");
	EXPECT_EQ(canon(R"({"a":1,"\u0061":2})"), R"(error: duplicate JSON object member name "a")");
	EXPECT_EQ(canon(R"({"x":{"q\n":1,"b":0,"q\u000a":2}})"),
	          R"(error: duplicate JSON object member name "q\n")");
	EXPECT_EQ(error_code(R"([{"a":1},{"a":1,"a":1}])"), JsonErrc::duplicate_member);
	// Long names are cut in the message, at a character boundary.
	std::string name;
	for (int i = 0; i < 40; i++)
		name += "\xc3\xa9";
	std::string msg = canon("{\"" + name + "\":1,\"" + name + "\":2}");
	EXPECT_EQ(msg, "error: duplicate JSON object member name \"" + name.substr(0, 64) + "...\"");
	// The same name in different objects is fine.
	EXPECT_EQ(canon(R"({"a":{"a":1},"b":{"a":2}})"), R"({"a":{"a":1},"b":{"a":2}})");
}

TEST(CanonicalJson, DepthLimit)
{
	auto nested = [](size_t depth, const char *open, const char *inner, const char *close) {
		std::string s;
		for (size_t i = 0; i < depth; i++)
			s += open;
		s += inner;
		for (size_t i = 0; i < depth; i++)
			s += close;
		return s;
	};
	std::string ok = nested(1000, "[", "", "]");
	EXPECT_EQ(canon(ok), ok);
	std::string objects = nested(1000, "{\"a\":", "1", "}");
	EXPECT_EQ(canon(objects), objects);
	EXPECT_EQ(canon(nested(1001, "[", "", "]")),
	          "error: JSON value nested deeper than 1000 levels at offset 1000");
	EXPECT_EQ(error_code(nested(1001, "{\"a\":", "1", "}")), JsonErrc::too_deep);
	// Far deeper input fails the same way, without exhausting the stack.
	EXPECT_EQ(error_code(std::string(1000000, '[')), JsonErrc::too_deep);
}

TEST(CanonicalJson, AppendKeepsTheBufferAndLeavesItOnError)
{
	std::string out = "prefix:";
	JsonError err;
	ASSERT_TRUE(idem::canonical_json(R"({"b":1,"a":2})", out, err));
	EXPECT_EQ(out, R"(prefix:{"a":2,"b":1})");
	EXPECT_FALSE(idem::canonical_json(R"({"b":1,"a":)", out, err));
	EXPECT_EQ(out, R"(prefix:{"a":2,"b":1})");
	EXPECT_EQ(err.code, JsonErrc::syntax);
	EXPECT_EQ(err.offset, 11u);
}

TEST(CanonicalJson, DocumentAccess)
{
	JsonDocument doc;
	JsonError err;
	ASSERT_TRUE(doc.parse(R"({"s":"x\ny","n":[10,{"k":null},true],"o":{},"e":[]})", err));
	JsonDocument::Value root = doc.root();
	EXPECT_EQ(doc.kind(root), JsonDocument::Kind::object);
	EXPECT_EQ(doc.size(root), 4u);
	JsonDocument::Value s = doc.member(root, "s");
	ASSERT_NE(s, JsonDocument::npos);
	EXPECT_EQ(doc.kind(s), JsonDocument::Kind::string);
	EXPECT_EQ(doc.string_value(s), "x\ny");
	EXPECT_EQ(doc.member(root, "missing"), JsonDocument::npos);
	EXPECT_EQ(doc.member(s, "s"), JsonDocument::npos);
	JsonDocument::Value n = doc.member(root, "n");
	EXPECT_EQ(doc.kind(n), JsonDocument::Kind::array);
	EXPECT_EQ(doc.size(n), 3u);
	EXPECT_EQ(doc.kind(doc.element(n, 0)), JsonDocument::Kind::number);
	JsonDocument::Value inner = doc.element(n, 1);
	EXPECT_EQ(doc.kind(doc.member(inner, "k")), JsonDocument::Kind::null);
	EXPECT_EQ(doc.kind(doc.element(n, 2)), JsonDocument::Kind::true_value);
	EXPECT_EQ(doc.element(n, 3), JsonDocument::npos);
	EXPECT_EQ(doc.size(doc.member(root, "o")), 0u);
	EXPECT_EQ(doc.size(doc.member(root, "e")), 0u);
	std::string part;
	doc.append_canonical(n, part);
	EXPECT_EQ(part, R"([10,{"k":null},true])");
	// A failed parse leaves the document empty.
	EXPECT_FALSE(doc.parse("[", err));
	EXPECT_TRUE(doc.empty());
}

std::string digest_of(const JsonDocument &doc, JsonDocument::Value v)
{
	idem::Sha256 h;
	doc.hash_canonical(v, h);
	return hex_digest(h);
}

// A random JSON value, printed in two spellings: `plain` with no whitespace,
// sorted members and canonical numbers and strings (the expected canonical
// form), and `fancy` with whitespace, shuffled members, escapes and other
// number spellings.
struct Spellings {
	std::string plain;
	std::string fancy;
};

class RandomJson
{
  public:
	explicit RandomJson(uint64_t seed) : rng_(seed) {}

	Spellings value(int depth)
	{
		switch (depth > 4 ? rng_() % 4 : rng_() % 7) {
		case 0:
			return literal();
		case 1:
			return number();
		case 2:
		case 3: {
			std::string s = text();
			return {quote_plain(s), quote_fancy(s)};
		}
		case 4:
			return array(depth);
		default:
			return object(depth);
		}
	}

  private:
	std::string space()
	{
		static const char *spaces[] = {"", "", "", " ", "\n", "\t", "\r\n  "};
		return spaces[rng_() % 7];
	}

	Spellings literal()
	{
		static const char *words[] = {"true", "false", "null"};
		const char *w = words[rng_() % 3];
		return {w, w};
	}

	Spellings number()
	{
		// digits d1..dk (no leading or trailing zero) and n: 0.d x 10^n
		std::string digits;
		for (size_t k = 1 + rng_() % 25; k > 0; k--)
			digits += char('0' + rng_() % 10);
		digits[0] = char('1' + rng_() % 9);
		digits.back() = char('1' + rng_() % 9);
		int64_t n = int64_t(rng_() % 60) - 30;
		bool negative = rng_() % 2;
		if (rng_() % 10 == 0)
			return {"0", negative ? "-0.000e7" : "0.0"};
		// Plain: the ECMAScript layout, computed by hand here.
		int64_t k = int64_t(digits.size());
		std::string plain = negative ? "-" : "";
		if (k <= n && n <= 21) {
			plain += digits + std::string(size_t(n - k), '0');
		} else if (0 < n && n <= 21) {
			plain += digits.substr(0, size_t(n)) + "." + digits.substr(size_t(n));
		} else if (-6 < n && n <= 0) {
			plain += "0." + std::string(size_t(-n), '0') + digits;
		} else {
			plain += digits.substr(0, 1);
			if (k > 1)
				plain += "." + digits.substr(1);
			plain += (n - 1 > 0 ? "e+" : "e-") + std::to_string(n > 1 ? n - 1 : 1 - n);
		}
		// Fancy: 0.<zeros><digits><zeros>E<exponent>, leading zeros moved
		// into the exponent.
		size_t lead = rng_() % 4, trail = rng_() % 4;
		int64_t e = n + int64_t(lead);
		std::string fancy = negative ? "-" : "";
		fancy += "0." + std::string(lead, '0') + digits + std::string(trail, '0');
		fancy += rng_() % 2 ? "E" : "e";
		if (e >= 0)
			fancy += rng_() % 2 ? "+" : "";
		fancy += std::to_string(e);
		return {plain, fancy};
	}

	std::string text()
	{
		static const uint32_t pool[] = {'a',  'b',  'z',    'A',    '0',     ' ',
		                                '"',  '\\', '/',    '\n',   0x01,    0x1f,
		                                0x7f, 0xe9, 0x20ac, 0xff61, 0x1f600, 0x10ffff};
		std::string s;
		for (size_t k = rng_() % 6; k > 0; k--)
			s += utf8(pool[rng_() % (sizeof pool / sizeof pool[0])]);
		return s;
	}

	static std::string quote_plain(const std::string &s)
	{
		std::string out;
		idem::append_json_string(s, out);
		return out;
	}

	std::string quote_fancy(const std::string &s)
	{
		static const char hex[] = "0123456789ABCDEF";
		std::u16string units = to_utf16(s);
		std::string out = "\"";
		size_t i = 0;
		for (size_t b = 0; b < s.size();) {
			unsigned char c = s[b];
			size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
			size_t nunits = len == 4 ? 2 : 1;
			if (c == '"' || c == '\\' || c < 0x20 || rng_() % 3 == 0) {
				for (size_t u = 0; u < nunits; u++) {
					char16_t v = units[i + u];
					out += "\\u";
					for (int shift = 12; shift >= 0; shift -= 4)
						out += hex[(v >> shift) & 15];
				}
			} else if (c == '/' && rng_() % 2) {
				out += "\\/";
			} else {
				out += s.substr(b, len);
			}
			b += len;
			i += nunits;
		}
		return out + "\"";
	}

	Spellings array(int depth)
	{
		Spellings a{"[", "[" + space()};
		size_t n = rng_() % 5;
		for (size_t i = 0; i < n; i++) {
			Spellings v = value(depth + 1);
			a.plain += (i ? "," : "") + v.plain;
			a.fancy += (i ? "," + space() : "") + v.fancy + space();
		}
		a.plain += "]";
		a.fancy += "]";
		return a;
	}

	Spellings object(int depth)
	{
		std::vector<std::pair<std::string, Spellings>> members;
		size_t n = rng_() % 5;
		for (size_t i = 0; i < n; i++) {
			std::string name = text() + std::to_string(i); // distinct names
			members.push_back({name, value(depth + 1)});
		}
		std::vector<std::pair<std::string, Spellings>> sorted = members;
		std::sort(sorted.begin(), sorted.end(), [](const auto &x, const auto &y) {
			return to_utf16(x.first) < to_utf16(y.first);
		});
		std::shuffle(members.begin(), members.end(), rng_);
		Spellings o{"{", "{" + space()};
		for (size_t i = 0; i < n; i++) {
			o.plain += (i ? "," : "") + quote_plain(sorted[i].first) + ":" + sorted[i].second.plain;
			o.fancy += (i ? "," + space() : "") + quote_fancy(members[i].first) + space() + ":" +
			           space() + members[i].second.fancy + space();
		}
		o.plain += "}";
		o.fancy += "}";
		return o;
	}

	std::mt19937_64 rng_;
};

TEST(CanonicalJson, RandomValuesInTwoSpellings)
{
	RandomJson gen(8785);
	for (int i = 0; i < 3000; i++) {
		Spellings s = gen.value(0);
		ASSERT_EQ(canon(s.fancy), s.plain) << s.fancy;
		ASSERT_EQ(canon(s.plain), s.plain);
	}
}

TEST(CanonicalJson, HashEqualsDigestOfText)
{
	// Big enough to pass the hashing buffer's 4 kB several times, with
	// strings both smaller and larger than it.
	std::string big = "{\"z\":[";
	for (int i = 0; i < 2000; i++)
		big += (i ? "," : "") + std::to_string(i) + ".50";
	big += "],\"y\":\"" + std::string(10000, 'q') + "\",\"x\":\"\\n\"}";
	JsonDocument doc;
	JsonError err;
	ASSERT_TRUE(doc.parse(big, err));
	std::string text;
	doc.append_canonical(doc.root(), text);
	EXPECT_EQ(digest_of(doc, doc.root()), sha256_hex(text));
	EXPECT_EQ(text.substr(0, 20), "{\"x\":\"\\n\",\"y\":\"qqqqq");
}

TEST(CanonicalJson, MutatedInputNeverBreaksIt)
{
	// A poor man's fuzzer: whatever is accepted has a canonical form that
	// is its own canonical form.
	RandomJson gen(1);
	std::mt19937_64 rng(2);
	const char bytes[] = "{}[],:\"\\u0123456789abcdefeE.+- \ntrue\xc3\xa9\xf0\x9f\x98\x80\xff";
	int accepted = 0;
	for (int i = 0; i < 20000; i++) {
		std::string s = gen.value(0).fancy;
		for (size_t m = 1 + rng() % 3; m > 0; m--) {
			size_t at = s.empty() ? 0 : rng() % s.size();
			switch (rng() % 3) {
			case 0:
				if (!s.empty())
					s.erase(at, 1);
				break;
			case 1:
				s.insert(at, 1, bytes[rng() % (sizeof bytes - 1)]);
				break;
			default:
				if (!s.empty())
					s[at] = bytes[rng() % (sizeof bytes - 1)];
			}
		}
		std::string c = canon(s);
		if (c.rfind("error: ", 0) == 0)
			continue;
		accepted++;
		ASSERT_EQ(canon(c), c) << s;
	}
	EXPECT_GT(accepted, 1000);
}

} // namespace
