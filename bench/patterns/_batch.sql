-- stream "batch": bs messages per transaction, "add n points to user u for
-- order k" as in stream "msg", handed to the script as one batch
-- (bench.batch in bench/sql/setup.sql: the arrays k, u and n, shuffled).
-- bench/run gives bs (the number after "batch:" in bench/patterns.txt) and
-- nn, the new orders of each batch; the other nr = bs - nn (pct% of bs) are
-- redeliveries of orders this client has already been sent, mostly in
-- earlier (committed) batches. Client c's new orders are numbered as in
-- stream "new", nn a batch, so batch t of a client holds its orders
-- t*nn .. t*nn + nn - 1, and the exactly-once check can tell, from the
-- processed orders alone, which users each batch had to update.
\set nr :bs - :nn
\set seq0 :nnew
\set nnew :nnew + :nn
\set seed random(0, 1000000000)
