// See record_key.hpp for the key id's definition and why it is collision-safe.
#include "record_key.hpp"

#include "sha256.hpp"

#include <cstring>

namespace idem
{

namespace
{
constexpr uint8_t short_form = 0x00;
constexpr uint8_t long_form = 0x01;
} // namespace

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

size_t record_key_id(const char *scope, size_t scope_len, const char *key, size_t key_len,
                     uint8_t out[max_key_id_bytes]) noexcept
{
	if (2 + scope_len + key_len <= max_key_id_bytes) {
		out[0] = short_form;
		out[1] = uint8_t(scope_len);
		memcpy(out + 2, scope, scope_len);
		memcpy(out + 2 + scope_len, key, key_len);
		return 2 + scope_len + key_len;
	}
	uint8_t prefix[4] = {uint8_t(scope_len >> 24), uint8_t(scope_len >> 16),
	                     uint8_t(scope_len >> 8), uint8_t(scope_len)};
	Sha256 h;
	h.update(prefix, sizeof prefix);
	h.update(scope, scope_len);
	h.update(key, key_len);
	out[0] = long_form;
	h.finish(out + 1);
	return 1 + Sha256::digest_size;
}

uint32_t key_id_hash(const uint8_t *id, size_t len) noexcept
{
	// FNV-1a, then murmur3's finalizer so that nearby keys land in distant
	// buckets.
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < len; i++)
		h = (h ^ id[i]) * 16777619u;
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

} // namespace idem
