-- stream "msg": "add n points to user u for order k". About pct% of the
-- messages are redeliveries of an order this client already processed (and
-- committed) in this run; the others are new orders, numbered as in stream
-- "new". The user and the points are functions of the order id, so a
-- redelivery carries the same message, and the exactly-once check can
-- recompute every balance from the set of processed order ids
-- (bench.msg_user and bench.msg_points in bench/sql/setup.sql).
\if random(1, 100) <= :pct AND :nnew > 0
\set seq random(0, :nnew - 1)
\else
\set seq :nnew
\set nnew :nnew + 1
\endif
\set k :base + :seq * :nc + :client_id
\set u (:k % 10007) * 7919 % 10000 + 1
\set n :k % 10 + 1
