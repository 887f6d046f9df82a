#include "core/sha256.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace
{

std::string hex_sha256(const std::string &input, size_t chunk = 0)
{
	idem::Sha256 h;
	if (chunk == 0) {
		h.update(input.data(), input.size());
	} else {
		for (size_t i = 0; i < input.size(); i += chunk)
			h.update(input.data() + i, std::min(chunk, input.size() - i));
	}
	uint8_t out[idem::Sha256::digest_size];
	h.finish(out);
	static const char digits[] = "0123456789abcdef";
	std::string hex;
	for (uint8_t b : out) {
		hex += digits[b >> 4];
		hex += digits[b & 15];
	}
	return hex;
}

TEST(Sha256, NistShortVectors)
{
	EXPECT_EQ(hex_sha256(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	EXPECT_EQ(hex_sha256("abc"),
	          "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	EXPECT_EQ(hex_sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
	          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, MillionAs)
{
	EXPECT_EQ(hex_sha256(std::string(1000000, 'a')),
	          "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, ChunkingDoesNotChangeTheDigest)
{
	std::string input;
	for (int i = 0; i < 1000; i++)
		input += char('a' + i % 26);
	std::string whole = hex_sha256(input);
	for (size_t chunk : {1, 3, 55, 56, 63, 64, 65, 127, 999})
		EXPECT_EQ(hex_sha256(input, chunk), whole) << "chunk " << chunk;
}

TEST(Sha256, PaddingBoundaries)
{
	// Lengths around the 56-byte padding boundary take the two-block path.
	EXPECT_EQ(hex_sha256(std::string(55, 'a')),
	          "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
	EXPECT_EQ(hex_sha256(std::string(56, 'a')),
	          "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
	EXPECT_EQ(hex_sha256(std::string(64, 'a')),
	          "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

} // namespace
