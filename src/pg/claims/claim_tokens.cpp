// Claim tokens (claim_tokens.hpp), drawn from pg_strong_random in batches.
//
// Why batches. A token is 16 bytes, and pg_strong_random's cost is mostly
// per call, not per byte (with OpenSSL: RAND_status and RAND_bytes with
// their locking and reseed checks, about 8,500 instructions for 16 bytes,
// 3% of a claim's begin + business update + complete). One call fills the
// backend's pool with the bytes of `pool_tokens` tokens; each token takes
// the next 16 and wipes them from the pool, so a byte is used at most once
// and none stays behind in memory after it was handed out. The bytes are as
// strong as one call's: pg_strong_random's generator already keeps its
// state in this process's memory. The pool is refilled when empty, and by a
// process that did not fill it (only backends draw tokens, and the
// postmaster, whose memory they inherit, never does; the check keeps two
// processes from ever sharing bytes whatever forks).
extern "C" {
#include "postgres.h"

#include "miscadmin.h"
#include "port.h"
}

#include "pg/claims/claim_tokens.hpp"

#include <cstring>

namespace idem
{

namespace
{

constexpr int pool_tokens = 32;
unsigned char pool[pool_tokens * UUID_LEN];
int pool_next = pool_tokens; // index of the next unused token; pool_tokens: empty
int pool_pid = 0;            // the process that filled the pool

void refill()
{
	if (!pg_strong_random(pool, sizeof pool))
		ereport(ERROR, errcode(ERRCODE_INTERNAL_ERROR),
		        errmsg("pg_idem: could not generate a random claim token"));
	pool_next = 0;
	pool_pid = MyProcPid;
}

} // namespace

pg_uuid_t *new_claim_token()
{
	if (pool_next == pool_tokens || pool_pid != MyProcPid)
		refill();
	pg_uuid_t *token = static_cast<pg_uuid_t *>(palloc(sizeof(pg_uuid_t)));
	unsigned char *bytes = pool + pool_next * UUID_LEN;
	memcpy(token->data, bytes, UUID_LEN);
	explicit_bzero(bytes, UUID_LEN);
	pool_next++;
	token->data[6] = (token->data[6] & 0x0f) | 0x40; // version 4
	token->data[8] = (token->data[8] & 0x3f) | 0x80; // RFC 4122 variant
	return token;
}

} // namespace idem
