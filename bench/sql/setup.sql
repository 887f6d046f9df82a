-- bench/run's database objects: the message functions, one schema per
-- pattern, and the exactly-once check. Loaded once into the database "bench".

CREATE EXTENSION IF NOT EXISTS pg_idem;
CREATE SCHEMA bench;

-- Order k of the message streams (bench/patterns/_msg.sql and the C++ client)
-- adds msg_points(k) points to user msg_user(k).
CREATE FUNCTION bench.msg_user(k bigint) RETURNS int
LANGUAGE sql IMMUTABLE STRICT AS $$ SELECT ((k % 10007) * 7919 % 10000 + 1)::int $$;

CREATE FUNCTION bench.msg_points(k bigint) RETURNS int
LANGUAGE sql IMMUTABLE STRICT AS $$ SELECT (k % 10 + 1)::int $$;

-- The user of order k in stream "batch": like msg_user a function of the
-- order, but scattered at random over the 10,000 users, so that the new
-- orders of one batch are for the same user about as often as random picks
-- would be (about 32 pairs in a batch of 800 new orders, one in 3 batches of
-- 80, one in 360 batches of 8). msg_user gives a client's consecutive orders
-- distinct users: there a batch whose points were not added up per user
-- would go unnoticed.
CREATE FUNCTION bench.batch_user(k bigint) RETURNS int
LANGUAGE sql IMMUTABLE STRICT AS $$ SELECT abs(hashint8(k) % 10000) + 1 $$;

-- Stream "batch" (bench/patterns/_batch.sql): one batch of messages as the
-- arrays a consumer would be handed, in arrival order (order k adds
-- msg_points(k) points to user batch_user(k)). A client's batch holds
-- its nn new orders first_seq .. first_seq + nn - 1 (order base + seq * nc +
-- client, as in stream "msg") and nr redeliveries, each of an order picked at
-- random among the client's orders 0 .. first_seq + nn - 1: mostly orders of
-- earlier batches, now and then one of this batch (so a batch may hold the
-- same order twice, new or not). The order of the messages is shuffled too.
-- seed makes it random; the same arguments give the same batch, so it is
-- IMMUTABLE and, returning a set, inlined into the calling statement.
CREATE FUNCTION bench.batch(base bigint, nc int, client int, first_seq bigint, nn int,
                            nr int, seed bigint)
RETURNS TABLE (k bigint[], u int[], n int[])
LANGUAGE sql IMMUTABLE AS $$
    SELECT array_agg(o ORDER BY h), array_agg(bench.batch_user(o) ORDER BY h),
           array_agg(bench.msg_points(o) ORDER BY h)
    FROM (SELECT base + s * nc + client AS o, hashint8extended(i, seed) AS h
          FROM generate_series(1, nn + nr) i,
               LATERAL (SELECT CASE WHEN i <= nn THEN first_seq + i - 1
                        ELSE abs(hashint8extended(i, seed + 1) % (first_seq + nn))
                        END AS s) pick) m
$$;

-- The amount stream "ver" adds to user u at version v (bench/patterns/_ver.sql).
CREATE FUNCTION bench.ver_points(u int, v bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT AS $$ SELECT (u * 31 + v) % 10 + 1 $$;

-- Pattern call_floor: the cheapest function idem_try_insert could be, a
-- built-in (texteq) declared SECURITY DEFINER, taking the same two text
-- arguments.
CREATE FUNCTION bench.call_floor(scope text, key text) RETURNS boolean
LANGUAGE internal VOLATILE SECURITY DEFINER AS 'texteq';

-- Hand-made dedup tables holding what idem_records holds for a completed
-- record: scope, key, when, until when. Like idem_records, each is shared by
-- the patterns that use it (raw_new and raw_dup share consumed; dedup_txn
-- uses consumed_log), each pattern with its own scope, so that the baselines
-- probe an index that grows as pg_idem's does.
CREATE TABLE public.consumed (
    scope       text COLLATE "C" NOT NULL,
    key         text COLLATE "C" NOT NULL,
    recorded_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (scope, key));
CREATE TABLE public.consumed_log (LIKE public.consumed INCLUDING ALL);

-- A copy of idem_records' format (its columns, primary key and indexes, no
-- triggers), into which raw_rec_new, cte_rec and hand_rec_100 write by hand
-- the row idem_try_insert writes for a new key. Against them pg_idem's own
-- work shows apart from what its record's format costs; against consumed
-- and points_log, the format's cost shows.
CREATE TABLE public.records_copy (LIKE public.idem_records INCLUDING ALL);

