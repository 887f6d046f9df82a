#include "core/claim_rules.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace {

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
	EXPECT_EQ(decide_claim(record(RecordState::completed), three),
		  ClaimAction::report_completed);
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
	for (RecordState s : {RecordState::in_progress, RecordState::completed,
			      RecordState::failed, RecordState::dead}) {
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
	std::string ok(64, 'a');
	EXPECT_TRUE(idem::valid_fingerprint(ok.data(), ok.size()));
	EXPECT_TRUE(idem::valid_fingerprint(
	    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", 64));
	EXPECT_FALSE(idem::valid_fingerprint(ok.data(), 63));
	std::string upper(64, 'A');
	EXPECT_FALSE(idem::valid_fingerprint(upper.data(), upper.size()));
	std::string g = ok;
	g[10] = 'g';
	EXPECT_FALSE(idem::valid_fingerprint(g.data(), g.size()));
}

TEST(ClaimRules, FingerprintBytes)
{
	uint8_t out[idem::fingerprint_bytes_length];
	ASSERT_TRUE(idem::fingerprint_bytes(
	    "00ff10a9b8c7d6e5f40123456789abcdef0123456789abcdef0123456789abcd", 64, out));
	EXPECT_EQ(out[0], 0x00);
	EXPECT_EQ(out[1], 0xff);
	EXPECT_EQ(out[2], 0x10);
	EXPECT_EQ(out[3], 0xa9);
	EXPECT_EQ(out[7], 0xe5);
	EXPECT_EQ(out[31], 0xcd);
	// Invalid text is refused and leaves the buffer alone: an upper-case
	// digit would otherwise decode like its lower-case twin, which the table
	// path's text comparison tells apart.
	std::fill(out, out + sizeof out, uint8_t(0x5a));
	std::string upper(64, 'A');
	EXPECT_FALSE(idem::fingerprint_bytes(upper.data(), upper.size(), out));
	EXPECT_EQ(out[0], 0x5a);
	std::string short_one(62, 'a');
	EXPECT_FALSE(idem::fingerprint_bytes(short_one.data(), short_one.size(), out));
}

} // namespace
