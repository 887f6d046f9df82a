-- A record's route (Citus, docs/citus.md) on one node: stored with the
-- record, and nothing else changes. idem_distribute refuses without Citus.
SET client_min_messages = warning;

-- Stored by idem_try_insert and idem_begin; the same key under another
-- route (or none) is the same record: a duplicate.
SELECT idem_try_insert('routed', 'order-1', NULL, 42) AS first,
       idem_try_insert('routed', 'order-1', NULL, 7) AS other_route,
       idem_try_insert('routed', 'order-1') AS no_route;
SELECT key, route FROM idem_records WHERE scope = 'routed' ORDER BY key;

SELECT status, token AS t FROM idem_begin('routed', 'claim-1', route => 42) \gset
\echo :status
SELECT status FROM idem_lookup('routed', 'claim-1', route => 42);
SELECT status FROM idem_lookup('routed', 'claim-1');
SELECT idem_complete('routed', 'claim-1', :'t', '{"ok": 1}', route => 42);
SELECT status, result FROM idem_begin('routed', 'claim-1');
SELECT key, status, route FROM idem_records WHERE scope = 'routed' ORDER BY key;

-- The operator tools take it too.
SELECT idem_forget('routed', 'order-1', 42) AS forgotten;
SELECT idem_try_insert('routed', 'order-1', NULL, 5) AS new_again;
SELECT route FROM idem_records WHERE scope = 'routed' AND key = 'order-1';

-- A batch takes one route per key.
SELECT * FROM idem_try_insert_many('routed-batch', ARRAY['a', 'b', 'a'], NULL, ARRAY[1, 2, 1]);
SELECT key, route FROM idem_records WHERE scope = 'routed-batch' ORDER BY key;
SELECT * FROM idem_try_insert_many('routed-batch', ARRAY['c', 'd'], routes => ARRAY[3]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_try_insert_many('routed-batch', ARRAY['c', 'd'], routes => ARRAY[3, NULL]);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS nothing_written FROM idem_records WHERE scope = 'routed-batch' AND key IN ('c', 'd');

-- A key recorded by a rolled-back transaction leaves no record.
BEGIN;
SELECT idem_try_insert('routed', 'rolled-back', NULL, 9);
ROLLBACK;
SELECT count(*) AS rolled_back_records FROM idem_records WHERE key = 'rolled-back';

-- idem_distribute: only where Citus is, by the owner.
CREATE TABLE accounts (id bigint PRIMARY KEY, points bigint NOT NULL);
SELECT idem_distribute('accounts');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS still_local FROM idem_records WHERE scope = 'routed';
CREATE ROLE regress_idem_router;
GRANT EXECUTE ON FUNCTION idem_distribute(regclass) TO regress_idem_router;
SET ROLE regress_idem_router;
SELECT idem_distribute('accounts');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP OWNED BY regress_idem_router;
DROP ROLE regress_idem_router;
DROP TABLE accounts;
