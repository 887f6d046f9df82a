// See canonical_json.hpp for the canonical form. This file holds the parser
// (a loop over an explicit stack of open containers), the number formatter
// and the writer (another loop over an explicit stack).
#include "canonical_json.hpp"

#include <algorithm>
#include <cstring>

namespace idem
{

namespace
{

inline bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

inline bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// Byte classes for the two hot loops, one table lookup per byte.
struct ByteTable {
	bool of[256];
};

// Bytes a string's text can hold as they are: printable ASCII but the
// quote and the backslash.
constexpr ByteTable plain_input = [] {
	ByteTable t{};
	for (int c = 0x20; c < 0x80; c++)
		t.of[c] = c != '"' && c != '\\';
	return t;
}();

// Bytes the canonical form must escape.
constexpr ByteTable escaped_output = [] {
	ByteTable t{};
	for (int c = 0; c < 0x20; c++)
		t.of[c] = true;
	t.of[int('"')] = t.of[int('\\')] = true;
	return t;
}();

// The length of the UTF-8 sequence at p (at most avail bytes), or 0 when it
// is not valid RFC 3629 UTF-8.
size_t utf8_sequence_length(const unsigned char *p, size_t avail)
{
	unsigned char c = p[0];
	if (c < 0x80)
		return 1;
	size_t len;
	unsigned char lo = 0x80, hi = 0xBF; // the allowed range of the second byte
	if (c >= 0xC2 && c <= 0xDF) {
		len = 2;
	} else if (c >= 0xE0 && c <= 0xEF) {
		len = 3;
		if (c == 0xE0)
			lo = 0xA0; // no overlong forms
		else if (c == 0xED)
			hi = 0x9F; // no UTF-16 surrogates
	} else if (c >= 0xF0 && c <= 0xF4) {
		len = 4;
		if (c == 0xF0)
			lo = 0x90; // no overlong forms
		else if (c == 0xF4)
			hi = 0x8F; // nothing above U+10FFFF
	} else {
		return 0;
	}
	if (avail < len || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (p[i] < 0x80 || p[i] > 0xBF)
			return 0;
	return len;
}

// Decodes the code point at s[i], which starts a sequence of valid UTF-8.
// Never reads past the end, whatever s holds.
uint32_t decode_utf8(std::string_view s, size_t i)
{
	auto byte = [&](size_t k) -> uint32_t {
		return i + k < s.size() ? uint32_t(static_cast<unsigned char>(s[i + k])) & 0x3F : 0;
	};
	uint32_t c = static_cast<unsigned char>(s[i]);
	if (c < 0xE0)
		return c < 0x80 ? c : ((c & 0x1F) << 6) | byte(1);
	if (c < 0xF0)
		return ((c & 0x0F) << 12) | (byte(1) << 6) | byte(2);
	return ((c & 0x07) << 18) | (byte(1) << 12) | (byte(2) << 6) | byte(3);
}

void append_utf8(std::string &out, uint32_t cp)
{
	if (cp < 0x80) {
		out += char(cp);
	} else if (cp < 0x800) {
		out += char(0xC0 | (cp >> 6));
		out += char(0x80 | (cp & 0x3F));
	} else if (cp < 0x10000) {
		out += char(0xE0 | (cp >> 12));
		out += char(0x80 | ((cp >> 6) & 0x3F));
		out += char(0x80 | (cp & 0x3F));
	} else {
		out += char(0xF0 | (cp >> 18));
		out += char(0x80 | ((cp >> 12) & 0x3F));
		out += char(0x80 | ((cp >> 6) & 0x3F));
		out += char(0x80 | (cp & 0x3F));
	}
}

int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

struct StringSink {
	std::string &out;
	void put(char c) { out += c; }
	void put(const char *s, size_t n) { out.append(s, n); }
	void put(std::string_view s) { out.append(s.data(), s.size()); }
};

// Feeds SHA-256 through a buffer, so that the writer's many small pieces
// cost one update per 4 kB.
struct HashSink {
	Sha256 &h;
	char buf[4096];
	size_t len = 0;

	explicit HashSink(Sha256 &hash) : h(hash) {}
	void flush()
	{
		h.update(buf, len);
		len = 0;
	}
	void put(char c)
	{
		if (len == sizeof buf)
			flush();
		buf[len++] = c;
	}
	void put(const char *s, size_t n)
	{
		if (n > sizeof buf - len) {
			flush();
			if (n > sizeof buf) {
				h.update(s, n);
				return;
			}
		}
		memcpy(buf + len, s, n);
		len += n;
	}
	void put(std::string_view s) { put(s.data(), s.size()); }
};

template <typename Sink> void put_string(Sink &out, std::string_view s)
{
	static const char hex[] = "0123456789abcdef";
	out.put('"');
	size_t run = 0;
	for (size_t i = 0; i < s.size(); i++) {
		unsigned char c = static_cast<unsigned char>(s[i]);
		if (!escaped_output.of[c])
			continue;
		out.put(s.data() + run, i - run);
		run = i + 1;
		switch (c) {
		case '"':
			out.put("\\\"", 2);
			break;
		case '\\':
			out.put("\\\\", 2);
			break;
		case '\b':
			out.put("\\b", 2);
			break;
		case '\f':
			out.put("\\f", 2);
			break;
		case '\n':
			out.put("\\n", 2);
			break;
		case '\r':
			out.put("\\r", 2);
			break;
		case '\t':
			out.put("\\t", 2);
			break;
		default: {
			char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
			out.put(esc, 6);
		}
		}
	}
	out.put(s.data() + run, s.size() - run);
	out.put('"');
}

// A member name for an error message: escaped like the canonical form, and
// cut (at a character boundary) when long.
std::string quoted_name(std::string_view name)
{
	constexpr size_t limit = 64;
	bool cut = false;
	if (name.size() > limit) {
		size_t end = limit;
		while (end > 0 && (static_cast<unsigned char>(name[end]) & 0xC0) == 0x80)
			end--;
		name = name.substr(0, end);
		cut = true;
	}
	std::string out;
	StringSink sink{out};
	put_string(sink, name);
	if (cut)
		out.insert(out.size() - 1, "...");
	return out;
}

} // namespace

// The parser. One loop: read a value; if it opened a container, go on with
// the container's first value; else close containers as long as their end
// follows, then go on with the next value after a comma.
class JsonParser
{
  public:
	JsonParser(JsonDocument &doc, std::string_view in, JsonError &err)
	    : doc_(doc), begin_(in.data()), p_(in.data()), end_(in.data() + in.size()), err_(err)
	{
	}

