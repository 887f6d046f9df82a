// The claim protocol's state machine, as pure decisions: given what a record
// looks like now, what does idem_begin or idem_fail do to it? The
// PostgreSQL layer (src/pg/claim.cpp) reads the record under a row lock,
// asks these functions, and writes what they say.
//
//                 begin                 complete
//   (absent) ────────────> in_progress ─────────> completed ──(TTL)──> (absent)
//                            │    ^  │
//             fail,retryable │    │  │ lease expired, or holder's session
//                            v    │  │ gone (opt-in): taken over, attempt+1
//                          failed─┘  └──────────────────┐
//                 begin: attempt+1                       │
//   fail, not retryable or attempts used up ──> dead <───┘ attempts used up
//   dead ──(idem_retry)──> failed, with max_attempts more attempts
//
// Attempts only ever grow: an attempt number is the fencing token of one
// holder, and no later holder can ever be given the same one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace idem {

enum class RecordState { absent, in_progress, completed, failed, dead };

struct ClaimView {
	RecordState state;
	int attempts;	       // the latest attempt number (0 when absent)
	int attempt_base;      // attempts used before the last idem_retry
	bool expired;	       // past its TTL (never true while in progress)
	bool lease_expired;    // in progress, and its lease has run out
	bool holder_gone;      // in progress, and its holder's session has ended
	bool fingerprint_differs; // both the record and the call have one, unequal
};

struct ClaimPolicy {
	int max_attempts;
	bool takeover_on_disconnect;
};

enum class ClaimAction {
	claim_new,	    // write a fresh record, attempt 1
	claim_next,	    // take the record over with attempt = attempts + 1
	report_in_progress, // someone else holds a live lease
	report_completed,   // replay the stored result
	report_dead,	    // attempts used up
	mark_dead,	    // would need one more attempt than allowed: record dead
	report_mismatch,    // same key, different payload
};

ClaimAction decide_claim(const ClaimView &record, const ClaimPolicy &policy) noexcept;

// What a failure makes of the record: failed (retry later) or dead.
RecordState decide_failure(int attempts, int attempt_base, int max_attempts,
			   bool retryable) noexcept;

// A payload fingerprint is a hex-encoded SHA-256: 64 lowercase hex digits.
constexpr size_t fingerprint_length = 64;
bool valid_fingerprint(const char *text, size_t len) noexcept;

// The 32 bytes a valid fingerprint encodes; false (and `out` untouched) when
// the text is not a valid fingerprint. On valid ones this is a bijection, so
// two fingerprints are equal as text exactly when their bytes are.
constexpr size_t fingerprint_bytes_length = fingerprint_length / 2;
bool fingerprint_bytes(const char *text, size_t len, uint8_t *out) noexcept;

} // namespace idem
