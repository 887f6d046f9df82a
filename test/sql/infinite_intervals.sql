-- PostgreSQL 17 made 'infinity' and '-infinity' intervals. pg_idem takes
-- them as the longest and the most negative of intervals: a wait of
-- 'infinity' is capped like any wait beyond a century, so it waits for the
-- holder's lease and then takes over; a ttl or lease of 'infinity' is over
-- the limit, and '-infinity' is negative: refused (22023), nothing written.
-- Before 17 'infinity' is not an interval, and the input is refused
-- (22007; infinite_intervals.out, while 17 and later give
-- infinite_intervals_1.out). Each error is followed by its SQLSTATE.

SELECT status, attempt FROM idem_begin('inf-wait', 'k', lease => '300 milliseconds');
SELECT clock_timestamp() AS before \gset
SELECT status, attempt FROM idem_begin('inf-wait', 'k', wait => 'infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT clock_timestamp() - :'before' < interval '1 minute' AS ended_at_the_lease;

SELECT * FROM idem_begin('inf', 'k', wait => '-infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('inf', 'k', lease => 'infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('inf', 'k', ttl => 'infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_begin('inf', 'k', ttl => '-infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert('inf', 'k', 'infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert('inf', 'k', '-infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_try_insert_many('inf', ARRAY['a', 'b'], 'infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT scope FROM idem_configure('inf', ttl => 'infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT scope FROM idem_configure('inf', lease => '-infinity');
\echo :LAST_ERROR_SQLSTATE

-- Nothing was written for scope 'inf'.
SELECT count(*) AS inf_records FROM idem_records WHERE scope = 'inf';
SELECT count(*) AS inf_scopes FROM idem_scopes WHERE scope = 'inf';
DELETE FROM idem_records WHERE scope = 'inf-wait';
