// The claim protocol's state machine, as pure decisions: given what a record
// looks like now, what does idem_begin or idem_fail do to it? The
// PostgreSQL layer (src/pg/claims/claim.cpp) reads the record under a row lock,
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
//   in_progress ──(release)──> failed, the released attempt not counted
//
// A record binds the fingerprint of the payload it was claimed with while
// it is in progress, completed or dead; a failed (or released) one does
// not, so that a retry may bring a corrected payload.
//
// Attempts only ever grow: an attempt number is the fencing token of one
// holder, and no later holder can ever be given the same one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace idem
{

enum class RecordState { absent, in_progress, completed, failed, dead };

struct ClaimView {
	RecordState state;
	int attempts;             // the latest attempt number (0 when absent)
	int attempt_base;         // attempts used before the last idem_retry
	bool expired;             // past its TTL (never true while in progress)
	bool lease_expired;       // in progress, and its lease has run out
	bool holder_gone;         // in progress, and its holder's session has ended
	bool fingerprint_differs; // both the record and the call have one, unequal
	                          // (never for a failed record: it binds none)
};

struct ClaimPolicy {
	int max_attempts;
	bool takeover_on_disconnect;
};

enum class ClaimAction {
	claim_new,          // write a fresh record, attempt 1
	claim_next,         // take the record over with attempt = attempts + 1
	report_in_progress, // someone else holds a live lease
	report_completed,   // replay the stored result
	report_dead,        // attempts used up
	mark_dead,          // would need one more attempt than allowed: record dead
	report_mismatch,    // same key, different payload
};

ClaimAction decide_claim(const ClaimView &record, const ClaimPolicy &policy) noexcept;

// What a failure makes of the record: failed (retry later) or dead.
RecordState decide_failure(int attempts, int attempt_base, int max_attempts,
                           bool retryable) noexcept;

// A payload fingerprint is opaque text, compared for equality: the
// canonical SHA-256 of idem_fingerprint, or a client library's own payload
// hash. It must be non-empty and at most this many bytes.
constexpr size_t max_fingerprint_bytes = 1024;
enum class FingerprintCheck { ok, empty, too_long };
FingerprintCheck check_fingerprint(size_t len) noexcept;

// The SHA-256 of a fingerprint's bytes: what the duplicate cache keeps of
// it, in a fixed size. Two fingerprints are equal as text exactly when
// their digests are (barring a SHA-256 collision).
constexpr size_t fingerprint_digest_length = 32;
void fingerprint_digest(const char *text, size_t len,
                        uint8_t out[fingerprint_digest_length]) noexcept;

} // namespace idem
