-- idem_versioned_update: the optimistic-lock pattern on the caller's table.
-- true = applied, false = the row has another version, NULL = no such row.

CREATE TABLE accounts (
    id      int PRIMARY KEY,
    region  text NOT NULL,
    number  int NOT NULL,
    balance numeric NOT NULL,
    status  text NOT NULL DEFAULT 'open',
    version bigint NOT NULL DEFAULT 0,
    UNIQUE (region, number)
);
INSERT INTO accounts (id, region, number, balance) VALUES (1, 'eu', 100, 0), (2, 'us', 100, 0);

-- Applies once; the replay of the same message changes nothing.
SELECT idem_versioned_update('accounts', '{"id": 1}', 0, '{"balance": 10}') AS applied;
SELECT idem_versioned_update('accounts', '{"id": 1}', 0, '{"balance": 10}') AS replay;
SELECT idem_versioned_update('accounts', '{"id": 42}', 0, '{"balance": 10}') AS no_such_row;
SELECT id, balance, version FROM accounts ORDER BY id;

-- The next version applies; several changes at once; a composite unique key.
SELECT idem_versioned_update('accounts', '{"region": "eu", "number": 100}', 1,
                             '{"balance": "25.50", "status": "frozen"}') AS applied;
SELECT id, balance, status, version FROM accounts WHERE id = 1;
-- Empty changes only move the version.
SELECT idem_versioned_update('accounts', '{"id": 2}', 0, '{}') AS bumped;
SELECT id, version FROM accounts WHERE id = 2;

-- Another version column, of another integer type.
CREATE TABLE docs (slug text PRIMARY KEY, body text, rev smallint NOT NULL DEFAULT 1);
INSERT INTO docs VALUES ('intro', 'v1', 1);
SELECT idem_versioned_update('docs', '{"slug": "intro"}', 1, '{"body": "v2"}', 'rev') AS applied,
       idem_versioned_update('docs', '{"slug": "intro"}', 1, '{"body": "v2"}', 'rev') AS replay;
SELECT * FROM docs;

-- Plans survive ALTER TABLE.
ALTER TABLE docs ADD COLUMN title text;
SELECT idem_versioned_update('docs', '{"slug": "intro"}', 2, '{"title": "Intro"}', 'rev');
SELECT * FROM docs;

-- Row-level security hides rows: a hidden row is "no such row".
CREATE ROLE regress_idem_updater;
GRANT SELECT, UPDATE ON accounts TO regress_idem_updater;
ALTER TABLE accounts ENABLE ROW LEVEL SECURITY;
CREATE POLICY eu_only ON accounts USING (region = 'eu');
SET ROLE regress_idem_updater;
SELECT idem_versioned_update('accounts', '{"id": 2}', 1, '{"balance": 1}') AS hidden_row;
SELECT idem_versioned_update('accounts', '{"id": 1}', 2, '{"balance": 30}') AS visible_row;
-- No privilege: 42501.
SELECT idem_versioned_update('docs', '{"slug": "intro"}', 3, '{"body": "x"}', 'rev');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
ALTER TABLE accounts DISABLE ROW LEVEL SECURITY;
SELECT id, balance, version FROM accounts ORDER BY id;

