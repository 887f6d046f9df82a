-- The business tables of the client examples (examples/python, examples/node)
-- and the grants of their consumer role, run by the database owner after
-- CREATE EXTENSION pg_idem:
--   psql -v ON_ERROR_STOP=1 -v consumer=my_consumer -f examples/schema.sql

-- Pattern 1 (idem_try_insert): credits applied exactly once.
CREATE TABLE accounts (
    id      int PRIMARY KEY,
    balance bigint NOT NULL DEFAULT 0
);

-- Pattern 2 (the claim protocol): the books of a fake payment service.
-- A real service lives elsewhere; this one keeps its books here, written
-- through its own connection, so that the tests can count what it was asked
-- to do. It is not idempotent: every request for a card that is not declined
-- is a charge. A request is labelled by the consumer's idempotency key and
-- attempt number, and a second request for the same attempt is counted in
-- `requests`, never merged.
CREATE TABLE payment_requests (
    idempotency_key text NOT NULL,
    attempt         int NOT NULL,
    amount          bigint NOT NULL,
    outcome         text NOT NULL CHECK (outcome IN ('charged', 'declined', 'unavailable')),
    charge_id       text UNIQUE,
    requests        int NOT NULL DEFAULT 1,
    requested_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (idempotency_key, attempt)
);

-- The consumer role (psql variable `consumer`) gets what the README's
-- Privileges section documents for consumers, EXECUTE on pg_idem's consumer
-- functions and its two scopes, and the statements it runs on its own
-- tables; nothing else (no privilege on pg_idem's tables). idem_fingerprint is executable by PUBLIC.
GRANT EXECUTE ON FUNCTION
    idem_begin(text, text, interval, text, interval, boolean, interval, bigint),
    idem_complete(text, text, uuid, jsonb, bigint),
    idem_fail(text, text, uuid, text, boolean, bigint),
    idem_release(text, text, uuid, bigint),
    idem_lookup(text, text, bigint),
    idem_try_insert(text, text, interval)
TO :"consumer";
-- And the scopes it uses (pg_idem 0.3: a scope no one was granted is the
-- owner's alone).
SELECT idem_grant('example-credits', :'consumer');
SELECT idem_grant('example-payments', :'consumer');
GRANT SELECT, INSERT, UPDATE, DELETE ON accounts TO :"consumer";
GRANT SELECT, INSERT, UPDATE ON payment_requests TO :"consumer";
