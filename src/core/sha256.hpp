// SHA-256 (FIPS 180-4), streaming. Part of the pure C++ core: no PostgreSQL
// headers, no allocation, no exceptions, so it is safe to call from any
// backend frame.
#pragma once

#include <cstddef>
#include <cstdint>

namespace idem
{

class Sha256
{
  public:
	static constexpr size_t digest_size = 32;

	Sha256() noexcept;
	void update(const void *data, size_t len) noexcept;
	// Writes the 32-byte digest. The object must not be updated afterwards.
	void finish(uint8_t out[digest_size]) noexcept;

  private:
	void compress(const uint8_t block[64]) noexcept;

	uint32_t state_[8];
	uint64_t total_len_;
	uint8_t buffer_[64];
	size_t buffered_;
};

} // namespace idem
