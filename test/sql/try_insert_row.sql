-- idem_try_insert_row: the unique-constraint pattern on the caller's table.

CREATE TABLE points_log (
    order_id  bigint PRIMARY KEY,
    user_id   int NOT NULL,
    points    int NOT NULL CHECK (points > 0),
    note      varchar(10),
    payload   jsonb,
    logged_at timestamptz NOT NULL DEFAULT '2026-01-01 00:00:00+00'
);
CREATE TABLE users (id int PRIMARY KEY, points int NOT NULL DEFAULT 0);
INSERT INTO users VALUES (1, 0), (2, 0);

-- New, then duplicate; omitted columns take their defaults.
SELECT idem_try_insert_row('points_log', '{"order_id": 1, "user_id": 1, "points": 5}') AS first,
       idem_try_insert_row('points_log', '{"order_id": 1, "user_id": 1, "points": 5}') AS again;
SELECT * FROM points_log;

-- In one statement with the business write.
WITH d AS (SELECT idem_try_insert_row('points_log',
                  '{"order_id": 2, "user_id": 2, "points": 7}') AS first)
UPDATE users SET points = points + 7 FROM d WHERE d.first AND id = 2;
WITH d AS (SELECT idem_try_insert_row('points_log',
                  '{"order_id": 2, "user_id": 2, "points": 7}') AS first)
UPDATE users SET points = points + 7 FROM d WHERE d.first AND id = 2;
SELECT * FROM users ORDER BY id;

-- Values are converted to the column types; JSON columns take JSON.
SELECT idem_try_insert_row('points_log', '{"order_id": "3", "user_id": 1.0e0, "points": 1,
       "note": "short", "payload": {"a": [1, 2]}, "logged_at": "2026-06-01 12:00+00"}');
SELECT idem_try_insert_row('points_log', '{"order_id": 4, "user_id": 1, "points": 1,
       "note": null, "payload": "just a string"}');
SELECT order_id, user_id, note, payload, logged_at FROM points_log WHERE order_id IN (3, 4)
ORDER BY order_id;

-- A conflict on any unique index counts, not only the primary key.
CREATE TABLE emails (id serial PRIMARY KEY, message_id text UNIQUE, body text);
SELECT idem_try_insert_row('emails', '{"message_id": "m-1", "body": "hello"}') AS first,
       idem_try_insert_row('emails', '{"message_id": "m-1", "body": "hello"}') AS again;
SELECT message_id, body FROM emails;

-- A rolled-back insert frees the key.
BEGIN;
SELECT idem_try_insert_row('points_log', '{"order_id": 5, "user_id": 1, "points": 1}');
ROLLBACK;
SELECT idem_try_insert_row('points_log', '{"order_id": 5, "user_id": 1, "points": 1}')
    AS after_rollback;

-- Plans survive ALTER TABLE: a new column, a changed type, a dropped column.
SELECT idem_try_insert_row('points_log', '{"order_id": 6, "user_id": 1, "points": 1}');
ALTER TABLE points_log ADD COLUMN source text DEFAULT 'kafka';
SELECT idem_try_insert_row('points_log', '{"order_id": 7, "user_id": 1, "points": 1}');
ALTER TABLE points_log ALTER COLUMN user_id TYPE text;
SELECT idem_try_insert_row('points_log', '{"order_id": 8, "user_id": "u-1", "points": 1}');
ALTER TABLE points_log DROP COLUMN note;
SELECT idem_try_insert_row('points_log', '{"order_id": 9, "note": "x", "user_id": 1, "points": 1}');
\echo :LAST_ERROR_SQLSTATE
SELECT order_id, user_id, source FROM points_log WHERE order_id >= 6 ORDER BY order_id;

-- Triggers fire and row-level security applies, as for a plain INSERT.
CREATE TABLE audit (order_id bigint);
CREATE FUNCTION audit_insert() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN INSERT INTO audit VALUES (NEW.order_id); RETURN NEW; END $$;
CREATE TRIGGER points_log_audit AFTER INSERT ON points_log
    FOR EACH ROW EXECUTE FUNCTION audit_insert();
SELECT idem_try_insert_row('points_log', '{"order_id": 10, "user_id": "1", "points": 1}'),
       idem_try_insert_row('points_log', '{"order_id": 10, "user_id": "1", "points": 1}');
SELECT * FROM audit;