-- The key id idem_try_insert computes for a (scope, key) of at most 64
-- bytes in all (src/core/record_key.hpp): 0x00, the scope's length in
-- bytes, the scope, the key. STABLE, as convert_to is, so that it is
-- inlined into the statement (IMMUTABLE would make it a call of its own).
CREATE FUNCTION bench.key_id(scope text, key text) RETURNS bytea
LANGUAGE sql STABLE STRICT AS $$
    SELECT '\x00'::bytea || set_byte('\x00'::bytea, 0, octet_length(scope))
           || convert_to(scope || key, 'UTF8') $$;

-- Pattern ver_fn: the hand-written optimistic UPDATE in the cheapest
-- function a user would write for it, answering whether it applied: what
-- calling any function costs next to running the UPDATE as a statement.
CREATE FUNCTION bench.ver_update(u int, ev bigint, np bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE users SET points = np, version = version + 1 WHERE id = u AND version = ev;
    RETURN FOUND;
END $$;

-- A pattern's own schema; its scripts run with search_path = <schema>, public.
-- Every schema has the same tables, so every pattern starts from the same
-- state: 10,000 users with 0 points at version 0, and an empty points_log.
CREATE FUNCTION bench.make_pattern_schema(sch text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE SCHEMA %I', sch);
    EXECUTE format($q$
        CREATE TABLE %1$I.users (
            id      int PRIMARY KEY,
            points  bigint NOT NULL DEFAULT 0,
            version bigint NOT NULL DEFAULT 0);
        INSERT INTO %1$I.users (id) SELECT g FROM generate_series(1, 10000) g;
        -- What cte.sql and idem_row.sql log: one row per processed order.
        CREATE TABLE %1$I.points_log (
            order_id  bigint PRIMARY KEY,
            user_id   int NOT NULL,
            points    int NOT NULL,
            logged_at timestamptz NOT NULL DEFAULT now());
    $q$, sch);
END $$;

-- The order ids a pattern has processed (committed), by where it records them.
CREATE TABLE bench.redis_dump (key text, value text);

CREATE FUNCTION bench.processed(kind text, sch text, scope text) RETURNS TABLE (k bigint)
LANGUAGE plpgsql AS $$
BEGIN
    CASE kind
    WHEN 'log' THEN
        RETURN QUERY EXECUTE format('SELECT order_id FROM %I.points_log', sch);
    WHEN 'consumed' THEN
        RETURN QUERY SELECT c.key::bigint FROM public.consumed_log c WHERE c.scope = $3;
    WHEN 'idem' THEN
        RETURN QUERY SELECT r.key::bigint FROM public.idem_records r
                     WHERE r.scope = $3 AND r.status = 'completed';
    WHEN 'reccopy' THEN
        RETURN QUERY SELECT r.key::bigint FROM public.records_copy r
                     WHERE r.scope = $3 AND r.status = 'completed';
    WHEN 'plclaim' THEN
        RETURN QUERY SELECT c.key::bigint FROM public.pl_claims c
                     WHERE c.scope = $3 AND c.status = 'completed';
    WHEN 'redis' THEN
        RETURN QUERY SELECT substr(d.key, 6)::bigint FROM bench.redis_dump d
                     WHERE d.key LIKE 'idem:%' AND d.value = 'SUCCESS';
    ELSE
        RAISE 'unknown check kind %', kind;
    END CASE;
END $$;

-- The exactly-once check of one pattern, run before and after every run.
--   processed: how many messages have taken effect so far (orders recorded;
--              for kind 'version', the sum of all versions);
--   updates:   n_tup_upd of the pattern's users table, i.e. how many balance
--              updates PostgreSQL has really done;
--   bad_users: users whose balance differs from what the processed orders
--              (or, for 'version', the version) say it must be;
--   bad_rows:  recorded orders that contradict their message (a points_log
--              row with another user or amount; a Redis key not SUCCESS).
--   applied:   how many balance updates the processed orders call for: one
--              per order; for a batch pattern (stream "batch", batch_new new
--              orders per transaction, nc clients, each run's orders in its
--              own span of ids), one per distinct user among the new orders
--              of each batch (the batch's UPDATE adds a user's points up).
-- A run passes when bad_users = bad_rows = 0 and, over the run, the increase
-- of updates equals the increase of applied: one balance update per newly
-- recorded order (per user and batch), none for a duplicate. (Kind 'keys',
-- for the patterns that only record keys: processed counts the pattern's
-- keys, and bench/run checks that a run of new keys added one per
-- transaction and a run of duplicates none. For a batch run, bench/run also
-- checks that processed grew by exactly the new orders its committed batches
-- sent.) (A duplicate applied twice, a record written without its update or
-- the other way round, a stale version applied, two orders of one user in a
-- batch applied as one: each breaks one of these.)
CREATE FUNCTION bench.check(kind text, sch text, scope text,
                            batch_new int DEFAULT NULL, nc int DEFAULT NULL,
                            span bigint DEFAULT NULL,
                            OUT processed bigint, OUT updates bigint,
                            OUT bad_users bigint, OUT bad_rows bigint,
                            OUT applied bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT coalesce(t.n_tup_upd, 0) INTO updates
    FROM pg_stat_user_tables t WHERE t.schemaname = sch AND t.relname = 'users';
    bad_rows := 0;
    bad_users := 0;
    IF kind = 'keys' THEN
        -- The dedup patterns without a balance: how many keys they recorded.
        SELECT (SELECT count(*) FROM public.consumed c WHERE c.scope = $3)
             + (SELECT count(*) FROM public.idem_records r WHERE r.scope = $3)
             + (SELECT count(*) FROM public.records_copy r WHERE r.scope = $3)
        INTO processed;
        applied := processed;
        RETURN;
    END IF;
    IF kind = 'version' THEN
        EXECUTE format($q$
            SELECT coalesce(sum(u.version), 0),
                   count(*) FILTER (WHERE u.points <> (
                       SELECT coalesce(sum(bench.ver_points(u.id, v)), 0)
                       FROM generate_series(0, u.version - 1) v))
            FROM %I.users u $q$, sch)
        INTO processed, bad_users;
        applied := processed;
        RETURN;
    END IF;

    -- Each processed order with its user: stream "batch" has its own.
    CREATE TEMP TABLE pg_temp.done ON COMMIT DROP AS
        SELECT p.k, CASE WHEN batch_new IS NULL THEN bench.msg_user(p.k)
                         ELSE bench.batch_user(p.k) END AS u
        FROM bench.processed(kind, sch, scope) p;
    SELECT count(*) INTO processed FROM pg_temp.done;
    IF batch_new IS NULL THEN
        applied := processed;
    ELSE
        -- Order k is new in batch (k % span / nc) / batch_new of client
        -- k % nc in run k / span.
        SELECT count(*) INTO applied
        FROM (SELECT DISTINCT d.k / span, d.k % nc, d.k % span / nc / batch_new, d.u
              FROM pg_temp.done d) per_batch_user;
    END IF;
    EXECUTE format($q$
        WITH expected AS (
            SELECT u AS id, sum(bench.msg_points(k)) AS points
            FROM pg_temp.done GROUP BY 1)
        SELECT count(*) FROM %I.users u LEFT JOIN expected e USING (id)
        WHERE u.points <> coalesce(e.points, 0) $q$, sch)
    INTO bad_users;
    -- Orders for users that do not exist would escape the join above.
    bad_users := bad_users + (SELECT count(*) FROM pg_temp.done d
                              WHERE d.u NOT BETWEEN 1 AND 10000);
    IF kind = 'log' THEN
        -- (done holds every order_id of points_log.)
        EXECUTE format($q$
            SELECT count(*) FROM %I.points_log l JOIN pg_temp.done d ON d.k = l.order_id
            WHERE l.user_id <> d.u OR l.points <> bench.msg_points(l.order_id) $q$, sch)
        INTO bad_rows;
    ELSIF kind = 'redis' THEN
        SELECT count(*) INTO bad_rows FROM bench.redis_dump d
        WHERE d.value IS DISTINCT FROM 'SUCCESS';
    END IF;
    DROP TABLE pg_temp.done;
END $$;

-- The claim protocol written by hand, as a careful user would: one
-- statement to claim (new key, or take over an expired lease) that hands
-- the holder a random token, one to complete that checks it, each in a
-- PL/pgSQL function (as pg_idem 0.3 does: the token, not the attempt
-- number, is the holder's credential).
CREATE TABLE public.pl_claims (
    scope            text COLLATE "C" NOT NULL,
    key              text COLLATE "C" NOT NULL,
    status           text NOT NULL,
    attempt          integer NOT NULL,
    token            uuid,
    lease_expires_at timestamptz,
    result           jsonb,
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);

CREATE FUNCTION bench.pl_begin(p_scope text, p_key text,
                               OUT acquired boolean, OUT attempt integer, OUT token uuid)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.pl_claims AS c (scope, key, status, attempt, token, lease_expires_at,
                                       expires_at)
    VALUES (p_scope, p_key, 'in_progress', 1, gen_random_uuid(),
            clock_timestamp() + interval '5 minutes', now() + interval '7 days')
    ON CONFLICT (scope, key) DO UPDATE
        SET status = 'in_progress', attempt = c.attempt + 1, token = EXCLUDED.token,
            lease_expires_at = EXCLUDED.lease_expires_at
        WHERE c.status = 'in_progress' AND c.lease_expires_at < clock_timestamp()
    RETURNING true, c.attempt, c.token INTO acquired, attempt, token;
    IF NOT FOUND THEN
        acquired := false;
        attempt := 0;
        token := NULL;
    END IF;
END $$;

CREATE FUNCTION bench.pl_complete(p_scope text, p_key text, p_token uuid,
                                  p_result jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE public.pl_claims
    SET status = 'completed', result = p_result, lease_expires_at = NULL, token = NULL
    WHERE scope = p_scope AND key = p_key AND token = p_token
      AND status = 'in_progress';
    RETURN FOUND;
END $$;

-- Pattern pl_claim_rec: the same protocol writing the rows idem_begin and
-- idem_complete write (holder, token, lease; at completion a new expiry)
-- into the copy of idem_records' format (public.records_copy, with its
-- partial index of claims in flight), so that against idem_claim pg_idem's
-- work shows apart from its format's cost.
CREATE FUNCTION bench.pl_begin_rec(p_scope text, p_key text,
                                   OUT acquired boolean, OUT attempt integer, OUT token uuid)
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.records_copy AS c (key_id, scope, key, status, attempts, recorded_at,
                                          expires_at, lease_expires_at, holder_pid,
                                          holder_started_at, claim_token)
    VALUES (bench.key_id(p_scope, p_key), p_scope, p_key, 'in_progress', 1, now(),
            now() + interval '7 days', clock_timestamp() + interval '5 minutes',
            pg_backend_pid(), now(), gen_random_uuid())
    ON CONFLICT (key_id) DO UPDATE
        SET attempts = c.attempts + 1, claim_token = EXCLUDED.claim_token,
            lease_expires_at = EXCLUDED.lease_expires_at, holder_pid = EXCLUDED.holder_pid,
            holder_started_at = EXCLUDED.holder_started_at
        WHERE c.status = 'in_progress' AND c.lease_expires_at < clock_timestamp()
    RETURNING true, c.attempts, c.claim_token INTO acquired, attempt, token;
    IF NOT FOUND THEN
        acquired := false;
        attempt := 0;
        token := NULL;
    END IF;
END $$;

CREATE FUNCTION bench.pl_complete_rec(p_scope text, p_key text, p_token uuid,
                                      p_result jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE public.records_copy
    SET status = 'completed', result = p_result, recorded_at = now(),
        expires_at = now() + interval '7 days', lease_expires_at = NULL, holder_pid = NULL,
        holder_started_at = NULL, claim_token = NULL
    WHERE key_id = bench.key_id(p_scope, p_key) AND claim_token = p_token
      AND status = 'in_progress';
    RETURN FOUND;
END $$;