-- Bad input: a clear error, and nothing written.
SELECT idem_versioned_update('accounts', '{"id": 1}', NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('accounts', NULL, 3, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('accounts', '{}', 3, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('accounts', '[1]', 3, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('accounts', '{"id": 1}', 3, '"x"');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('accounts', '{"region": "eu"}', 3, '{"balance": 1}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('accounts', '{"status": "open"}', 3, '{"balance": 1}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('accounts', '{"id": null}', 3, '{"balance": 1}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('accounts', '{"id": 1}', 3, '{"version": 9}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('accounts', '{"id": 1, "version": 3}', 3, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('accounts', '{"id": 1}', 3, '{"balance": 1}', 'no_such_column');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('accounts', '{"id": 1}', 3, '{"balance": 1}', 'status');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('accounts', '{"id": 1}', 3, '{"balance": "lots"}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('accounts', '{"id": 1}', 3, '{"no_such_column": 1}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('accounts', '{"id": 1}', 3, '{"balance = 0; --": 1}');
\echo :LAST_ERROR_SQLSTATE
CREATE VIEW accounts_view AS SELECT * FROM accounts;
SELECT idem_versioned_update('accounts_view', '{"id": 1}', 3, '{"balance": 1}');
\echo :LAST_ERROR_SQLSTATE
SELECT id, balance, status, version FROM accounts ORDER BY id;

-- A message that builds on a version the row has not reached yet is an
-- error (55000), never a skip: the row is at 3.
SELECT idem_versioned_update('accounts', '{"id": 1}', 5, '{"balance": 99}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('accounts', '{"id": 1}', 9223372036854775807, '{}');
\echo :LAST_ERROR_SQLSTATE
-- The new version is the row's plus one: an expected version at the limit
-- is an error only for the row that has it.
CREATE TABLE limits (id int PRIMARY KEY, version smallint NOT NULL);
INSERT INTO limits VALUES (1, 32767), (2, 5);
SELECT idem_versioned_update('limits', '{"id": 2}', 32767, '{}') AS behind;
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('limits', '{"id": 1}', 40000, '{}') AS behind_too;
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('limits', '{"id": 1}', 32767, '{}') AS at_limit;
\echo :LAST_ERROR_SQLSTATE
SELECT idem_versioned_update('limits', '{"id": 2}', 3, '{}') AS replay_not_overflow;
SELECT * FROM limits ORDER BY id;
-- A row without a version cannot take a versioned update.
CREATE TABLE loose (id int PRIMARY KEY, version int);
INSERT INTO loose VALUES (1, NULL);
SELECT idem_versioned_update('loose', '{"id": 1}', 0, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT id, balance, status, version FROM accounts ORDER BY id;

-- The key names at most one row: inheritance children are left out, and
-- a deferrable unique constraint, or a unique index under another
-- collation than the column's, does not count.
CREATE TABLE orders (id int PRIMARY KEY, state text, version int NOT NULL DEFAULT 0);
CREATE TABLE orders_archive () INHERITS (orders);
INSERT INTO orders VALUES (1, 'new', 0);
INSERT INTO orders_archive VALUES (1, 'new', 0);
SELECT idem_versioned_update('orders', '{"id": 1}', 0, '{"state": "paid"}') AS applied;
SELECT tableoid::regclass, * FROM orders ORDER BY 1;
CREATE TABLE deferred_key (id int UNIQUE DEFERRABLE, version int NOT NULL DEFAULT 0);
SELECT idem_versioned_update('deferred_key', '{"id": 1}', 0, '{}');
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE folded (email text COLLATE "POSIX", version int NOT NULL DEFAULT 0);
CREATE UNIQUE INDEX ON folded (email COLLATE "C");
SELECT idem_versioned_update('folded', '{"email": "a@x"}', 0, '{}');
\echo :LAST_ERROR_SQLSTATE
CREATE UNIQUE INDEX ON folded (email);
SELECT idem_versioned_update('folded', '{"email": "a@x"}', 0, '{}') AS no_row;

-- A row the caller may see but not update (an UPDATE policy), or whose
-- update a BEFORE trigger skips, is not "another version": NULL.
CREATE TABLE regional (id int PRIMARY KEY, region text, version int NOT NULL DEFAULT 0);
INSERT INTO regional VALUES (1, 'eu', 0), (2, 'us', 0);
GRANT SELECT, UPDATE ON regional TO regress_idem_updater;
ALTER TABLE regional ENABLE ROW LEVEL SECURITY;
CREATE POLICY see_all ON regional FOR SELECT USING (true);
CREATE POLICY update_eu ON regional FOR UPDATE USING (region = 'eu');
SET ROLE regress_idem_updater;
SELECT idem_versioned_update('regional', '{"id": 2}', 0, '{}') AS not_updatable;
SELECT idem_versioned_update('regional', '{"id": 1}', 0, '{}') AS updatable;
RESET ROLE;
CREATE FUNCTION skip_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER skip BEFORE UPDATE ON regional FOR EACH ROW EXECUTE FUNCTION skip_update();
SELECT idem_versioned_update('regional', '{"id": 1}', 1, '{}') AS skipped;
SELECT * FROM regional ORDER BY id;

-- The cached statement follows its table through a schema rename, and a
-- new table with the old name is not touched.
CREATE SCHEMA app;
CREATE TABLE app.counters (id int PRIMARY KEY, n int, version int NOT NULL DEFAULT 0);
INSERT INTO app.counters VALUES (1, 0, 0);
SELECT idem_versioned_update('app.counters', '{"id": 1}', 0, '{"n": 1}') AS applied;
ALTER SCHEMA app RENAME TO app_old;
CREATE SCHEMA app;
CREATE TABLE app.counters (id int PRIMARY KEY, n int, version int NOT NULL DEFAULT 0);
INSERT INTO app.counters VALUES (1, 0, 1);
SELECT idem_versioned_update('app_old.counters', '{"id": 1}', 1, '{"n": 2}') AS applied;
SELECT 'app_old' AS schema, * FROM app_old.counters UNION ALL SELECT 'app', * FROM app.counters;

-- A role without USAGE on the schema is refused, also after another role's
-- call prepared the statement in this session.
GRANT SELECT, UPDATE ON app_old.counters TO regress_idem_updater;
SELECT 'app_old.counters'::regclass::oid AS counters_oid \gset
SET ROLE regress_idem_updater;
SELECT idem_versioned_update(:counters_oid::oid, '{"id": 1}', 2, '{"n": 3}');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT * FROM app_old.counters;
-- Calls nest, and a nested call may replace the statement an outer call is
-- running or building: the outer call goes on with its own. Here a BEFORE
-- UPDATE trigger renames the version column, so that the nested call's
-- rebuild fails, and then skips the update: the outer call misses, finds
-- the row at its expected version, and runs its own update once more.
CREATE TABLE nested (k text PRIMARY KEY, n bigint, version int NOT NULL DEFAULT 0);
INSERT INTO nested VALUES ('a', 0, 0);
CREATE FUNCTION nest() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('regress.nested', true) = 'on' THEN RETURN NEW; END IF;
    PERFORM set_config('regress.nested', 'on', true);
    ALTER TABLE nested RENAME COLUMN version TO v2;
    BEGIN
        PERFORM idem_versioned_update('nested', '{"k": "a"}', 0, '{"n": 5}');
    EXCEPTION WHEN undefined_column THEN RAISE NOTICE 'the nested build failed';
    END;
    ALTER TABLE nested RENAME COLUMN v2 TO version;
    PERFORM set_config('regress.nested', 'off', true);
    RETURN NULL;
END $$;
CREATE TRIGGER nest BEFORE UPDATE ON nested FOR EACH ROW EXECUTE FUNCTION nest();
SELECT idem_versioned_update('nested', '{"k": "a"}', 0, '{"n": 5}') AS skipped;
DROP TABLE nested;
DROP FUNCTION nest();
-- A build that reads an index predicate runs its function, which calls
-- pg_idem (in a new session, where the index is loaded for the first time).
CREATE TABLE other (id int PRIMARY KEY);
CREATE FUNCTION zero() RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('regress.go', true) = 'on' THEN
        PERFORM idem_try_insert_row('other', '{"id": 1}');
    END IF;
    RETURN 0;
END $$;
CREATE TABLE predicated (id int NOT NULL, n int, version int NOT NULL DEFAULT 0);
CREATE UNIQUE INDEX predicated_positive ON predicated (id) WHERE id > zero();
ALTER TABLE predicated ADD PRIMARY KEY (id);
INSERT INTO predicated VALUES (1, 0, 0), (2, 0, 0);
\c
SET regress.go = on;
SELECT idem_versioned_update('predicated', '{"id": 1}', 0, '{"n": 7}') AS applied;
SELECT idem_versioned_update('predicated', '{"id": 2}', 0, '{"n": 7}') AS applied;
SELECT * FROM predicated ORDER BY id;
SELECT count(*) AS inserted_by_the_predicate FROM other;
RESET regress.go;
DROP TABLE predicated, other;
DROP FUNCTION zero();

DROP SCHEMA app, app_old CASCADE;
DROP TABLE limits, loose, orders CASCADE;
DROP TABLE deferred_key, folded, regional;
DROP FUNCTION skip_update();

-- A hostile "=" earlier in search_path is never used.
CREATE SCHEMA evil;
CREATE FUNCTION evil.always_true(int, int) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = int, RIGHTARG = int, FUNCTION = evil.always_true);
SET search_path = evil, public, pg_catalog;
SELECT idem_versioned_update('accounts', '{"id": 2}', 1, '{"balance": 5}') AS only_row_2;
RESET search_path;
SELECT id, balance, version FROM accounts ORDER BY id;

DROP SCHEMA evil CASCADE;
DROP VIEW accounts_view;
DROP TABLE accounts, docs;
DROP ROLE regress_idem_updater;

-- Calls with jsonb_build_object keys and changes are planned as calls of
-- idem_versioned_update_fields, which takes the fields as arguments and
-- converts each value as its JSON would have been: same rows, same errors.
CREATE DOMAIN positive AS int NOT NULL CHECK (VALUE > 0);
CREATE TABLE typed (id int PRIMARY KEY, code text UNIQUE, small smallint, big bigint,
                    amount numeric(6, 2), label text, short varchar(3), doc jsonb,
                    pos positive DEFAULT 1, version int NOT NULL DEFAULT 0);
INSERT INTO typed (id, code) VALUES (1, 'a'), (2, 'b');
-- (EXPLAIN VERBOSE prints a query identifier when pg_stat_statements is
-- preloaded.)
SET compute_query_id = off;
EXPLAIN (VERBOSE, COSTS OFF)
SELECT idem_versioned_update('typed', jsonb_build_object('id', 1), 0,
                             jsonb_build_object('label', 'x'::text, 'big', 5::bigint));
-- Left as written: a key given twice, a key that is not a constant, a value
-- of another type, no fields, a literal object.
EXPLAIN (VERBOSE, COSTS OFF)
SELECT idem_versioned_update('typed', jsonb_build_object('id', 1, 'id', 2), 0,
                             jsonb_build_object('big', 1)),
       idem_versioned_update('typed', jsonb_build_object(lower('ID'), 1), 0,
                             jsonb_build_object('big', 1)),
       idem_versioned_update('typed', jsonb_build_object('id', 1), 0,
                             jsonb_build_object('amount', 1.5)),
       idem_versioned_update('typed', jsonb_build_object('id', 1), 0, jsonb_build_object()),
       idem_versioned_update('typed', '{"id": 1}', 0, jsonb_build_object('big', 1));
-- Each value to each column, both ways.
SELECT idem_versioned_update('typed', jsonb_build_object('code', 'a'::text), 0,
                             jsonb_build_object('small', 7, 'big', 8::smallint, 'amount', 9::bigint,
                                                'label', 10, 'short', 'abc'::text,
                                                'doc', 'text'::text, 'pos', '11'::text)) AS applied;
SELECT idem_versioned_update('typed', '{"code": "b"}', 0,
                             '{"small": 7, "big": 8, "amount": 9, "label": 10, "short": "abc",
                               "doc": "text", "pos": "11"}') AS applied;
SELECT id, small, big, amount, label, short, doc, pos, version FROM typed ORDER BY id;
SELECT idem_versioned_update('typed', jsonb_build_object('id', 1), 1,
                             jsonb_build_object('small', 70000));
SELECT idem_versioned_update('typed', '{"id": 1}', 1, '{"small": 70000}');
SELECT idem_versioned_update('typed', jsonb_build_object('id', 1), 1,
                             jsonb_build_object('short', 'abcd'::text));
SELECT idem_versioned_update('typed', '{"id": 1}', 1, '{"short": "abcd"}');
SELECT idem_versioned_update('typed', jsonb_build_object('id', 1), 1,
                             jsonb_build_object('pos', NULL::int));
SELECT idem_versioned_update('typed', '{"id": 1}', 1, '{"pos": null}');
SELECT idem_versioned_update('typed', jsonb_build_object('id', 1), 1,
                             jsonb_build_object('pos', 0));
SELECT idem_versioned_update('typed', '{"id": 1}', 1, '{"pos": 0}');
SELECT idem_versioned_update('typed', jsonb_build_object('id', '1x'::text), 1,
                             jsonb_build_object('big', 1));
SELECT idem_versioned_update('typed', '{"id": "1x"}', 1, '{"big": 1}');
SELECT idem_versioned_update('typed', jsonb_build_object('id', NULL::int), 1,
                             jsonb_build_object('big', 1));
SELECT idem_versioned_update('typed', jsonb_build_object('id', 1), 1,
                             jsonb_build_object('nothing', 1));
-- A prepared call keeps up with the table: a column changing type, being
-- dropped, and the caller losing its privilege.
PREPARE set_big(int, int, bigint) AS
SELECT idem_versioned_update('typed', jsonb_build_object('id', $1), $2,
                             jsonb_build_object('big', $3));
EXECUTE set_big(1, 1, 100);
ALTER TABLE typed ALTER COLUMN big TYPE int;
EXECUTE set_big(1, 2, 3000000000);
EXECUTE set_big(1, 2, 200);
SELECT big, version FROM typed WHERE id = 1;
CREATE ROLE regress_idem_typed;
GRANT SELECT, UPDATE ON typed TO regress_idem_typed;
SET ROLE regress_idem_typed;
PREPARE set_label(int, int, text) AS
SELECT idem_versioned_update('typed', jsonb_build_object('id', $1), $2,
                             jsonb_build_object('label', $3));
EXECUTE set_label(1, 3, 'granted');
RESET ROLE;
REVOKE UPDATE ON typed FROM regress_idem_typed;
SET ROLE regress_idem_typed;
EXECUTE set_label(1, 4, 'revoked');
RESET ROLE;
ALTER TABLE typed DROP COLUMN big;
EXECUTE set_big(1, 4, 300);
SELECT label, version FROM typed WHERE id = 1;
-- A caller who may not execute idem_versioned_update gets no rewrite: the
-- call fails as written, also from a plan made before the REVOKE.
SET plan_cache_mode = force_generic_plan;
GRANT UPDATE ON typed TO regress_idem_typed;
SET ROLE regress_idem_typed;
PREPARE set_label_again(int, int, text) AS
SELECT idem_versioned_update('typed', jsonb_build_object('id', $1), $2,
                             jsonb_build_object('label', $3));
EXECUTE set_label_again(1, 4, 'again');
RESET ROLE;
-- (Rolled back, so that the function's privileges are left as installed.)
BEGIN;
REVOKE EXECUTE ON FUNCTION idem_versioned_update(regclass, jsonb, bigint, jsonb, name)
    FROM PUBLIC;
SET LOCAL ROLE regress_idem_typed;
SAVEPOINT denied;
EXECUTE set_label_again(1, 5, 'denied');
ROLLBACK TO denied;
SELECT idem_versioned_update('typed', jsonb_build_object('id', 1), 5,
                             jsonb_build_object('label', 'denied'::text));
ROLLBACK TO denied;
SELECT idem_versioned_update_fields('typed'::regclass, 1, 'id'::text, 1, 5::bigint, 1,
                                    'label'::text, 'by hand'::text, 'version'::name);
ROLLBACK;
SET ROLE regress_idem_typed;
EXECUTE set_label_again(1, 5, 'granted again');
RESET ROLE;
RESET plan_cache_mode;
DEALLOCATE set_label_again;
SELECT label, version FROM typed WHERE id = 1;
-- A miss reads the row's version through the unique index where that reads
-- what the SQL read would, and with SQL otherwise: a key wider than the
-- index, a caller with SELECT on some columns only, row-level security.
CREATE TABLE probed (id int PRIMARY KEY, region text NOT NULL, secret text,
                     version int NOT NULL DEFAULT 0);
INSERT INTO probed VALUES (1, 'eu', 's', 3);
SELECT idem_versioned_update('probed', '{"id": 1}', 2, '{}') AS replay;
SELECT idem_versioned_update('probed', '{"id": 1, "region": "eu"}', 2, '{}') AS wider_key_replay;
SELECT idem_versioned_update('probed', '{"id": 1, "region": "us"}', 2, '{}') AS wider_key_no_row;
GRANT SELECT (id, version), UPDATE (version) ON probed TO regress_idem_typed;
SET ROLE regress_idem_typed;
SELECT idem_versioned_update('probed', '{"id": 1}', 2, '{}') AS replay_by_columns;
SELECT idem_versioned_update('probed', '{"id": 1}', 3, '{}') AS applied_by_columns;
RESET ROLE;
GRANT SELECT, UPDATE ON probed TO regress_idem_typed;
ALTER TABLE probed ENABLE ROW LEVEL SECURITY;
CREATE POLICY us_only ON probed USING (region = 'us');
SET ROLE regress_idem_typed;
SELECT idem_versioned_update('probed', '{"id": 1}', 2, '{}') AS hidden_by_policy;
RESET ROLE;
SELECT * FROM probed;
DROP TABLE probed;
-- Called by hand with arguments no rewrite writes.
SELECT idem_versioned_update_fields('typed'::regclass, 1, 'id'::text, 1);
SELECT idem_versioned_update_fields('typed'::regclass, 1, 'id'::text, 2.5, 6::bigint, 0,
                                    'version'::name);
SELECT idem_versioned_update_fields('typed'::regclass, 1, 'id'::text, 1, 6::bigint, 2,
                                    'label'::text, 'label'::text, 'a'::text, 'b'::text,
                                    'version'::name);
SELECT idem_versioned_update_fields('typed', 1, 'id'::text, 1, 6::bigint, 0, 'version'::name);
SELECT idem_versioned_update_fields(VARIADIC ARRAY[1, 2]);
SELECT idem_versioned_update_fields('typed'::regclass, 1, 'id'::text, 1, 6::bigint, 1,
                                    'label'::text, 'by hand'::text, 'version'::name) AS applied;
DEALLOCATE set_big;
DEALLOCATE set_label;
DROP TABLE typed;
DROP DOMAIN positive;
DROP ROLE regress_idem_typed;

-- 48 fields in all (a key of one, 47 changes) are more arguments than the
-- sibling could take: the call stays as written, and works.
SELECT format('CREATE TABLE wide (%s, version bigint NOT NULL DEFAULT 0, PRIMARY KEY (c1))',
              string_agg(format('c%s integer', g), ', ' ORDER BY g))
FROM generate_series(1, 48) g \gexec
INSERT INTO wide (c1) VALUES (1);
SELECT format('SELECT idem_versioned_update(%L, jsonb_build_object(%L, 1), 0, '
              'jsonb_build_object(%s)) AS wide_applied',
              'wide', 'c1', string_agg(format('%L, %s', 'c' || g, g), ', ' ORDER BY g))
FROM generate_series(2, 48) g \gexec
SELECT c1, c2, c48, version FROM wide;
DROP TABLE wide;
