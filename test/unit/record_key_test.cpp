#include "core/record_key.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace {

std::string digest(const std::string &scope, const std::string &key)
{
	uint8_t out[idem::record_digest_size];
	idem::record_digest(scope.data(), scope.size(), key.data(), key.size(), out);
	return std::string(reinterpret_cast<char *>(out), sizeof out);
}

TEST(RecordKey, DigestIsStable)
{
	// Pinned: changing the digest would orphan every record already stored.
	std::string d = digest("points", "order-1");
	static const char digits[] = "0123456789abcdef";
	std::string hex;
	for (unsigned char b : d) {
		hex += digits[b >> 4];
		hex += digits[b & 15];
	}
	// SHA-256 of 00 00 00 06 'points' 'order-1', first 16 bytes.
	EXPECT_EQ(hex, "1c7bbf1bc73b1f91e8f371fe76bd92c0");
}

TEST(RecordKey, ScopeAndKeyBoundaryIsUnambiguous)
{
	EXPECT_NE(digest("ab", "c"), digest("a", "bc"));
	EXPECT_NE(digest("points", "1"), digest("points1", ""));
}

TEST(RecordKey, DifferentScopesDifferentDigests)
{
	EXPECT_NE(digest("points", "order-1"), digest("emails", "order-1"));
	EXPECT_EQ(digest("points", "order-1"), digest("points", "order-1"));
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
