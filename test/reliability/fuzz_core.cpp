// libFuzzer target for everything in the C++ core that reads untrusted
// bytes: the canonical JSON parser (and so idem_fingerprint), message keys
// with their field paths (idem_key), the stream window's deserialization and
// steps (idem_advance), and record key ids. Built by test/reliability/run
// with -fsanitize=fuzzer,address,undefined; a crash, a sanitizer report or a
// broken invariant below aborts the run with the input that caused it.
//
// The first input byte picks the target; the rest is its input.
#include "core/canonical_json.hpp"
#include "core/message_key.hpp"
#include "core/record_key.hpp"
#include "core/replay_window.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace
{

void require(bool ok)
{
	if (!ok)
		abort();
}

// Canonicalisation is idempotent, and the fingerprint is the digest of it.
void fuzz_canonical(std::string_view text)
{
	std::string once, twice;
	idem::JsonError err;
	if (!idem::canonical_json(text, once, err)) {
		require(once.empty() && !err.message.empty());
		return;
	}
	idem::JsonError err2;
	require(idem::canonical_json(once, twice, err2));
	require(once == twice);
	std::string a, b;
	require(idem::fingerprint_hex(text, a, err2));
	require(idem::fingerprint_hex(once, b, err2));
	require(a == b && a.size() == idem::digest_hex_length);
}

// Input: field paths separated by '\n', then '\0', then the payload.
void fuzz_key(std::string_view input)
{
	size_t split = input.find('\0');
	if (split == std::string_view::npos)
		return;
	std::string_view paths = input.substr(0, split), payload = input.substr(split + 1);
	std::vector<std::string_view> fields;
	for (size_t start = 0; start <= paths.size();) {
		size_t end = paths.find('\n', start);
		if (end == std::string_view::npos)
			end = paths.size();
		fields.push_back(paths.substr(start, end - start));
		start = end + 1;
	}
	std::string hex;
	idem::KeyError err;
	if (idem::message_key_hex(payload, fields, hex, err)) {
		require(hex.size() == idem::digest_hex_length);
		// The order of the fields does not matter.
		std::vector<std::string_view> reversed(fields.rbegin(), fields.rend());
		std::string again;
		idem::KeyError err2;
		require(idem::message_key_hex(payload, reversed, again, err2) && again == hex);
	} else {
		require(!err.message.empty());
	}
}

// Input: a serialized window, then (position, window) steps of 10 bytes.
void fuzz_window(const uint8_t *data, size_t size)
{
	if (size < 2)
		return;
	size_t state_len = data[0] % (idem::replay_window_max_bytes + 2);
	data++, size--;
	if (state_len > size)
		state_len = size;
	idem::ReplayWindow w;
	if (!w.deserialize(data, state_len))
		return;
	data += state_len, size -= state_len;
	std::vector<int64_t> accepted;
	for (; size >= 10; data += 10, size -= 10) {
		int64_t position;
		memcpy(&position, data, 8);
		position &= INT64_MAX;
		if (data[8] & 1) {
			// Near the window's high end, without overflowing past
			// INT64_MAX (a high end there is a valid state).
			int64_t base = w.high() > 0 ? w.high() : 0;
			int64_t delta = position % 100 - 50;
			position = delta > 0 && base > INT64_MAX - delta ? INT64_MAX : base + delta;
		}
		if (position < 0)
			position = 0;
		int32_t window = int32_t((data[8] >> 1) | (data[9] << 7)) % (idem::replay_window_max + 1);
		bool first = w.advance(position, window);
		// A position just accepted is never accepted again.
		require(!first || !w.advance(position, window));
		uint8_t out[idem::replay_window_max_bytes];
		size_t n = w.serialize(out);
		idem::ReplayWindow copy;
		require(copy.deserialize(out, n) && copy == w);
	}
}

void fuzz_record_key(std::string_view input)
{
	size_t split = input.size() / 2;
	if (idem::check_record_key(split, input.size() - split) != idem::KeyCheck::ok)
		return;
	uint8_t out[idem::max_key_id_bytes];
	size_t n =
	    idem::record_key_id(input.data(), split, input.data() + split, input.size() - split, out);
	require(n > 0 && n <= idem::max_key_id_bytes);
	(void)idem::key_id_hash(out, n);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	std::string_view rest(reinterpret_cast<const char *>(data) + 1, size - 1);
	switch (data[0] % 4) {
	case 0:
		fuzz_canonical(rest);
		break;
	case 1:
		fuzz_key(rest);
		break;
	case 2:
		fuzz_window(data + 1, size - 1);
		break;
	default:
		fuzz_record_key(rest);
	}
	return 0;
}
