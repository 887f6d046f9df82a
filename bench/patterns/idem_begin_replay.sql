-- idem_begin of a key whose work is done: what a redelivery of a completed
-- message gets ('completed', with the attempt and the result). Stream "new"
-- (the run that records the keys of stream "dup") claims and completes each
-- key with the claim's token; stream "dup" finds it completed, from the
-- duplicate cache when there is one. pgbench compares numbers only, hence
-- acquired as 0/1; a NULL token (not acquired) is set as ''.
SELECT (status = 'acquired')::int AS acquired, coalesce(token::text, '') AS token
FROM idem_begin(:scope, :k::text) \gset
\if :acquired
SELECT idem_complete(:scope, :k::text, :token::uuid);
\endif