CREATE ROLE regress_idem_writer;
CREATE TABLE tenant_log (order_id int PRIMARY KEY, tenant text NOT NULL);
GRANT SELECT, INSERT ON tenant_log TO regress_idem_writer;
ALTER TABLE tenant_log ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_tenant ON tenant_log USING (tenant = 'a') WITH CHECK (tenant = 'a');
SET ROLE regress_idem_writer;
SELECT idem_try_insert_row('tenant_log', '{"order_id": 1, "tenant": "a"}') AS allowed;
SELECT idem_try_insert_row('tenant_log', '{"order_id": 2, "tenant": "b"}') AS forbidden;
\echo :LAST_ERROR_SQLSTATE
-- No privilege on the table: 42501.
SELECT idem_try_insert_row('points_log', '{"order_id": 11, "user_id": "1", "points": 1}');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT * FROM tenant_log;

-- Bad input: a clear error, and nothing written.
SELECT idem_try_insert_row(NULL, '{"order_id": 12}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert_row('points_log', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert_row('points_log', '[1, 2]');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert_row('points_log', '42');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert_row('no_such_table', '{"order_id": 12}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert_row(999999999::oid::regclass, '{"order_id": 12}');
\echo :LAST_ERROR_SQLSTATE
CREATE VIEW points_view AS SELECT * FROM points_log;
SELECT idem_try_insert_row('points_view', '{"order_id": 12}');
\echo :LAST_ERROR_SQLSTATE
CREATE SEQUENCE some_seq;
SELECT idem_try_insert_row('some_seq', '{"order_id": 12}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert_row('points_log', '{"order_id": 12, "no_such_column": 1}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert_row('points_log', '{"order_id": 12, "ctid": "(0,1)"}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert_row('points_log', '{"order_id": "twelve", "user_id": "1", "points": 1}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert_row('points_log', '{"order_id": 12, "user_id": "1", "points": [1]}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert_row('points_log', '{"order_id": 12, "user_id": "1", "points": 0}');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert_row('points_log', '{"order_id": 12, "user_id": null, "points": 1}');
\echo :LAST_ERROR_SQLSTATE
-- Identifiers are quoted, never spliced into SQL.
SELECT idem_try_insert_row('points_log',
       '{"order_id) VALUES (1); DROP TABLE users; --": 1}');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS users_still_there FROM users;
SELECT count(*) AS rows_from_bad_calls FROM points_log WHERE order_id = 12;

-- A table whose name and columns need quoting.
CREATE TABLE "Odd Table" ("Order Id" int PRIMARY KEY, "select" text);
SELECT idem_try_insert_row('"Odd Table"', '{"Order Id": 1, "select": "x"}'),
       idem_try_insert_row('"Odd Table"', '{"Order Id": 1, "select": "y"}');
SELECT * FROM "Odd Table";

-- Numbers keep their scale in a numeric or text column; 1.0 still fits an
-- integer column.
CREATE TABLE money_log (id int PRIMARY KEY, amount numeric, ref text);
SELECT idem_try_insert_row('money_log', '{"id": 1.0, "amount": 10.50, "ref": 1.10}');
SELECT * FROM money_log;
SELECT * FROM jsonb_populate_record(NULL::money_log, '{"id": 1, "amount": 10.50, "ref": 1.10}');

-- The cached statement follows its table through a schema rename, and a
-- new table with the old name gets nothing.
CREATE SCHEMA ledger;
CREATE TABLE ledger.entries (id int PRIMARY KEY, v text);
SELECT idem_try_insert_row('ledger.entries', '{"id": 1, "v": "a"}');
ALTER SCHEMA ledger RENAME TO ledger_old;
CREATE SCHEMA ledger;
CREATE TABLE ledger.entries (id int PRIMARY KEY, v text);
SELECT idem_try_insert_row('ledger_old.entries', '{"id": 2, "v": "b"}');
SELECT 'ledger_old' AS schema, * FROM ledger_old.entries
UNION ALL SELECT 'ledger', * FROM ledger.entries ORDER BY 1, 2;

-- A role without USAGE on the schema is refused, as a plain INSERT is,
-- also after another role's call prepared the statement in this session.
GRANT INSERT ON ledger_old.entries TO regress_idem_writer;
SELECT 'ledger_old.entries'::regclass::oid AS entries_oid \gset
SET ROLE regress_idem_writer;
SELECT idem_try_insert_row(:entries_oid::oid, '{"id": 3, "v": "c"}');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT count(*) AS rows_in_ledger_old FROM ledger_old.entries;

-- A trigger of the target that changes the table and inserts through the
-- function again (a parent row first): the outer call's statement is
-- rebuilt under it, and both rows land.
CREATE TABLE tree (id int PRIMARY KEY, parent int);
CREATE FUNCTION ensure_parent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.parent IS NOT NULL THEN
        GRANT SELECT ON tree TO regress_idem_writer; -- a relcache invalidation of tree
        PERFORM idem_try_insert_row('tree', jsonb_build_object('id', NEW.parent, 'parent', NULL));
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER tree_parent BEFORE INSERT ON tree FOR EACH ROW EXECUTE FUNCTION ensure_parent();
SELECT idem_try_insert_row('tree', '{"id": 2, "parent": 1}'),
       idem_try_insert_row('tree', '{"id": 3, "parent": 1}');
SELECT * FROM tree ORDER BY id;

-- Calls that fail to build (an unknown column each time) leave no
-- statement behind.
DO $$
BEGIN
    FOR i IN 1..200 LOOP
        BEGIN
            PERFORM idem_try_insert_row('money_log', jsonb_build_object('id', i, 'garbage_' || i, 1));
        EXCEPTION WHEN undefined_column THEN NULL;
        END;
    END LOOP;
END $$;
SELECT count(*) < 20 AS few_statements FROM pg_backend_memory_contexts
WHERE name = 'pg_idem statement';

-- A domain CHECK that calls the function again, on the same statement:
-- each call converts its values with its own copy of the input function,
-- so the outer value is still checked.
CREATE FUNCTION hook(v text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('regress.nest', true) = 'on' THEN
        PERFORM set_config('regress.nest', 'off', true);
        PERFORM idem_try_insert_row('checked', jsonb_build_object('id', 2, 'd', 'good'));
    END IF;
    RETURN true;
END $$;
CREATE DOMAIN checked_text AS text CHECK (hook(VALUE) AND VALUE <> 'bad');
CREATE TABLE checked (id int PRIMARY KEY, d checked_text);
SELECT idem_try_insert_row('checked', '{"id": 0, "d": "fine"}');
SET regress.nest = on;
SELECT idem_try_insert_row('checked', '{"id": 1, "d": "bad"}');
\echo :LAST_ERROR_SQLSTATE
RESET regress.nest;
SELECT * FROM checked ORDER BY id;
DROP TABLE checked;
DROP DOMAIN checked_text;
DROP FUNCTION hook(text);

-- Statements of dropped tables are freed, not kept for the session.
CREATE PROCEDURE churn() LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..50 LOOP
        EXECUTE format('CREATE TABLE churn_%s (id int PRIMARY KEY)', i);
        PERFORM idem_try_insert_row(format('churn_%s', i)::regclass, '{"id": 1}');
        EXECUTE format('DROP TABLE churn_%s', i);
        COMMIT;
    END LOOP;
END $$;
CALL churn();
SELECT count(*) < 20 AS few_statements FROM pg_backend_memory_contexts
WHERE name = 'pg_idem statement';
DROP PROCEDURE churn();

DROP SCHEMA ledger, ledger_old CASCADE;
DROP TABLE money_log, tree;
DROP FUNCTION ensure_parent();
DROP TABLE "Odd Table", tenant_log, audit, emails, points_log, users CASCADE;
DROP FUNCTION audit_insert();
DROP SEQUENCE some_seq;
DROP ROLE regress_idem_writer;

-- Rows given as jsonb_build_object calls are planned as calls of
-- idem_try_insert_row_fields, which takes the fields as arguments and
-- converts each value as its JSON would have been: same rows, same errors.
CREATE TABLE typed_log (id bigint PRIMARY KEY, n smallint, label varchar(3), doc json,
                        note text NOT NULL DEFAULT 'none');
-- (EXPLAIN VERBOSE prints a query identifier when pg_stat_statements is
-- preloaded.)
SET compute_query_id = off;
EXPLAIN (VERBOSE, COSTS OFF)
SELECT idem_try_insert_row('typed_log', jsonb_build_object('id', 1, 'label', 'x'::text));
EXPLAIN (VERBOSE, COSTS OFF)
SELECT idem_try_insert_row('typed_log', jsonb_build_object('id', 1, 'n', 2.0));
SELECT idem_try_insert_row('typed_log', jsonb_build_object('id', 1, 'n', 7::bigint,
                                                           'label', 12, 'doc', 'a"b'::text));
SELECT idem_try_insert_row('typed_log', '{"id": 2, "n": 7, "label": 12, "doc": "a\"b"}');
SELECT idem_try_insert_row('typed_log', jsonb_build_object('id', 1::smallint, 'n', 8));
SELECT * FROM typed_log ORDER BY id;
SELECT idem_try_insert_row('typed_log', jsonb_build_object('id', 3, 'n', 40000));
SELECT idem_try_insert_row('typed_log', '{"id": 3, "n": 40000}');
SELECT idem_try_insert_row('typed_log', jsonb_build_object('id', 3, 'note', NULL::text));
SELECT idem_try_insert_row('typed_log', '{"id": 3, "note": null}');
SELECT idem_try_insert_row('typed_log', jsonb_build_object('id', 3, 'nothing', 1));
-- A prepared call keeps up with the table.
PREPARE log_row(bigint, text) AS
SELECT idem_try_insert_row('typed_log', jsonb_build_object('id', $1, 'label', $2));
EXECUTE log_row(4, 'ab');
ALTER TABLE typed_log ALTER COLUMN label TYPE varchar(2);
EXECUTE log_row(5, 'abc');
EXECUTE log_row(5, 'ab');
ALTER TABLE typed_log DROP COLUMN label;
EXECUTE log_row(6, 'ab');
SELECT id FROM typed_log ORDER BY id;
DEALLOCATE log_row;
-- The values are evaluated in the order written, as jsonb_build_object
-- evaluates them (not in the order of the keys).
CREATE SEQUENCE typed_log_seq START 10;
EXPLAIN (VERBOSE, COSTS OFF)
SELECT idem_try_insert_row('typed_log', jsonb_build_object('note', nextval('typed_log_seq')::text,
                                                           'id', nextval('typed_log_seq')));
SELECT idem_try_insert_row('typed_log', jsonb_build_object('note', nextval('typed_log_seq')::text,
                                                           'id', nextval('typed_log_seq')));
SELECT id, note FROM typed_log WHERE id >= 10;
DROP SEQUENCE typed_log_seq;
-- Called by hand with arguments no rewrite writes.
SELECT idem_try_insert_row_fields('typed_log'::regclass, 1, 'id'::text, 1.5);
SELECT idem_try_insert_row_fields('typed_log'::regclass, 1, 'id'::text, 9, 'extra'::text);
SELECT idem_try_insert_row_fields('typed_log', 1, 'id'::text, 9);
SELECT idem_try_insert_row_fields('typed_log'::regclass, 1, 'id'::text, 9) AS inserted;
-- Revoking EXECUTE on idem_try_insert_row denies its rewritten calls, from
-- a plan made before, and its sibling called by hand. (Rolled back, so
-- that the function's privileges are left as installed.)
CREATE ROLE regress_idem_row_caller;
GRANT INSERT, SELECT ON typed_log TO regress_idem_row_caller;
SET plan_cache_mode = force_generic_plan;
SET ROLE regress_idem_row_caller;
PREPARE log_id(bigint) AS SELECT idem_try_insert_row('typed_log', jsonb_build_object('id', $1));
EXECUTE log_id(20);
RESET ROLE;
BEGIN;
REVOKE EXECUTE ON FUNCTION idem_try_insert_row(regclass, jsonb) FROM PUBLIC;
SET LOCAL ROLE regress_idem_row_caller;
SAVEPOINT denied;
EXECUTE log_id(21);
ROLLBACK TO denied;
SELECT idem_try_insert_row_fields('typed_log'::regclass, 1, 'id'::text, 21);
ROLLBACK;
SET ROLE regress_idem_row_caller;
EXECUTE log_id(21);
RESET ROLE;
RESET plan_cache_mode;
DEALLOCATE log_id;
REVOKE ALL ON typed_log FROM regress_idem_row_caller;
DROP ROLE regress_idem_row_caller;
DROP TABLE typed_log;

-- An object of 50 fields is as many arguments as jsonb_build_object takes,
-- and more than the sibling could: the call stays as written, and works.
SELECT format('CREATE TABLE wide_log (%s, PRIMARY KEY (c1))',
              string_agg(format('c%s integer', g), ', ' ORDER BY g))
FROM generate_series(1, 50) g \gexec
SELECT format('SELECT idem_try_insert_row(%L, jsonb_build_object(%s)) AS wide_inserted',
              'wide_log', string_agg(format('%L, %s', 'c' || g, g), ', ' ORDER BY g))
FROM generate_series(1, 50) g \gexec
SELECT c1, c25, c50 FROM wide_log;
DROP TABLE wide_log;