	bool run();

  private:
	using NodeKind = JsonDocument::NodeKind;
	struct Frame {
		size_t node;
		size_t first_member; // in members_, for objects
		bool object;
	};

	bool fail(JsonErrc code, const char *at, std::string message)
	{
		err_.code = code;
		err_.offset = size_t(at - begin_);
		err_.message = std::move(message);
		return false;
	}
	bool syntax(const char *at, const char *what)
	{
		if (at == end_)
			return fail(JsonErrc::syntax, at, "invalid JSON: unexpected end of input");
		return fail(JsonErrc::syntax, at,
		            "invalid JSON at offset " + std::to_string(at - begin_) + ": " + what);
	}
	void skip_space()
	{
		while (p_ < end_ && is_space(*p_))
			p_++;
	}

	bool open(bool object);
	bool close();
	bool member_name();
	bool string(NodeKind kind);
	bool escape();
	bool unicode_escape(const char *start);
	bool read_hex4(uint32_t &unit);
	bool number();
	bool literal();

	JsonDocument &doc_;
	const char *const begin_;
	const char *p_;
	const char *const end_;
	JsonError &err_;
	std::vector<Frame> stack_;
	std::vector<size_t> members_; // name nodes of the open objects' members
	std::string digits_;          // scratch for number()
};

bool JsonParser::run()
{
	// Enough for typical payloads (a node per 4 bytes or so) without
	// growing, and no more than a few pages whatever the input's size.
	size_t size = size_t(end_ - begin_);
	doc_.text_.reserve(size);
	doc_.nodes_.reserve(std::min<size_t>(size / 4 + 4, 4096));
	doc_.order_.reserve(std::min<size_t>(size / 8 + 4, 1024));
	stack_.reserve(std::min<size_t>(size / 2 + 1, 32));
	members_.reserve(std::min<size_t>(size / 8 + 4, 256));
	for (;;) {
		skip_space();
		if (p_ == end_)
			return syntax(p_, "expected a value");
		char c = *p_;
		bool done; // a whole value was read (not just a container opened)
		if (c == '{' || c == '[') {
			if (!open(c == '{'))
				return false;
			skip_space();
			if (p_ < end_ && *p_ == (c == '{' ? '}' : ']')) {
				p_++;
				if (!close())
					return false;
				done = true;
			} else {
				if (c == '{' && !member_name())
					return false;
				done = false;
			}
		} else if (c == '"') {
			if (!string(NodeKind::string))
				return false;
			done = true;
		} else if (c == '-' || is_digit(c)) {
			if (!number())
				return false;
			done = true;
		} else {
			if (!literal())
				return false;
			done = true;
		}
		if (!done)
			continue;

		// After a value: close containers or move to the next value.
		for (;;) {
			if (stack_.empty()) {
				skip_space();
				if (p_ != end_)
					return syntax(p_, "unexpected data after the value");
				return true;
			}
			Frame &top = stack_.back();
			if (!top.object)
				doc_.nodes_[top.node].b++;
			skip_space();
			if (p_ == end_)
				return syntax(p_, "");
			if (*p_ == ',') {
				p_++;
				if (top.object) {
					skip_space();
					if (!member_name())
						return false;
				}
				break;
			}
			if (*p_ == (top.object ? '}' : ']')) {
				p_++;
				if (!close())
					return false;
				continue;
			}
			return syntax(p_, top.object ? "expected ',' or '}'" : "expected ',' or ']'");
		}
	}
}

bool JsonParser::open(bool object)
{
	if (stack_.size() >= json_max_depth)
		return fail(JsonErrc::too_deep, p_,
		            "JSON value nested deeper than " + std::to_string(json_max_depth) +
		                " levels at offset " + std::to_string(p_ - begin_));
	p_++;
	stack_.push_back(Frame{doc_.nodes_.size(), members_.size(), object});
	doc_.nodes_.push_back({object ? NodeKind::object : NodeKind::array, 0, 0});
	return true;
}

bool JsonParser::close()
{
	Frame f = stack_.back();
	stack_.pop_back();
	JsonDocument::Node &node = doc_.nodes_[f.node];
	node.a = doc_.nodes_.size();
	if (!f.object)
		return true;

	const JsonDocument &doc = doc_;
	auto name = [&doc](size_t i) { return doc.text_of(doc.nodes_[i]); };
	auto first = members_.begin() + f.first_member;
	std::sort(first, members_.end(),
	          [&name](size_t x, size_t y) { return compare_utf16(name(x), name(y)) < 0; });
	for (auto it = first; it != members_.end() && it + 1 != members_.end(); ++it)
		if (name(*it) == name(*(it + 1)))
			return fail(JsonErrc::duplicate_member, p_ - 1,
			            "duplicate JSON object member name " + quoted_name(name(*it)));
	node.b = doc_.order_.size();
	doc_.order_.push_back(size_t(members_.end() - first));
	doc_.order_.insert(doc_.order_.end(), first, members_.end());
	members_.resize(f.first_member);
	return true;
}

bool JsonParser::member_name()
{
	if (p_ == end_ || *p_ != '"')
		return syntax(p_, "expected a member name (a string)");
	members_.push_back(doc_.nodes_.size());
	if (!string(NodeKind::name))
		return false;
	skip_space();
	if (p_ == end_ || *p_ != ':')
		return syntax(p_, "expected ':' after the member name");
	p_++;
	return true;
}

bool JsonParser::string(NodeKind kind)
{
	std::string &text = doc_.text_;
	size_t start = text.size();
	p_++; // the opening quote
	for (;;) {
		const char *run = p_;
		while (p_ < end_ && plain_input.of[static_cast<unsigned char>(*p_)])
			p_++;
		text.append(run, size_t(p_ - run));
		if (p_ == end_)
			return syntax(p_, "");
		unsigned char c = static_cast<unsigned char>(*p_);
		if (c == '"') {
			p_++;
			break;
		}
		if (c == '\\') {
			if (!escape())
				return false;
		} else if (c < 0x20) {
			return syntax(p_, "control character in a string (it must be escaped)");
		} else {
			size_t len = utf8_sequence_length(reinterpret_cast<const unsigned char *>(p_),
			                                  size_t(end_ - p_));
			if (len == 0)
				return syntax(p_, "invalid UTF-8");
			text.append(p_, len);
			p_ += len;
		}
	}
	doc_.nodes_.push_back({kind, start, text.size() - start});
	return true;
}

bool JsonParser::escape()
{
	const char *start = p_;
	p_++; // the backslash
	if (p_ == end_)
		return syntax(p_, "");
	char c = *p_++;
	char decoded;
	switch (c) {
	case '"':
	case '\\':
	case '/':
		decoded = c;
		break;
	case 'b':
		decoded = '\b';
		break;
	case 'f':
		decoded = '\f';
		break;
	case 'n':
		decoded = '\n';
		break;
	case 'r':
		decoded = '\r';
		break;
	case 't':
		decoded = '\t';
		break;
	case 'u':
		return unicode_escape(start);
	default:
		return syntax(start, "invalid escape sequence");
	}
	doc_.text_ += decoded;
	return true;
}

bool JsonParser::read_hex4(uint32_t &unit)
{
	if (end_ - p_ < 4)
		return syntax(p_ == end_ ? p_ : p_ - 2, "invalid \\u escape (it needs four hex digits)");
	unit = 0;
	for (int i = 0; i < 4; i++) {
		int v = hex_value(p_[i]);
		if (v < 0)
			return syntax(p_ - 2, "invalid \\u escape (it needs four hex digits)");
		unit = unit << 4 | uint32_t(v);
	}
	p_ += 4;
	return true;
}

bool JsonParser::unicode_escape(const char *start)
{
	uint32_t unit;
	if (!read_hex4(unit))
		return false;
	uint32_t cp = unit;
	if (unit >= 0xDC00 && unit <= 0xDFFF)
		return syntax(start, "lone low surrogate in a \\u escape");
	if (unit >= 0xD800 && unit <= 0xDBFF) {
		if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u')
			return syntax(start, "lone high surrogate in a \\u escape");
		p_ += 2;
		uint32_t low;
		if (!read_hex4(low))
			return false;
		if (low < 0xDC00 || low > 0xDFFF)
			return syntax(start, "lone high surrogate in a \\u escape");
		cp = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
	}
	append_utf8(doc_.text_, cp);
	return true;
}

bool JsonParser::number()
{
	const char *start = p_;
	bool negative = *p_ == '-';
	if (negative)
		p_++;
	if (p_ == end_ || !is_digit(*p_))
		return syntax(start, "invalid number");
	const char *int_begin = p_;
	if (*p_ == '0')
		p_++;
	else
		while (p_ < end_ && is_digit(*p_))
			p_++;
	const char *int_end = p_;
	const char *frac_begin = p_, *frac_end = p_;
	if (p_ < end_ && *p_ == '.') {
		p_++;
		if (p_ == end_ || !is_digit(*p_))
			return syntax(start, "invalid number");
		frac_begin = p_;
		while (p_ < end_ && is_digit(*p_))
			p_++;
		frac_end = p_;
	}
	// The written exponent, saturated far beyond any acceptable value so
	// that it cannot overflow.
	int64_t exponent = 0;
	if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
		p_++;
		bool exp_negative = false;
		if (p_ < end_ && (*p_ == '+' || *p_ == '-'))
			exp_negative = *p_++ == '-';
		if (p_ == end_ || !is_digit(*p_))
			return syntax(start, "invalid number");
		constexpr int64_t saturated = 100000000000000000; // 1e17
		while (p_ < end_ && is_digit(*p_)) {
			if (exponent < saturated)
				exponent = exponent * 10 + (*p_ - '0');
			p_++;
		}
		if (exp_negative)
			exponent = -exponent;
	}

