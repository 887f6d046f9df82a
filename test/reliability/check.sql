-- The exactly-once check of one reliability run, after its consumers are
-- done and the client has written `stream` and `acked`. psql variable
-- :pattern (try_insert, try_insert_row, versioned, claim).
--
-- Expected: every account's balance is the sum of the amounts of the
-- distinct orders that some consumer acknowledged (saw the COMMIT of its
-- transaction succeed), and the dedup records are exactly those orders.
-- Prints one row per check, the accounts and orders that differ if any,
-- then a line "SUMMARY|records expected|records|total expected|total|ok"
-- for the runner, and "RESULT ok" or "RESULT FAILED".

\set ON_ERROR_STOP 1
\pset footer off
SELECT :'pattern' = 'try_insert' AS is_try_insert,
       :'pattern' = 'try_insert_row' AS is_try_insert_row,
       :'pattern' = 'versioned' AS is_versioned,
       :'pattern' = 'claim' AS is_claim \gset

CREATE TEMP TABLE expected_accounts AS
SELECT a.id, coalesce(sum(s.amount), 0)::bigint AS balance, count(s.order_id) AS orders
FROM accounts a
LEFT JOIN (acked JOIN stream s USING (order_id)) ON s.account = a.id
GROUP BY a.id;

CREATE TEMP TABLE checks (n serial, what text, expected bigint, actual bigint);

INSERT INTO checks (what, expected, actual) VALUES
    ('orders acknowledged (all of the stream)',
     (SELECT count(*) FROM stream), (SELECT count(*) FROM acked)),
    ('total of the balances',
     (SELECT sum(balance) FROM expected_accounts), (SELECT sum(balance) FROM accounts)),
    ('accounts whose balance differs', 0,
     (SELECT count(*) FROM accounts a JOIN expected_accounts e USING (id)
      WHERE a.balance <> e.balance)),
    ('effects committed (rows in applied)',
     (SELECT count(*) FROM acked), (SELECT count(*) FROM applied)),
    ('orders whose effect committed more than once', 0,
     (SELECT count(*) FROM (SELECT order_id FROM applied GROUP BY order_id
                            HAVING count(*) > 1) twice));

-- The dedup records: one per acknowledged order, nothing else.
\if :is_try_insert
INSERT INTO checks (what, expected, actual) VALUES
    ('dedup records (idem_records, scope storm)',
     (SELECT count(*) FROM acked), (SELECT count(*) FROM idem_records WHERE scope = 'storm')),
    ('records of orders never acknowledged', 0,
     (SELECT count(*) FROM idem_records r WHERE r.scope = 'storm'
      AND NOT EXISTS (SELECT FROM acked a WHERE a.order_id::text = r.key)));
\elif :is_try_insert_row
INSERT INTO checks (what, expected, actual) VALUES
    ('dedup records (rows in orders)',
     (SELECT count(*) FROM acked), (SELECT count(*) FROM orders)),
    ('rows in orders unlike an acknowledged order', 0,
     (SELECT count(*) FROM orders o
      WHERE NOT EXISTS (SELECT FROM acked a JOIN stream s USING (order_id)
                        WHERE s.order_id = o.order_id AND s.account = o.account
                          AND s.amount = o.amount)));
\elif :is_versioned
-- No dedup records: the version is the count of orders applied.
INSERT INTO checks (what, expected, actual) VALUES
    ('versions (sum over the accounts)',
     (SELECT sum(orders) FROM expected_accounts), (SELECT sum(version) FROM accounts)),
    ('accounts whose version differs', 0,
     (SELECT count(*) FROM accounts a JOIN expected_accounts e USING (id)
      WHERE a.version <> e.orders));
\else
INSERT INTO checks (what, expected, actual) VALUES
    ('dedup records (idem_records, scope claim, completed)',
     (SELECT count(*) FROM acked),
     (SELECT count(*) FROM idem_records WHERE scope = 'claim' AND status = 'completed')),
    ('claim records not completed', 0,
     (SELECT count(*) FROM idem_records WHERE scope = 'claim' AND status <> 'completed')),
    ('records of orders never acknowledged', 0,
     (SELECT count(*) FROM idem_records r WHERE r.scope = 'claim'
      AND NOT EXISTS (SELECT FROM acked a WHERE a.order_id::text = r.key))),
    -- What a consumer reads back: every acknowledged order completed, with
    -- the fingerprint of its payload and no token.
    ('acked orders idem_lookup answers otherwise', 0,
     (SELECT count(*) FROM acked a JOIN stream s USING (order_id),
                           LATERAL idem_lookup('claim', a.order_id::text) l
      WHERE l.status IS DISTINCT FROM 'completed' OR l.token IS NOT NULL
         OR l.fingerprint IS DISTINCT FROM format('order %s: account %s, amount %s',
                                                  s.order_id, s.account, s.amount)));
\endif

SELECT what AS "check", expected, actual,
       CASE WHEN expected = actual THEN 'ok'
            ELSE 'DIFFERS by ' || (actual - expected) END AS result
FROM checks ORDER BY n;

\if :is_claim
SELECT count(*) FILTER (WHERE attempts > 1) AS "keys claimed more than once",
       coalesce(sum(attempts - 1), 0) AS "takeovers and retries",
       max(attempts) AS "most attempts of a key"
FROM idem_records WHERE scope = 'claim';
\endif

SELECT coalesce(bool_and(expected = actual), false) AS all_ok FROM checks \gset
\if :all_ok
\else
\echo accounts that differ (first 10):
SELECT a.id AS account, e.balance AS expected, a.balance AS actual,
       a.balance - e.balance AS difference, e.orders AS "orders acked", a.version
FROM accounts a JOIN expected_accounts e USING (id)
WHERE a.balance <> e.balance OR (:'is_versioned'::boolean AND a.version <> e.orders)
ORDER BY a.id LIMIT 10;
\echo orders whose effect committed other than once (first 10):
SELECT s.order_id, s.account, s.amount, (a.order_id IS NOT NULL) AS acked,
       count(p.order_id) AS "effects committed", string_agg(p.consumer::text, ',') AS consumers
FROM stream s
LEFT JOIN acked a USING (order_id)
LEFT JOIN applied p USING (order_id)
GROUP BY s.order_id, s.account, s.amount, a.order_id
HAVING count(p.order_id) <> (a.order_id IS NOT NULL)::int
ORDER BY s.order_id LIMIT 10;
\endif

SELECT 'SUMMARY|' || concat_ws('|',
           (SELECT expected FROM checks WHERE n = (SELECT min(n) FROM checks
                                                    WHERE what LIKE 'dedup records%'
                                                       OR what LIKE 'versions%')),
           (SELECT actual FROM checks WHERE n = (SELECT min(n) FROM checks
                                                  WHERE what LIKE 'dedup records%'
                                                     OR what LIKE 'versions%')),
           (SELECT expected FROM checks WHERE what = 'total of the balances'),
           (SELECT actual FROM checks WHERE what = 'total of the balances'),
           CASE WHEN :'all_ok'::boolean THEN 'ok' ELSE 'FAILED' END) AS summary \gset
\echo :summary
\if :all_ok
\echo RESULT ok
\else
\echo RESULT FAILED
\endif
