-- The check of an asynchronous failover run (test/reliability/run failover),
-- on the promoted standby, once the client has written `stream` and `acked`.
-- psql variable :pattern (try_insert, try_insert_row, claim).
--
-- With asynchronous replication a commit the old primary acknowledged may
-- never have reached the standby: such an order is acknowledged (the broker
-- will not deliver it again) and absent. That is counted, not failed. What
-- must still hold is exactly once over what survived: each transaction whole
-- (every balance is the sum of the orders in `applied`, the witness written
-- with each effect; the dedup records are exactly those orders) and no order
-- applied twice. Prints the checks, "LOST|N" (acknowledged orders the new
-- primary does not have), and "SUMMARY|records expected|records|total
-- expected|total|ok" for the runner, where expected comes from `applied`.

\set ON_ERROR_STOP 1
\pset footer off
SELECT :'pattern' = 'try_insert' AS is_try_insert,
       :'pattern' = 'try_insert_row' AS is_try_insert_row,
       :'pattern' = 'claim' AS is_claim \gset

CREATE TEMP TABLE survived AS SELECT DISTINCT order_id FROM applied;

CREATE TEMP TABLE expected_accounts AS
SELECT a.id, coalesce(sum(s.amount), 0)::bigint AS balance
FROM accounts a
LEFT JOIN (survived JOIN stream s USING (order_id)) ON s.account = a.id
GROUP BY a.id;

CREATE TEMP TABLE checks (n serial, what text, expected bigint, actual bigint);

INSERT INTO checks (what, expected, actual) VALUES
    ('orders acknowledged (all of the stream)',
     (SELECT count(*) FROM stream), (SELECT count(*) FROM acked)),
    ('total of the balances (orders in applied)',
     (SELECT sum(balance) FROM expected_accounts), (SELECT sum(balance) FROM accounts)),
    ('accounts whose balance differs', 0,
     (SELECT count(*) FROM accounts a JOIN expected_accounts e USING (id)
      WHERE a.balance <> e.balance)),
    ('orders whose effect committed more than once', 0,
     (SELECT count(*) FROM (SELECT order_id FROM applied GROUP BY order_id
                            HAVING count(*) > 1) twice)),
    ('effects of orders not in the stream', 0,
     (SELECT count(*) FROM survived WHERE order_id NOT IN (SELECT order_id FROM stream)));

\if :is_try_insert
INSERT INTO checks (what, expected, actual) VALUES
    ('dedup records (idem_records, scope storm)',
     (SELECT count(*) FROM survived), (SELECT count(*) FROM idem_records WHERE scope = 'storm')),
    ('records without their effect', 0,
     (SELECT count(*) FROM idem_records r WHERE r.scope = 'storm'
      AND NOT EXISTS (SELECT FROM survived a WHERE a.order_id::text = r.key)));
\elif :is_try_insert_row
INSERT INTO checks (what, expected, actual) VALUES
    ('dedup records (rows in orders)',
     (SELECT count(*) FROM survived), (SELECT count(*) FROM orders)),
    ('rows in orders without their effect', 0,
     (SELECT count(*) FROM orders o WHERE NOT EXISTS (SELECT FROM survived a
                                                       WHERE a.order_id = o.order_id)));
\else
INSERT INTO checks (what, expected, actual) VALUES
    ('dedup records (idem_records, scope claim, completed)',
     (SELECT count(*) FROM survived),
     (SELECT count(*) FROM idem_records WHERE scope = 'claim' AND status = 'completed')),
    ('completed records without their effect', 0,
     (SELECT count(*) FROM idem_records r WHERE r.scope = 'claim' AND r.status = 'completed'
      AND NOT EXISTS (SELECT FROM survived a WHERE a.order_id::text = r.key)));
\endif

SELECT what AS "check", expected, actual,
       CASE WHEN expected = actual THEN 'ok'
            ELSE 'DIFFERS by ' || (actual - expected) END AS result
FROM checks ORDER BY n;

SELECT count(*) AS lost,
       coalesce(sum(s.amount), 0) AS lost_amount
FROM acked a JOIN stream s USING (order_id)
WHERE NOT EXISTS (SELECT FROM survived v WHERE v.order_id = a.order_id) \gset
\echo 'acknowledged orders the new primary does not have:' :lost '(their amounts add up to' :lost_amount ')'
\echo LOST| :lost

SELECT coalesce(bool_and(expected = actual), false) AS all_ok FROM checks \gset
SELECT 'SUMMARY|' || concat_ws('|',
           (SELECT expected FROM checks WHERE n = (SELECT min(n) FROM checks
                                                    WHERE what LIKE 'dedup records%')),
           (SELECT actual FROM checks WHERE n = (SELECT min(n) FROM checks
                                                  WHERE what LIKE 'dedup records%')),
           (SELECT expected FROM checks WHERE what LIKE 'total of the balances%'),
           (SELECT actual FROM checks WHERE what LIKE 'total of the balances%'),
           CASE WHEN :'all_ok'::boolean THEN 'ok' ELSE 'FAILED' END) AS summary \gset
\echo :summary
\if :all_ok
\echo RESULT ok
\else
\echo RESULT FAILED
\endif
