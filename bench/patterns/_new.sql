-- stream "new": every message is a new order id. Client c's n-th message is
-- order base + n*nc + c (nnew starts at 0 through -D nnew=0; pgbench keeps a
-- client's variables from one transaction to the next).
\set k :base + :nnew * :nc + :client_id
\set nnew :nnew + 1
