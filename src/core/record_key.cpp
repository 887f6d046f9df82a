// See record_key.hpp for the digest's definition and why it is collision-safe.
#include "record_key.hpp"

#include "sha256.hpp"

#include <cstring>

namespace idem {

KeyCheck check_record_key(size_t scope_len, size_t key_len) noexcept
{
	if (scope_len == 0)
		return KeyCheck::empty_scope;
	if (scope_len > max_scope_bytes)
		return KeyCheck::scope_too_long;
	if (key_len == 0)
		return KeyCheck::empty_key;
	if (key_len > max_key_bytes)
		return KeyCheck::key_too_long;
	return KeyCheck::ok;
}

void record_digest(const char *scope, size_t scope_len, const char *key, size_t key_len,
		   uint8_t out[record_digest_size]) noexcept
{
	uint8_t prefix[4] = {uint8_t(scope_len >> 24), uint8_t(scope_len >> 16),
			     uint8_t(scope_len >> 8), uint8_t(scope_len)};
	uint8_t full[Sha256::digest_size];
	Sha256 h;
	h.update(prefix, sizeof prefix);
	h.update(scope, scope_len);
	h.update(key, key_len);
	h.finish(full);
	memcpy(out, full, record_digest_size);
}

} // namespace idem