	digits_.assign(int_begin, int_end);
	digits_.append(frac_begin, frac_end);
	std::string &text = doc_.text_;
	size_t out_start = text.size();
	size_t first = digits_.find_first_not_of('0');
	if (first == std::string::npos) {
		text += '0'; // zero, however spelled
	} else {
		size_t last = digits_.find_last_not_of('0');
		const char *d = digits_.data() + first;
		int64_t k = int64_t(last - first + 1);
		// value = 0.d1..dk x 10^n
		int64_t n = int64_t(int_end - int_begin) - int64_t(first) + exponent;
		if (n - 1 > json_max_exponent || n - 1 < -json_max_exponent)
			return fail(JsonErrc::number_out_of_range, start,
			            "JSON number at offset " + std::to_string(start - begin_) +
			                " is out of range (its decimal exponent exceeds " +
			                std::to_string(json_max_exponent) + " in magnitude)");
		if (negative)
			text += '-';
		if (k <= n && n <= 21) {
			text.append(d, size_t(k));
			text.append(size_t(n - k), '0');
		} else if (0 < n && n <= 21) {
			text.append(d, size_t(n));
			text += '.';
			text.append(d + n, size_t(k - n));
		} else if (-6 < n && n <= 0) {
			text += "0.";
			text.append(size_t(-n), '0');
			text.append(d, size_t(k));
		} else {
			text += d[0];
			if (k > 1) {
				text += '.';
				text.append(d + 1, size_t(k - 1));
			}
			text += n - 1 > 0 ? "e+" : "e-";
			text += std::to_string(n - 1 > 0 ? n - 1 : 1 - n);
		}
	}
	doc_.nodes_.push_back({NodeKind::number, out_start, text.size() - out_start});
	return true;
}

bool JsonParser::literal()
{
	static const struct {
		const char *word;
		size_t len;
		NodeKind kind;
	} literals[] = {{"true", 4, NodeKind::true_value},
	                {"false", 5, NodeKind::false_value},
	                {"null", 4, NodeKind::null}};
	for (const auto &l : literals) {
		if (size_t(end_ - p_) >= l.len && memcmp(p_, l.word, l.len) == 0) {
			p_ += l.len;
			doc_.nodes_.push_back({l.kind, 0, 0});
			return true;
		}
	}
	return syntax(p_, "expected a value");
}

bool JsonDocument::parse(std::string_view json_text, JsonError &err)
{
	nodes_.clear();
	text_.clear();
	order_.clear();
	JsonParser parser(*this, json_text, err);
	if (parser.run())
		return true;
	nodes_.clear();
	text_.clear();
	order_.clear();
	return false;
}

JsonDocument::Kind JsonDocument::kind(Value v) const noexcept
{
	switch (nodes_[v].kind) {
	case NodeKind::null:
		return Kind::null;
	case NodeKind::false_value:
		return Kind::false_value;
	case NodeKind::true_value:
		return Kind::true_value;
	case NodeKind::number:
		return Kind::number;
	case NodeKind::array:
		return Kind::array;
	case NodeKind::object:
		return Kind::object;
	case NodeKind::string:
	case NodeKind::name:
		break;
	}
	return Kind::string;
}

size_t JsonDocument::next_sibling(Value v) const noexcept
{
	const Node &n = nodes_[v];
	return n.kind == NodeKind::array || n.kind == NodeKind::object ? n.a : v + 1;
}

JsonDocument::Value JsonDocument::member(Value object, std::string_view name) const noexcept
{
	const Node &n = nodes_[object];
	if (n.kind != NodeKind::object)
		return npos;
	// The names are sorted, so a binary search finds one.
	size_t lo = n.b + 1, hi = n.b + 1 + order_[n.b];
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = compare_utf16(text_of(nodes_[order_[mid]]), name);
		if (c == 0)
			return order_[mid] + 1;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return npos;
}

JsonDocument::Value JsonDocument::element(Value array, size_t index) const noexcept
{
	const Node &n = nodes_[array];
	if (n.kind != NodeKind::array || index >= n.b)
		return npos;
	Value v = array + 1;
	for (size_t i = 0; i < index; i++)
		v = next_sibling(v);
	return v;
}

size_t JsonDocument::size(Value container) const noexcept
{
	const Node &n = nodes_[container];
	if (n.kind == NodeKind::array)
		return n.b;
	if (n.kind == NodeKind::object)
		return order_[n.b];
	return 0;
}

std::string_view JsonDocument::string_value(Value string) const noexcept
{
	const Node &n = nodes_[string];
	if (n.kind != NodeKind::string && n.kind != NodeKind::name)
		return std::string_view();
	return text_of(n);
}

template <typename Sink> void JsonDocument::write(Value v, Sink &out) const
{
	struct Frame {
		size_t next; // arrays: the current element; objects: its position in order_
		size_t end;
		bool object;
	};
	std::vector<Frame> stack;
	Value cur = v;
	for (;;) {
		const Node &n = nodes_[cur];
		switch (n.kind) {
		case NodeKind::null:
			out.put("null", 4);
			break;
		case NodeKind::false_value:
			out.put("false", 5);
			break;
		case NodeKind::true_value:
			out.put("true", 4);
			break;
		case NodeKind::number:
			out.put(text_of(n));
			break;
		case NodeKind::string:
		case NodeKind::name:
			put_string(out, text_of(n));
			break;
		case NodeKind::array:
			if (n.b == 0) {
				out.put("[]", 2);
				break;
			}
			out.put('[');
			stack.push_back(Frame{cur + 1, n.a, false});
			cur = cur + 1;
			continue;
		case NodeKind::object: {
			size_t count = order_[n.b];
			if (count == 0) {
				out.put("{}", 2);
				break;
			}
			out.put('{');
			stack.push_back(Frame{n.b + 1, n.b + 1 + count, true});
			size_t name = order_[n.b + 1];
			put_string(out, text_of(nodes_[name]));
			out.put(':');
			cur = name + 1;
			continue;
		}
		}

		// A value is written; go on with its next sibling, closing
		// containers that have none.
		for (;;) {
			if (stack.empty())
				return;
			Frame &f = stack.back();
			f.next = f.object ? f.next + 1 : next_sibling(f.next);
			if (f.next == f.end) {
				out.put(f.object ? '}' : ']');
				stack.pop_back();
				continue;
			}
			out.put(',');
			if (f.object) {
				size_t name = order_[f.next];
				put_string(out, text_of(nodes_[name]));
				out.put(':');
				cur = name + 1;
			} else {
				cur = f.next;
			}
			break;
		}
	}
}

void JsonDocument::append_canonical(Value v, std::string &out) const
{
	StringSink sink{out};
	write(v, sink);
}

void JsonDocument::hash_canonical(Value v, Sha256 &h) const
{
	HashSink sink(h);
	write(v, sink);
	sink.flush();
}

bool canonical_json(std::string_view json_text, std::string &out, JsonError &err)
{
	JsonDocument doc;
	if (!doc.parse(json_text, err))
		return false;
	doc.append_canonical(doc.root(), out);
	return true;
}

void append_json_string(std::string_view s, std::string &out)
{
	StringSink sink{out};
	put_string(sink, s);
}

int compare_utf16(std::string_view a, std::string_view b) noexcept
{
	size_t n = std::min(a.size(), b.size());
	size_t i = 0;
	while (i < n && a[i] == b[i])
		i++;
	if (i == n)
		return a.size() < b.size() ? -1 : a.size() > b.size() ? 1 : 0;
	// UTF-8 byte order is code point order, and so UTF-16 order, except
	// that code points above U+FFFF (surrogate pairs, D800-DBFF first)
	// come before U+E000-U+FFFF in UTF-16. Compare the first differing
	// code points as UTF-16.
	while (i > 0 && (static_cast<unsigned char>(a[i]) & 0xC0) == 0x80)
		i--;
	uint32_t ca = decode_utf8(a, i), cb = decode_utf8(b, i);
	auto first_unit = [](uint32_t cp) {
		return cp < 0x10000 ? cp : 0xD800 + ((cp - 0x10000) >> 10);
	};
	uint32_t ua = first_unit(ca), ub = first_unit(cb);
	if (ua == ub) {
		// Both above U+FFFF with the same high surrogate: the low
		// surrogates are in code point order.
		ua = ca;
		ub = cb;
	}
	return ua < ub ? -1 : ua > ub ? 1 : 0;
}

bool valid_utf8(std::string_view s) noexcept
{
	const unsigned char *p = reinterpret_cast<const unsigned char *>(s.data());
	size_t i = 0;
	while (i < s.size()) {
		size_t len = utf8_sequence_length(p + i, s.size() - i);
		if (len == 0)
			return false;
		i += len;
	}
	return true;
}

} // namespace idem
