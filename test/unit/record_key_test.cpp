#include "core/record_key.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace
{

std::string id(const std::string &scope, const std::string &key)
{
	uint8_t out[idem::max_key_id_bytes];
	size_t n = idem::record_key_id(scope.data(), scope.size(), key.data(), key.size(), out);
	return std::string(reinterpret_cast<char *>(out), n);
}

std::string hex(const std::string &bytes)
{
	static const char digits[] = "0123456789abcdef";
	std::string h;
	for (unsigned char b : bytes) {
		h += digits[b >> 4];
		h += digits[b & 15];
	}
	return h;
}

TEST(RecordKey, ShortKeysAreStoredExactly)
{
	EXPECT_EQ(id("points", "order-1"), std::string("\x00\x06", 2) + "points" + "order-1");
	// Keys that arrive in order keep their order in the index.
	EXPECT_LT(id("points", "1000001"), id("points", "1000002"));
}

TEST(RecordKey, LongKeysAreDigestsAndPinned)
{
	std::string key(100, 'k');
	std::string long_id = id("points", key);
	ASSERT_EQ(long_id.size(), 33u);
	EXPECT_EQ(long_id[0], '\x01');
	// Pinned: SHA-256 of 00 00 00 06 'points' 'k' x 100. Changing it would
	// orphan every record already stored.
	EXPECT_EQ(hex(long_id.substr(1)),
	          "3e6bac3d5630ed76ab9788c93c72d2b6a6b2baf5bf7809fa491518a05212ea5c");
}

TEST(RecordKey, FormBoundary)
{
	// 2 + 6 + 56 = 64 bytes: still exact. One byte more: a digest.
	EXPECT_EQ(id("points", std::string(56, 'x')).size(), 64u);
	EXPECT_EQ(id("points", std::string(57, 'x')).size(), 33u);
}

TEST(RecordKey, ScopeAndKeyBoundaryIsUnambiguous)
{
	EXPECT_NE(id("ab", "c"), id("a", "bc"));
	EXPECT_NE(id("points", "1"), id("points1", "1"));
	std::string long_key(80, 'q');
	EXPECT_NE(id("ab", "c" + long_key), id("a", "bc" + long_key));
}

TEST(RecordKey, ShortAndLongFormsNeverMeet)
{
	std::set<std::string> ids;
	for (size_t n = 1; n <= 120; n++)
		EXPECT_TRUE(ids.insert(id("s", std::string(n, 'a'))).second) << n;
}

TEST(RecordKey, HashSpreadsNeighbours)
{
	std::set<uint32_t> buckets;
	for (int i = 0; i < 1000; i++) {
		std::string s = id("points", std::to_string(1000000 + i));
		buckets.insert(idem::key_id_hash(reinterpret_cast<const uint8_t *>(s.data()), s.size()) %
		               128);
	}
	EXPECT_GE(buckets.size(), 120u);
}

TEST(RecordKey, LengthChecks)
{
	using idem::KeyCheck;
	EXPECT_EQ(idem::check_record_key(1, 1), KeyCheck::ok);
	EXPECT_EQ(idem::check_record_key(0, 1), KeyCheck::empty_scope);
	EXPECT_EQ(idem::check_record_key(idem::max_scope_bytes, 1), KeyCheck::ok);
	EXPECT_EQ(idem::check_record_key(idem::max_scope_bytes + 1, 1), KeyCheck::scope_too_long);
	EXPECT_EQ(idem::check_record_key(1, 0), KeyCheck::empty_key);
	EXPECT_EQ(idem::check_record_key(1, idem::max_key_bytes), KeyCheck::ok);
	EXPECT_EQ(idem::check_record_key(1, idem::max_key_bytes + 1), KeyCheck::key_too_long);
}

} // namespace
