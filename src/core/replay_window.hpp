// An anti-replay window over stream positions, the sliding window of IPsec
// (RFC 4303 section 3.4.3): per stream, the highest position accepted so far
// and one bit for each of the `window` positions below it, so that messages
// may arrive out of order within the window and each is accepted once.
//
//   advance(p, W), with high the highest position accepted so far:
//     nothing accepted yet      accept
//     p > high                  accept; high = p, the bits slide down by p - high
//                               (a jump of W or more just clears them)
//     0 < high - p <= W         accept iff p's bit is clear, and set it
//     otherwise                 reject: p == high, or more than W below it
//   W = 0 is a plain high-water mark: accept iff p > high.
//
// Invariant (what makes a message never apply twice): a clear bit means the
// position was never accepted. Positions above high were never accepted.
//
// The window may differ from one call to the next. Shrinking forgets the
// oldest bits. Growing cannot bring them back: the positions it newly
// covers (more than the old W below high) have an unknown history, since any
// of them may have been accepted before they slid out of the window. They
// are therefore treated as seen, their bits set, and rejected; a wrong "new"
// would apply a message twice, a wrong "seen" only drops a message that
// arrived later than the old window allowed. Positions that slide in from
// above after a jump are known to be new, as nothing above high was ever
// accepted.
//
// Storage is O(1) per stream: serialize() writes at most
// replay_window_max_bytes (11 + W/8 rounded up, so 1035 bytes at the maximum
// window), for a bytea column:
//   byte 0       format version, 1
//   bytes 1-8    high, big-endian two's complement; -1 when nothing was accepted
//   bytes 9-10   W, big-endian
//   bytes 11-    ceil(W/8) bytes: bit i-1 (least significant bit first
//                within each byte) is position high - i, for i = 1..W;
//                the unused bits of the last byte are zero
// deserialize() accepts exactly what serialize() can write and nothing else.
//
// advance() checks its own preconditions (position >= 0, 0 <= W <=
// replay_window_max) and throws std::invalid_argument when the caller has
// not; the PostgreSQL layer validates user input before calling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace idem
{

constexpr int32_t replay_window_max = 8192;
constexpr size_t replay_window_max_bytes = 11 + replay_window_max / 8;

class ReplayWindow
{
  public:
	ReplayWindow() noexcept;

	// Whether `position` is new, and if so records it (see above).
	bool advance(int64_t position, int32_t window);

	bool any_accepted() const noexcept { return high_ >= 0; }
	// The highest position accepted, or -1.
	int64_t high() const noexcept { return high_; }
	int32_t window() const noexcept { return window_; }

	size_t serialized_size() const noexcept;
	// Writes serialized_size() bytes to out and returns that size.
	size_t serialize(uint8_t *out) const noexcept;
	std::string serialize() const;
	// Replaces this state with the serialized one. Returns false, leaving
	// this state unchanged, when the bytes are not a valid serialization.
	bool deserialize(const uint8_t *data, size_t len) noexcept;
	bool deserialize(std::string_view bytes) noexcept
	{
		return deserialize(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
	}

	bool operator==(const ReplayWindow &other) const noexcept;
	bool operator!=(const ReplayWindow &other) const noexcept { return !(*this == other); }

  private:
	static constexpr int words = replay_window_max / 64;

	void resize(int32_t window) noexcept;
	void slide(int64_t distance) noexcept;
	bool bit(int64_t i) const noexcept;
	void set_bit(int64_t i) noexcept;
	void clear_above_window() noexcept;

	int64_t high_;
	int32_t window_;
	// Bit i-1 is position high_ - i, for i = 1..window_; bits beyond
	// window_ are always zero.
	uint64_t bits_[words];
};

} // namespace idem
