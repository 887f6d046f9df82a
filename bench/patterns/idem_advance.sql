-- Stream positions: each pgbench client owns a partition (its client_id)
-- and consumes its stream in order; the position is the order id of stream
-- "new", which grows per client. A window of 64 positions, as a consumer
-- that allows some out-of-order delivery would keep.
SELECT idem_advance(:scope, :client_id, :k, 64);
