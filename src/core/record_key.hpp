// The identity of an idempotency record: a scope and a key, and the
// variable-length key id under which the managed table indexes them.
//
// Keys may be up to 1 MB, far above btree's index-row limit (about 2.7 kB),
// but most are short (order ids, UUIDs). So the key id is exact when it can
// be and a digest only when it must:
//
//   short:  0x00 || u8 len(scope) || scope || key       when that fits in 64 bytes
//   long:   0x01 || SHA-256( be32(len(scope)) || scope || key )        (33 bytes)
//
// The tag byte keeps the two forms apart, and the length prefix makes each
// form injective: ("ab", "c") and ("a", "bc") differ. Short ids are the key
// itself, so keys that arrive in order are inserted in index order (no
// random page splits) and need no hashing. Long ids can collide only if
// SHA-256 does; the table also stores scope and key whole, and every lookup
// that finds an id compares them, so a collision raises an error instead of
// ever calling a different message a duplicate.
#pragma once

#include <cstddef>
#include <cstdint>

namespace idem
{

constexpr size_t max_scope_bytes = 128;
constexpr size_t max_key_bytes = 1024 * 1024;
constexpr size_t max_key_id_bytes = 64;

enum class KeyCheck {
	ok,
	empty_scope,
	scope_too_long,
	empty_key,
	key_too_long,
};

// Validates the lengths of a scope and key before anything is written.
KeyCheck check_record_key(size_t scope_len, size_t key_len) noexcept;

// Writes the key id of a checked (scope, key) to `out` and returns its length.
size_t record_key_id(const char *scope, size_t scope_len, const char *key, size_t key_len,
                     uint8_t out[max_key_id_bytes]) noexcept;

// A well-mixed 32-bit hash of a key id, for spreading keys over buckets.
uint32_t key_id_hash(const uint8_t *id, size_t len) noexcept;

} // namespace idem
