// The unit tests' reference digests: SHA-256 in lower-case hex.
#pragma once

#include "core/sha256.hpp"

#include <cstdint>
#include <string>
#include <string_view>

// Finishes `h` and returns its digest in hex.
inline std::string hex_digest(idem::Sha256 &h)
{
	uint8_t d[idem::Sha256::digest_size];
	h.finish(d);
	static const char digits[] = "0123456789abcdef";
	std::string hex;
	for (uint8_t b : d) {
		hex += digits[b >> 4];
		hex += digits[b & 15];
	}
	return hex;
}

inline std::string sha256_hex(std::string_view s)
{
	idem::Sha256 h;
	h.update(s.data(), s.size());
	return hex_digest(h);
}
