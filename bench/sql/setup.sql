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
-- A run passes when bad_users = bad_rows = 0 and, over the run, the increase
-- of updates equals the increase of processed: one balance update per newly
-- recorded order, none for a duplicate. (Kind 'keys', for the patterns that
-- only record keys: processed counts the pattern's keys, and bench/run checks
-- that a run of new keys added one per transaction and a run of duplicates
-- none.) (A duplicate applied twice, a record
-- written without its update or the other way round, a stale version applied:
-- each breaks one of these.)
CREATE FUNCTION bench.check(kind text, sch text, scope text,
                            OUT processed bigint, OUT updates bigint,
                            OUT bad_users bigint, OUT bad_rows bigint)
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
        INTO processed;
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
        RETURN;
    END IF;

    CREATE TEMP TABLE pg_temp.done ON COMMIT DROP AS
        SELECT p.k FROM bench.processed(kind, sch, scope) p;
    SELECT count(*) INTO processed FROM pg_temp.done;
    EXECUTE format($q$
        WITH expected AS (
            SELECT bench.msg_user(k) AS id, sum(bench.msg_points(k)) AS points
            FROM pg_temp.done GROUP BY 1)
        SELECT count(*) FROM %I.users u LEFT JOIN expected e USING (id)
        WHERE u.points <> coalesce(e.points, 0) $q$, sch)
    INTO bad_users;
    -- Orders for users that do not exist would escape the join above.
    bad_users := bad_users + (SELECT count(*) FROM pg_temp.done
                              WHERE bench.msg_user(k) NOT BETWEEN 1 AND 10000);
    IF kind = 'log' THEN
        EXECUTE format($q$
            SELECT count(*) FROM %I.points_log
            WHERE user_id <> bench.msg_user(order_id)
               OR points <> bench.msg_points(order_id) $q$, sch)
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
