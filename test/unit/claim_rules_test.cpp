#include "core/claim_rules.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include <algorithm>
#include <string>

namespace
{

using idem::ClaimAction;
using idem::ClaimPolicy;
using idem::ClaimView;
using idem::RecordState;

ClaimView record(RecordState state, int attempts = 1)
{
	return ClaimView{state, attempts, 0, false, false, false, false};
}

const ClaimPolicy three{3, false};
const ClaimPolicy three_liveness{3, true};

TEST(ClaimRules, AbsentOrExpiredIsClaimedFresh)
{
	EXPECT_EQ(decide_claim(record(RecordState::absent, 0), three), ClaimAction::claim_new);
	ClaimView expired = record(RecordState::completed);
	expired.expired = true;
	EXPECT_EQ(decide_claim(expired, three), ClaimAction::claim_new);
}

TEST(ClaimRules, CompletedAndDeadAreReported)
{
	EXPECT_EQ(decide_claim(record(RecordState::completed), three), ClaimAction::report_completed);
	EXPECT_EQ(decide_claim(record(RecordState::dead, 3), three), ClaimAction::report_dead);
}

TEST(ClaimRules, LiveLeaseIsInProgress)
{
	EXPECT_EQ(decide_claim(record(RecordState::in_progress), three),
	          ClaimAction::report_in_progress);
	// A gone holder only matters when the scope or call opted in.
	ClaimView gone = record(RecordState::in_progress);
	gone.holder_gone = true;
	EXPECT_EQ(decide_claim(gone, three), ClaimAction::report_in_progress);
	EXPECT_EQ(decide_claim(gone, three_liveness), ClaimAction::claim_next);
}

TEST(ClaimRules, ExpiredLeaseIsTakenOverUntilAttemptsRunOut)
{
	ClaimView r = record(RecordState::in_progress, 2);
	r.lease_expired = true;
	EXPECT_EQ(decide_claim(r, three), ClaimAction::claim_next);
	r.attempts = 3;
	EXPECT_EQ(decide_claim(r, three), ClaimAction::mark_dead);
}

TEST(ClaimRules, FailedIsRetriedUntilAttemptsRunOut)
{
	EXPECT_EQ(decide_claim(record(RecordState::failed, 1), three), ClaimAction::claim_next);
	EXPECT_EQ(decide_claim(record(RecordState::failed, 3), three), ClaimAction::mark_dead);
	// After idem_retry the base moves up: three more attempts.
	ClaimView retried = record(RecordState::failed, 3);
	retried.attempt_base = 3;
	EXPECT_EQ(decide_claim(retried, three), ClaimAction::claim_next);
}

TEST(ClaimRules, FingerprintMismatchWinsOverState)
{
	// (A failed record binds no fingerprint: FailedRecordBindsNoFingerprint.)
	for (RecordState s : {RecordState::in_progress, RecordState::completed, RecordState::dead}) {
		ClaimView r = record(s);
		r.fingerprint_differs = true;
		EXPECT_EQ(decide_claim(r, three), ClaimAction::report_mismatch);
	}
	// ...but not over an expired record, which counts as absent.
	ClaimView expired = record(RecordState::completed);
	expired.fingerprint_differs = true;
	expired.expired = true;
	EXPECT_EQ(decide_claim(expired, three), ClaimAction::claim_new);
}

TEST(ClaimRules, Failure)
{
	EXPECT_EQ(idem::decide_failure(1, 0, 3, true), RecordState::failed);
	EXPECT_EQ(idem::decide_failure(2, 0, 3, true), RecordState::failed);
	EXPECT_EQ(idem::decide_failure(3, 0, 3, true), RecordState::dead);
	EXPECT_EQ(idem::decide_failure(1, 0, 3, false), RecordState::dead);
	EXPECT_EQ(idem::decide_failure(4, 3, 3, true), RecordState::failed);
}

TEST(ClaimRules, FingerprintForm)
{
	// Opaque text: anything non-empty up to the limit, such as a client
	// library's base64 MD5, not only idem_fingerprint's SHA-256.
	EXPECT_EQ(idem::check_fingerprint(1), idem::FingerprintCheck::ok);
	EXPECT_EQ(idem::check_fingerprint(24), idem::FingerprintCheck::ok);
	EXPECT_EQ(idem::check_fingerprint(idem::max_fingerprint_bytes), idem::FingerprintCheck::ok);
	EXPECT_EQ(idem::check_fingerprint(0), idem::FingerprintCheck::empty);
	EXPECT_EQ(idem::check_fingerprint(idem::max_fingerprint_bytes + 1),
	          idem::FingerprintCheck::too_long);
}

TEST(ClaimRules, FingerprintDigest)
{
	uint8_t abc[idem::fingerprint_digest_length];
	idem::fingerprint_digest("abc", 3, abc);
	// FIPS 180-4's example: SHA-256("abc") = ba7816bf...
	EXPECT_EQ(abc[0], 0xba);
	EXPECT_EQ(abc[1], 0x78);
	EXPECT_EQ(abc[31], 0xad);
	// Text that differs only in case, or in length, has another digest, as
	// the table path's text comparison tells them apart.
	uint8_t upper[idem::fingerprint_digest_length];
	idem::fingerprint_digest("ABC", 3, upper);
	EXPECT_NE(std::memcmp(abc, upper, sizeof abc), 0);
	uint8_t prefix[idem::fingerprint_digest_length];
	idem::fingerprint_digest("abc", 2, prefix);
	EXPECT_NE(std::memcmp(abc, prefix, sizeof abc), 0);
}

TEST(ClaimRules, FailedRecordBindsNoFingerprint)
{
	ClaimPolicy three{3, false};
	ClaimView failed{RecordState::failed, 1, 0, false, false, false, true};
	EXPECT_EQ(decide_claim(failed, three), ClaimAction::claim_next);
	ClaimView completed{RecordState::completed, 1, 0, false, false, false, true};
	EXPECT_EQ(decide_claim(completed, three), ClaimAction::report_mismatch);
	ClaimView in_progress{RecordState::in_progress, 1, 0, false, true, false, true};
	EXPECT_EQ(decide_claim(in_progress, three), ClaimAction::report_mismatch);
	ClaimView dead{RecordState::dead, 3, 0, false, false, false, true};
	EXPECT_EQ(decide_claim(dead, three), ClaimAction::report_mismatch);
}

} // namespace
