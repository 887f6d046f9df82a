-- idem_begin of a key whose work is done: what a redelivery of a completed
-- message gets ('completed', with the attempt and the result). Stream "new"
-- (the run that records the keys of stream "dup") claims and completes each
-- key; stream "dup" finds it completed, from the duplicate cache when there
-- is one. pgbench compares numbers only, hence acquired as 0/1.
SELECT (status = 'acquired')::int AS acquired, coalesce(attempt, 0) AS attempt
FROM idem_begin(:scope, :k::text) \gset
\if :acquired
SELECT idem_complete(:scope, :k::text, :attempt);
\endif
