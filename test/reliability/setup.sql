-- The schema of one reliability run, in a fresh database (run as the
-- superuser; psql variable :accounts). The consumers connect as the role
-- `reliability_consumer`, which gets exactly what the README says a
-- consumer needs, plus its business tables.

CREATE EXTENSION pg_idem;

-- The business: accounts whose balance the orders change. version is used
-- by the versioned pattern only: the number of orders applied to it.
CREATE TABLE accounts (
    id      int PRIMARY KEY,
    balance bigint NOT NULL DEFAULT 0,
    version bigint NOT NULL DEFAULT 0
);
INSERT INTO accounts (id) SELECT generate_series(1, :accounts);

-- idem_try_insert_row's table: the business's own order log, whose primary
-- key catches the duplicate.
CREATE TABLE orders (
    order_id bigint PRIMARY KEY,
    account  int NOT NULL,
    amount   bigint NOT NULL,
    consumer int NOT NULL
);

-- A witness: every consumer inserts a row here in the same transaction as
-- the effect it applies. No unique key, so an order applied twice shows.
CREATE TABLE applied (
    order_id   bigint NOT NULL,
    consumer   int NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Inserting account 0 makes COMMIT fail (an injected fault): the foreign key
-- is checked at commit time only.
CREATE TABLE commit_trap (
    account int REFERENCES accounts DEFERRABLE INITIALLY DEFERRED
);

-- reliability_fault(true) raises SQLSTATE RL001 (an injected fault); it is
-- volatile, so a statement evaluates it when it reaches it, not at planning.
CREATE FUNCTION reliability_fault(fire boolean) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF fire THEN
        RAISE EXCEPTION 'injected fault' USING ERRCODE = 'RL001';
    END IF;
    RETURN false;
END $$;

-- Written by the client when the consumers are done: the stream (every
-- distinct order) and the orders some consumer acknowledged, i.e. saw the
-- COMMIT of their transaction succeed.
CREATE TABLE stream (
    order_id      bigint PRIMARY KEY,
    account       int NOT NULL,
    amount        bigint NOT NULL,
    version       bigint NOT NULL,
    balance_after bigint NOT NULL
);
CREATE TABLE acked (order_id bigint PRIMARY KEY);

-- The claim protocol's scope: a short lease, so that the claims of rolled
-- back or crashed consumers are taken over within the run; enough attempts
-- that bad luck never makes a key dead.
SELECT scope FROM idem_configure('claim', lease => '2 s', max_attempts => 1000);

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'reliability_consumer') THEN
        CREATE ROLE reliability_consumer LOGIN;
    END IF;
END $$;
GRANT EXECUTE ON FUNCTION idem_try_insert(text, text, interval) TO reliability_consumer;
GRANT EXECUTE ON FUNCTION idem_begin(text, text, interval, text, interval, boolean, interval, bigint),
                          idem_complete(text, text, uuid, jsonb, bigint),
                          idem_fail(text, text, uuid, text, boolean, bigint),
                          idem_release(text, text, uuid, bigint),
                          idem_lookup(text, text, bigint) TO reliability_consumer;
-- Its two scopes (pg_idem 0.3: a scope no one was granted is the owner's).
SELECT idem_grant('storm', 'reliability_consumer'), idem_grant('claim', 'reliability_consumer');
GRANT SELECT, UPDATE ON accounts TO reliability_consumer;
GRANT INSERT ON orders, applied, commit_trap, stream, acked TO reliability_consumer;
