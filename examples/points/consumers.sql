-- One consumer procedure per pattern. scripts/demo CALLs each from 4 psql
-- sessions at once: CALL consume_<pattern>(consumer, consumers), with
-- consumer in 0 .. consumers-1. Each message is its own transaction: the
-- dedup step, the balance change and the bookkeeping row commit together.

-- Wait until all consumers of a pattern are connected, then go together.
CREATE PROCEDURE consumer_barrier(p_pattern text, p_consumer int, p_consumers int)
LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + interval '30 seconds';
BEGIN
    INSERT INTO ready VALUES (p_pattern, p_consumer);
    COMMIT;
    WHILE (SELECT count(*) FROM ready WHERE pattern = p_pattern) < p_consumers LOOP
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'consumer % of %: the other consumers did not start', p_consumer, p_pattern;
        END IF;
        PERFORM pg_sleep(0.001);
    END LOOP;
END $$;

-- The broker of the managed and own_table patterns deals the messages
-- round-robin (message s to consumer (s-1) % consumers) and, like a broker
-- that does not wait for acknowledgements, lets message s start as soon as
-- message s-1 has started. So the consumers run in step, and a redelivery
-- that follows its original closely is processed while the original is
-- still in flight.
-- Turns pass with session advisory locks: a consumer holds the lock
-- numbered like its next message until it starts that message; the
-- consumer of the message after waits for that lock.
CREATE PROCEDURE wait_turn(p_seq int, p_consumers int)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_lock(4242, p_seq - 1);       -- message s-1 has started
    PERFORM pg_advisory_unlock(4242, p_seq - 1);
    PERFORM pg_advisory_lock(4242, p_seq + p_consumers);  -- hold my next turn
    IF NOT pg_advisory_unlock(4242, p_seq) THEN       -- message s starts now
        RAISE EXCEPTION 'message %: out of turn', p_seq;
    END IF;
END $$;

-- 1. managed: pg_idem's own dedup table. The claim and the balance change
-- are one statement; a duplicate claim (even one still in flight in another
-- consumer's transaction, which it waits for) makes the UPDATE match nothing.
CREATE PROCEDURE consume_managed(p_consumer int, p_consumers int)
LANGUAGE plpgsql AS $$
DECLARE
    m       record;
    v_first boolean;
    t0      timestamptz;
BEGIN
    PERFORM pg_advisory_lock(4242, p_consumer + 1);  -- my first turn (see wait_turn)
    CALL consumer_barrier('managed', p_consumer, p_consumers);
    FOR m IN SELECT * FROM messages WHERE (seq - 1) % p_consumers = p_consumer ORDER BY seq LOOP
        CALL wait_turn(m.seq, p_consumers);
        t0 := clock_timestamp();
        WITH d AS (SELECT idem_try_insert('points', m.order_id::text) AS first),
             u AS (UPDATE users SET points = points + m.points
                   FROM d WHERE d.first AND id = m.user_id)
        SELECT d.first INTO v_first FROM d;
        IF v_first AND m.slow THEN
            PERFORM pg_sleep(0.01);   -- the rest of a slow order's work
        END IF;
        INSERT INTO consumed VALUES ('managed', m.seq, p_consumer, v_first, t0, clock_timestamp());
        COMMIT;
    END LOOP;
END $$;

-- 2. own_table: the order goes into the business's own points_log, whose
-- primary key rejects the duplicate; same statement shape as managed.
CREATE PROCEDURE consume_own_table(p_consumer int, p_consumers int)
LANGUAGE plpgsql AS $$
DECLARE
    m       record;
    v_first boolean;
    t0      timestamptz;
BEGIN
    PERFORM pg_advisory_lock(4242, p_consumer + 1);  -- my first turn (see wait_turn)
    CALL consumer_barrier('own_table', p_consumer, p_consumers);
    FOR m IN SELECT * FROM messages WHERE (seq - 1) % p_consumers = p_consumer ORDER BY seq LOOP
        CALL wait_turn(m.seq, p_consumers);
        t0 := clock_timestamp();
        WITH d AS (SELECT idem_try_insert_row('points_log',
                              jsonb_build_object('order_id', m.order_id,
                                                 'user_id', m.user_id,
                                                 'points', m.points)) AS first),
             u AS (UPDATE users SET points = points + m.points
                   FROM d WHERE d.first AND id = m.user_id)
        SELECT d.first INTO v_first FROM d;
        IF v_first AND m.slow THEN
            PERFORM pg_sleep(0.01);   -- the rest of a slow order's work
        END IF;
        INSERT INTO consumed VALUES ('own_table', m.seq, p_consumer, v_first, t0, clock_timestamp());
        COMMIT;
    END LOOP;
END $$;

-- 3. versioned: the message carries the user's k-th version and the
-- absolute balance after it; the update applies only if the row is still
-- at version k-1. No dedup table at all, but the limitation of the pattern:
-- a user's messages must arrive in order. Were version k+1 consumed before
-- k, it would be rejected as stale and then lost. So these messages are
-- partitioned by user (user_id % consumers): each user's messages go to one
-- consumer, in delivery order, every redelivery after its original.
CREATE PROCEDURE consume_versioned(p_consumer int, p_consumers int)
LANGUAGE plpgsql AS $$
DECLARE
    m       record;
    v_first boolean;
    t0      timestamptz;
BEGIN
    CALL consumer_barrier('versioned', p_consumer, p_consumers);
    FOR m IN SELECT * FROM messages WHERE user_id % p_consumers = p_consumer ORDER BY seq LOOP
        t0 := clock_timestamp();
        v_first := idem_versioned_update('users', jsonb_build_object('id', m.user_id),
                                         m.version - 1,
                                         jsonb_build_object('points', m.new_balance));
        IF v_first IS NULL THEN
            RAISE EXCEPTION 'message %: no user %', m.seq, m.user_id;
        END IF;
        IF v_first AND m.slow THEN
            PERFORM pg_sleep(0.01);   -- the rest of a slow order's work
        END IF;
        INSERT INTO consumed VALUES ('versioned', m.seq, p_consumer, v_first, t0, clock_timestamp());
        COMMIT;
    END LOOP;
END $$;
