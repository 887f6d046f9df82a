// See claim_rules.hpp for the state diagram.
#include "claim_rules.hpp"
#include "sha256.hpp"

namespace idem
{

namespace
{

bool attempts_left(const ClaimView &record, const ClaimPolicy &policy)
{
	return record.attempts - record.attempt_base < policy.max_attempts;
}

ClaimAction next_attempt(const ClaimView &record, const ClaimPolicy &policy)
{
	return attempts_left(record, policy) ? ClaimAction::claim_next : ClaimAction::mark_dead;
}

} // namespace

ClaimAction decide_claim(const ClaimView &record, const ClaimPolicy &policy) noexcept
{
	if (record.state == RecordState::absent || record.expired)
		return ClaimAction::claim_new;
	if (record.fingerprint_differs && record.state != RecordState::failed)
		return ClaimAction::report_mismatch;

	switch (record.state) {
	case RecordState::completed:
		return ClaimAction::report_completed;
	case RecordState::dead:
		return ClaimAction::report_dead;
	case RecordState::failed:
		return next_attempt(record, policy);
	case RecordState::in_progress:
		if (record.lease_expired || (policy.takeover_on_disconnect && record.holder_gone))
			return next_attempt(record, policy);
		return ClaimAction::report_in_progress;
	case RecordState::absent:
		break;
	}
	return ClaimAction::claim_new;
}

RecordState decide_failure(int attempts, int attempt_base, int max_attempts,
                           bool retryable) noexcept
{
	if (!retryable || attempts - attempt_base >= max_attempts)
		return RecordState::dead;
	return RecordState::failed;
}

FingerprintCheck check_fingerprint(size_t len) noexcept
{
	if (len == 0)
		return FingerprintCheck::empty;
	if (len > max_fingerprint_bytes)
		return FingerprintCheck::too_long;
	return FingerprintCheck::ok;
}

void fingerprint_digest(const char *text, size_t len,
                        uint8_t out[fingerprint_digest_length]) noexcept
{
	Sha256 sha;
	sha.update(text, len);
	sha.finish(out);
}

} // namespace idem
