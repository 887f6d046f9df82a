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
SELECT idem_versioned_update('accounts', '{"id": 1}', 9223372036854775807, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT id, balance, status, version FROM accounts ORDER BY id;

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
