// See claim_rules.hpp for the state diagram.
#include "claim_rules.hpp"

namespace idem {

namespace {

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
	if (record.fingerprint_differs)
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

bool valid_fingerprint(const char *text, size_t len) noexcept
{
	if (len != fingerprint_length)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = text[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
	}
	return true;
}

bool fingerprint_bytes(const char *text, size_t len, uint8_t *out) noexcept
{
	if (!valid_fingerprint(text, len))
		return false;
	auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
	for (size_t i = 0; i < fingerprint_bytes_length; i++)
		out[i] = uint8_t(nibble(text[2 * i]) << 4 | nibble(text[2 * i + 1]));
	return true;
}

} // namespace idem
