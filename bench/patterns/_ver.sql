-- stream "ver": optimistic locking. The consumer reads the user's row, then
-- sends "set user u's points to np if its version is still ev". The amount
-- added at version v is (u*31 + v) % 10 + 1, so the points are a function of
-- the version and the exactly-once check can recompute them.
-- About pct% of the messages are redeliveries: the message that moved the row
-- from version v-1 to v, sent again (ev = v-1, np = the current points); it
-- must change nothing. A concurrent update between the read and the write
-- makes a fresh message miss as well (not retried; both patterns alike).
\set u random(1, 10000)
SELECT points AS p, version AS v FROM users WHERE id = :u \gset
\if random(1, 100) <= :pct AND :v > 0
\set ev :v - 1
\set np :p
\else
\set ev :v
\set np :p + (:u * 31 + :v) % 10 + 1
\endif
