// The claim tokens of idem_begin: the holder's credential. Include after
// postgres.h.
#pragma once

extern "C" {
#include "utils/uuid.h"
}

namespace idem
{

// A new claim token, palloc'd: a version 4 UUID whose 122 random bits come
// from pg_strong_random, never handed out before by this backend.
pg_uuid_t *new_claim_token();

} // namespace idem
