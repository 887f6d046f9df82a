#include "core/replay_window.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace idem
{
// For readable failures instead of a dump of the object's bytes.
void PrintTo(const ReplayWindow &w, std::ostream *os)
{
	*os << "{high " << w.high() << ", window " << w.window() << ", bytes";
	for (unsigned char c : w.serialize())
		*os << ' ' << int(c);
	*os << '}';
}
} // namespace idem

namespace
{

using idem::ReplayWindow;

// The rules of replay_window.hpp written naively: every accepted position in
// a set, and `known_from`, the lowest position whose history the window
// still knows. A window of W at high h remembers positions down to h - W;
// anything lower it has forgotten for good, and a forgotten position counts
// as seen if a larger window covers it again.
struct Model {
	int64_t high = -1;
	int64_t known_from = std::numeric_limits<int64_t>::min();
	std::set<int64_t> accepted;

	bool advance(int64_t p, int32_t w)
	{
		bool ok;
		if (high < 0 || p > high)
			ok = true;
		else
			ok = p != high && high - p <= w && p >= known_from && accepted.count(p) == 0;
		if (ok) {
			accepted.insert(p);
			high = std::max(high, p);
		}
		if (high >= 0)
			known_from = std::max(known_from, high - w);
		return ok;
	}
};

const int32_t windows[] = {0, 1, 2, 3, 7, 8, 9, 63, 64, 65, 127, 128, 129, 1000, 8191, 8192};

int32_t random_window(std::mt19937_64 &rng)
{
	return windows[rng() % (sizeof windows / sizeof windows[0])];
}

ReplayWindow round_trip(const ReplayWindow &w)
{
	std::string bytes = w.serialize();
	EXPECT_EQ(bytes.size(), w.serialized_size());
	EXPECT_LE(bytes.size(), idem::replay_window_max_bytes);
	ReplayWindow back;
	EXPECT_TRUE(back.deserialize(bytes));
	return back;
}

TEST(ReplayWindow, InOrderAndDuplicates)
{
	ReplayWindow w;
	EXPECT_FALSE(w.any_accepted());
	EXPECT_EQ(w.high(), -1);
	for (int64_t p = 0; p < 200; p++) {
		EXPECT_TRUE(w.advance(p, 64)) << p;
		EXPECT_FALSE(w.advance(p, 64)) << p;
	}
	EXPECT_EQ(w.high(), 199);
	EXPECT_FALSE(w.advance(150, 64));
	EXPECT_FALSE(w.advance(100, 64)); // too old, and seen
}

TEST(ReplayWindow, OutOfOrderWithinTheWindow)
{
	ReplayWindow w;
	EXPECT_TRUE(w.advance(10, 4));
	EXPECT_TRUE(w.advance(8, 4));
	EXPECT_FALSE(w.advance(8, 4));
	EXPECT_TRUE(w.advance(6, 4));  // 4 below: the edge of the window
	EXPECT_FALSE(w.advance(5, 4)); // 5 below: too old
	EXPECT_TRUE(w.advance(9, 4));
	EXPECT_TRUE(w.advance(7, 4));
	EXPECT_FALSE(w.advance(10, 4));
	// A jump within the window keeps what is still covered.
	EXPECT_TRUE(w.advance(12, 4));
	EXPECT_TRUE(w.advance(11, 4));
	EXPECT_FALSE(w.advance(10, 4));
	EXPECT_FALSE(w.advance(9, 4));
	EXPECT_FALSE(w.advance(8, 4));
	EXPECT_FALSE(w.advance(7, 4)); // now 5 below
}

TEST(ReplayWindow, FirstPositionLeavesRoomBelow)
{
	// Nothing was seen before the first position, so earlier ones within
	// the window are new.
	ReplayWindow w;
	EXPECT_TRUE(w.advance(100, 10));
	EXPECT_TRUE(w.advance(95, 10));
	EXPECT_TRUE(w.advance(90, 10));
	EXPECT_FALSE(w.advance(89, 10));
}

TEST(ReplayWindow, ZeroIsAHighWaterMark)
{
	ReplayWindow w;
	EXPECT_TRUE(w.advance(5, 0));
	EXPECT_FALSE(w.advance(5, 0));
	EXPECT_FALSE(w.advance(4, 0));
	EXPECT_TRUE(w.advance(6, 0));
	EXPECT_TRUE(w.advance(100, 0));
	EXPECT_FALSE(w.advance(99, 0));
	EXPECT_EQ(w.serialized_size(), 11u);
}

TEST(ReplayWindow, BigJumps)
{
	const int64_t top = std::numeric_limits<int64_t>::max();
	ReplayWindow w;
	EXPECT_TRUE(w.advance(0, 8192));
	EXPECT_TRUE(w.advance(8192, 8192)); // 0 is now exactly W below
	EXPECT_FALSE(w.advance(0, 8192));
	EXPECT_TRUE(w.advance(1, 8192));
	EXPECT_TRUE(w.advance(top - 1, 8192));
	EXPECT_FALSE(w.advance(top - 8194, 8192)); // W + 1 below
	EXPECT_TRUE(w.advance(top - 8193, 8192));  // W below
	EXPECT_TRUE(w.advance(top - 8192, 8192));
	EXPECT_TRUE(w.advance(top, 8192));
	EXPECT_FALSE(w.advance(top - 1, 8192));
	EXPECT_FALSE(w.advance(top, 8192));
	EXPECT_TRUE(w.advance(top - 2, 8192));
	EXPECT_EQ(round_trip(w), w);
}

TEST(ReplayWindow, ShrinkingForgetsAndGrowingDoesNotGuess)
{
	ReplayWindow w;
	EXPECT_TRUE(w.advance(100, 10));
	EXPECT_TRUE(w.advance(95, 10));
	// Shrink to 3: 95..90 fall out of the window.
	EXPECT_FALSE(w.advance(96, 3)); // too old now
	EXPECT_TRUE(w.advance(98, 3));
	// Grow back to 10: 96..90 were forgotten; 95 was accepted, and which
	// others were is unknown, so all of them count as seen.
	for (int64_t p = 90; p <= 96; p++)
		EXPECT_FALSE(w.advance(p, 10)) << p;
	// 97 and 99 stayed inside the smaller window: known and new.
	EXPECT_TRUE(w.advance(97, 10));
	EXPECT_TRUE(w.advance(99, 10));
	// New positions above high are always known.
	EXPECT_TRUE(w.advance(105, 10));
	EXPECT_TRUE(w.advance(101, 10));
	EXPECT_FALSE(w.advance(96, 10));
}

TEST(ReplayWindow, GrowingFromAHighWaterMark)
{
	ReplayWindow w;
	EXPECT_TRUE(w.advance(50, 0));
	EXPECT_TRUE(w.advance(60, 0));
	// Positions below 60 were decided by the mark alone: 51..59 were
	// rejected, but a window cannot tell, so they stay rejected.
	EXPECT_FALSE(w.advance(55, 64));
	EXPECT_TRUE(w.advance(70, 64));
	EXPECT_TRUE(w.advance(65, 64)); // above the old high: known to be new
	EXPECT_FALSE(w.advance(60, 64));
	EXPECT_FALSE(w.advance(59, 64));
}

TEST(ReplayWindow, WindowChangeBeforeAnythingIsSeen)
{
	ReplayWindow w;
	EXPECT_FALSE(w.any_accepted());
	EXPECT_TRUE(w.advance(3, 64));
	EXPECT_TRUE(w.advance(0, 8192));
	EXPECT_TRUE(w.advance(1, 8192));
	EXPECT_FALSE(w.advance(0, 8192));
}

TEST(ReplayWindow, Preconditions)
{
	ReplayWindow w;
	EXPECT_THROW(w.advance(-1, 10), std::invalid_argument);
	EXPECT_THROW(w.advance(1, -1), std::invalid_argument);
	EXPECT_THROW(w.advance(1, idem::replay_window_max + 1), std::invalid_argument);
	EXPECT_FALSE(w.any_accepted());
	try {
		w.advance(1, 10000);
	} catch (const std::invalid_argument &e) {
		EXPECT_STREQ(e.what(), "replay window must be between 0 and 8192");
	}
	try {
		w.advance(-5, 10);
	} catch (const std::invalid_argument &e) {
		EXPECT_STREQ(e.what(), "stream position must not be negative");
	}
}

// Checks the window against the model on one sequence; `next` chooses each
// position and window from the current model state.
template <typename Next> void check_sequence(std::mt19937_64 &rng, int steps, Next next)
{
	ReplayWindow w;
	Model m;
	int32_t window = random_window(rng);
	for (int i = 0; i < steps; i++) {
		int64_t p;
		next(rng, m, p, window);
		bool seen_before = m.accepted.count(p) != 0;
		bool expected = m.advance(p, window);
		bool got = w.advance(p, window);
		ASSERT_EQ(got, expected) << "step " << i << " position " << p << " window " << window
		                         << " high " << w.high();
		ASSERT_FALSE(got && seen_before) << "accepted " << p << " twice";
		ASSERT_EQ(w.high(), m.high);
		ASSERT_EQ(w.window(), window);
		if (i % 16 == 0) {
			ASSERT_EQ(round_trip(w), w);
		}
	}
}

void random_step(std::mt19937_64 &rng, const Model &m, int64_t &p, int32_t &window)
{
	if (rng() % 20 == 0)
		window = random_window(rng);
	int64_t high = std::max<int64_t>(m.high, 0);
	int64_t w = window;
	switch (rng() % 10) {
	case 0:
	case 1:
	case 2: // just above, in order
		p = high + 1 + int64_t(rng() % 3);
		break;
	case 3: { // a jump around the window's size, or far
		const int64_t jumps[] = {
		    w - 1, w, w + 1, 63, 64, 65, int64_t(rng() % (3 * w + 10)), int64_t(rng() % 1000000)};
		p = high + std::max<int64_t>(1, jumps[rng() % 8]);
		break;
	}
	case 4:
	case 5:
	case 6:
	case 7: // below, inside the window or just outside it
		p = std::max<int64_t>(0, high - int64_t(rng() % uint64_t(w + 4)));
		break;
	case 8: // a duplicate
		if (!m.accepted.empty()) {
			auto it = m.accepted.end();
			std::advance(it, -1 - int64_t(rng() % std::min<size_t>(m.accepted.size(), 50)));
			p = *it;
			break;
		}
		p = high;
		break;
	default: // anywhere at or below high
		p = int64_t(rng() % uint64_t(high + 1));
	}
}

TEST(ReplayWindow, MatchesTheModelOnRandomSequences)
{
	std::mt19937_64 rng(4303);
	for (int seq = 0; seq < 400; seq++)
		check_sequence(rng, 500, random_step);
}

TEST(ReplayWindow, MatchesTheModelWithAFixedWindow)
{
	std::mt19937_64 rng(3434);
	for (int32_t window : windows) {
		for (int seq = 0; seq < 20; seq++) {
			ReplayWindow w;
			Model m;
			for (int i = 0; i < 2000; i++) {
				int64_t high = std::max<int64_t>(m.high, 0);
				int64_t p =
				    rng() % 3 == 0
				        ? high + int64_t(rng() % 5)
				        : std::max<int64_t>(0, high - int64_t(rng() % uint64_t(window + 3)));
				ASSERT_EQ(w.advance(p, window), m.advance(p, window))
				    << "window " << window << " position " << p;
			}
		}
	}
}

TEST(ReplayWindow, ShuffledStreamIsAcceptedOnceEach)
{
	// Every position of a stream, each delivered twice, shuffled within a
	// distance smaller than the window: each is accepted exactly once.
	std::mt19937_64 rng(7);
	for (int32_t window : {8, 64, 65, 1000, 8192}) {
		std::vector<int64_t> stream;
		for (int64_t p = 0; p < 20000; p++) {
			stream.push_back(p);
			stream.push_back(p);
		}
		size_t span = size_t(window / 2);
		for (size_t i = 0; i + span < stream.size(); i += span)
			std::shuffle(stream.begin() + i, stream.begin() + i + span, rng);
		ReplayWindow w;
		size_t accepted = 0;
		for (int64_t p : stream)
			accepted += w.advance(p, window);
		EXPECT_EQ(accepted, 20000u) << "window " << window;
	}
}

TEST(ReplayWindow, ExhaustiveSmallSequences)
{
	// Every sequence of four (position, window) pairs over positions 0..6
	// and windows 0..3.
	struct Step {
		ReplayWindow w;
		Model m;
	};
	std::vector<Step> stack(5);
	size_t checked = 0;
	auto recurse = [&](auto &self, size_t depth) -> void {
		if (depth == 4)
			return;
		for (int64_t p = 0; p <= 6; p++) {
			for (int32_t window = 0; window <= 3; window++) {
				stack[depth + 1] = stack[depth];
				Step &s = stack[depth + 1];
				bool expected = s.m.advance(p, window);
				ASSERT_EQ(s.w.advance(p, window), expected);
				ASSERT_EQ(round_trip(s.w), s.w);
				checked++;
				self(self, depth + 1);
			}
		}
	};
	recurse(recurse, 0);
	EXPECT_EQ(checked, 28u + 28u * 28 + 28u * 28 * 28 + 28u * 28 * 28 * 28);
}

TEST(ReplayWindow, SerializedLayout)
{
	ReplayWindow w;
	EXPECT_EQ(w.serialize(), std::string("\x01\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00", 11));
	w.advance(0x0102, 12);
	w.advance(0x0102 - 1, 12);
	w.advance(0x0102 - 9, 12);
	// high 258, window 12, bits 0 (position 257) and 8 (position 249).
	EXPECT_EQ(w.serialize(),
	          std::string("\x01\x00\x00\x00\x00\x00\x00\x01\x02\x00\x0c\x01\x01", 13));
	ReplayWindow big;
	big.advance(1, idem::replay_window_max);
	EXPECT_EQ(big.serialized_size(), idem::replay_window_max_bytes);
	EXPECT_EQ(idem::replay_window_max_bytes, 1035u);
}

TEST(ReplayWindow, RejectsCorruptBytes)
{
	ReplayWindow w;
	w.advance(100, 12);
	w.advance(99, 12);
	const std::string good = w.serialize();
	ReplayWindow target;
	target.advance(7, 3);
	const ReplayWindow before = target;

	auto rejected = [&](const std::string &bytes) {
		bool ok = target.deserialize(bytes);
		EXPECT_EQ(target, before) << "a rejected state must not change the target";
		return !ok;
	};
	EXPECT_TRUE(rejected(""));
	EXPECT_TRUE(rejected(good.substr(0, 10)));
	EXPECT_TRUE(rejected(good.substr(0, good.size() - 1))); // bitmap too short
	EXPECT_TRUE(rejected(good + '\0'));                     // too long
	std::string bad = good;
	bad[0] = 2; // unknown version
	EXPECT_TRUE(rejected(bad));
	bad = good;
	bad[1] = '\x80'; // a high below -1
	EXPECT_TRUE(rejected(bad));
	bad = good;
	bad[9] = '\x20'; // window 8192 + 12
	bad[10] = '\x0c';
	EXPECT_TRUE(rejected(bad));
	bad = good;
	bad[12] = '\x10'; // bit 12: beyond a window of 12
	EXPECT_TRUE(rejected(bad));
	// Nothing accepted, yet bits set.
	EXPECT_TRUE(rejected(std::string("\x01\xff\xff\xff\xff\xff\xff\xff\xff\x00\x08\x01", 12)));
	// High 2: only positions 1 and 0 exist below it (bits 0 and 1).
	EXPECT_TRUE(rejected(std::string("\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x08\x04", 12)));
	ReplayWindow low;
	EXPECT_TRUE(
	    low.deserialize(std::string("\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x08\x03", 12)));
	EXPECT_FALSE(low.advance(1, 8));
	EXPECT_FALSE(low.advance(0, 8));
	// And the good bytes are accepted.
	EXPECT_TRUE(target.deserialize(good));
	EXPECT_EQ(target, w);
}

TEST(ReplayWindow, RandomBytesNeverCrashAndRoundTripWhenAccepted)
{
	std::mt19937_64 rng(99);
	size_t accepted = 0;
	for (int i = 0; i < 100000; i++) {
		int32_t window = int32_t(rng() % 40);
		std::string bytes(11 + (size_t(window) + 7) / 8 + (rng() % 8 == 0 ? rng() % 3 : 0), '\0');
		for (char &c : bytes)
			c = char(rng() % 4 == 0 ? rng() : 0);
		bytes[0] = rng() % 8 ? 1 : char(rng());
		bytes[9] = 0;
		bytes[10] = char(window);
		if (rng() % 2) { // a small high, so that the bits for positions below 0 matter
			memset(&bytes[1], 0, 7);
			bytes[8] = char(rng() % 64);
		}
		ReplayWindow w;
		if (w.deserialize(bytes)) {
			accepted++;
			EXPECT_EQ(w.serialize(), bytes);
		}
	}
	EXPECT_GT(accepted, 1000u);
}

} // namespace
