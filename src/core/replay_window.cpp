// See replay_window.hpp for the rules, the handling of window changes and
// the serialized format.
#include "replay_window.hpp"

#include <cstring>
#include <stdexcept>

namespace idem
{

namespace
{

constexpr uint8_t format_version = 1;
constexpr size_t header_bytes = 11;

size_t bitmap_bytes(int32_t window)
{
	return (size_t(window) + 7) / 8;
}

} // namespace

ReplayWindow::ReplayWindow() noexcept : high_(-1), window_(0), bits_{} {}

bool ReplayWindow::bit(int64_t i) const noexcept
{
	return (bits_[i / 64] >> (i % 64)) & 1;
}

void ReplayWindow::set_bit(int64_t i) noexcept
{
	bits_[i / 64] |= uint64_t(1) << (i % 64);
}

void ReplayWindow::clear_above_window() noexcept
{
	int w = window_ / 64;
	if (w < words && window_ % 64 != 0)
		bits_[w++] &= (uint64_t(1) << (window_ % 64)) - 1;
	for (; w < words; w++)
		bits_[w] = 0;
}

void ReplayWindow::resize(int32_t window) noexcept
{
	if (window < window_) {
		window_ = window;
		clear_above_window();
		return;
	}
	if (window > window_ && high_ >= 0) {
		// Positions the window covers now but did not before may have
		// been accepted before they slid out: count them as seen. There
		// are no positions below 0, so bits for those stay clear.
		int64_t last = window;
		if (last > high_)
			last = high_;
		for (int64_t i = window_; i < last; i++)
			set_bit(i);
	}
	window_ = window;
}

void ReplayWindow::slide(int64_t distance) noexcept
{
	if (distance >= window_) {
		memset(bits_, 0, sizeof bits_);
	} else {
		// Shift the words in use toward older positions; the others are
		// zero and stay so.
		int q = int(distance / 64), r = int(distance % 64);
		for (int w = (window_ + 63) / 64 - 1; w >= 0; w--) {
			uint64_t v = 0;
			if (w - q >= 0) {
				v = bits_[w - q] << r;
				if (r != 0 && w - q - 1 >= 0)
					v |= bits_[w - q - 1] >> (64 - r);
			}
			bits_[w] = v;
		}
	}
	// The old high is now `distance` below the new one.
	if (distance <= window_)
		set_bit(distance - 1);
	clear_above_window();
}

bool ReplayWindow::advance(int64_t position, int32_t window)
{
	if (position < 0)
		throw std::invalid_argument("stream position must not be negative");
	if (window < 0 || window > replay_window_max)
		throw std::invalid_argument("replay window must be between 0 and " +
		                            std::to_string(replay_window_max));
	resize(window);
	if (high_ < 0) {
		high_ = position;
		return true;
	}
	if (position > high_) {
		slide(position - high_);
		high_ = position;
		return true;
	}
	int64_t below = high_ - position;
	if (below == 0 || below > window_ || bit(below - 1))
		return false;
	set_bit(below - 1);
	return true;
}

size_t ReplayWindow::serialized_size() const noexcept
{
	return header_bytes + bitmap_bytes(window_);
}

size_t ReplayWindow::serialize(uint8_t *out) const noexcept
{
	out[0] = format_version;
	uint64_t h = uint64_t(high_);
	for (int i = 0; i < 8; i++)
		out[1 + i] = uint8_t(h >> (56 - 8 * i));
	out[9] = uint8_t(uint32_t(window_) >> 8);
	out[10] = uint8_t(window_);
	size_t n = bitmap_bytes(window_);
	for (size_t i = 0; i < n; i++)
		out[header_bytes + i] = uint8_t(bits_[i / 8] >> (8 * (i % 8)));
	return header_bytes + n;
}

std::string ReplayWindow::serialize() const
{
	uint8_t buf[replay_window_max_bytes];
	size_t n = serialize(buf);
	return std::string(reinterpret_cast<const char *>(buf), n);
}

bool ReplayWindow::deserialize(const uint8_t *data, size_t len) noexcept
{
	if (len < header_bytes || data[0] != format_version)
		return false;
	uint64_t h = 0;
	for (int i = 0; i < 8; i++)
		h = h << 8 | data[1 + i];
	int64_t high = int64_t(h);
	int32_t window = int32_t(data[9]) << 8 | data[10];
	if (high < -1 || window > replay_window_max || len != header_bytes + bitmap_bytes(window))
		return false;

	ReplayWindow s;
	s.high_ = high;
	s.window_ = window;
	for (size_t i = 0; i < bitmap_bytes(window); i++)
		s.bits_[i / 8] |= uint64_t(data[header_bytes + i]) << (8 * (i % 8));
	// Only what serialize() can write: no bits beyond the window, and none
	// for positions below 0 (which covers "nothing accepted yet"). Bit j is
	// position high - 1 - j, so only bits j < high can be set.
	ReplayWindow trimmed = s;
	trimmed.window_ = high < window ? int32_t(high > 0 ? high : 0) : window;
	trimmed.clear_above_window();
	trimmed.window_ = window;
	if (trimmed != s)
		return false;
	*this = s;
	return true;
}

bool ReplayWindow::operator==(const ReplayWindow &other) const noexcept
{
	return high_ == other.high_ && window_ == other.window_ &&
	       memcmp(bits_, other.bits_, sizeof bits_) == 0;
}

} // namespace idem
