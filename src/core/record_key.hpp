// The identity of an idempotency record: a scope and a key, and the fixed-size
// digest under which the managed table indexes them.
//
// Keys may be up to 1 MB, far above btree's index-row limit (about 2.7 kB), so
// the unique index holds a 16-byte digest instead of the key:
//
//   digest = first 16 bytes of SHA-256( be32(len(scope)) || scope || key )
//
// The length prefix makes the encoding injective: ("ab", "c") and ("a", "bc")
// hash different inputs. The table also stores scope and key in full, and every
// lookup that finds a digest compares them; a mismatch (a SHA-256 prefix
// collision, about 2^-64 likely among 2^32 live keys) raises an error instead
// of ever calling a different message a duplicate.
#pragma once

#include <cstddef>
#include <cstdint>

namespace idem {

constexpr size_t record_digest_size = 16;
constexpr size_t max_scope_bytes = 128;
constexpr size_t max_key_bytes = 1024 * 1024;

enum class KeyCheck {
	ok,
	empty_scope,
	scope_too_long,
	empty_key,
	key_too_long,
};

// Validates the lengths of a scope and key before anything is written.
KeyCheck check_record_key(size_t scope_len, size_t key_len) noexcept;

void record_digest(const char *scope, size_t scope_len, const char *key, size_t key_len,
		   uint8_t out[record_digest_size]) noexcept;

} // namespace idem
