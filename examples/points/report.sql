-- One line for pattern :'pattern', after its consumers have finished:
--   ok|<line>|<concurrent>
-- ok is true when every message was consumed exactly once by the consumers,
-- the duplicates skipped (measured: calls that returned false) equal the
-- redeliveries, and every balance equals its exactly-once total (and, for
-- versioned, every version equals the user's number of orders).
-- concurrent: redeliveries whose processing overlapped in time with their
-- original's, on another consumer.
WITH
input AS (SELECT count(*) AS messages,
                 count(*) - count(DISTINCT order_id) AS redeliveries
          FROM messages),
measured AS (SELECT count(*) AS consumed,
                    count(*) FILTER (WHERE NOT applied) AS skipped,
                    count(*) FILTER (WHERE applied) AS applied
             FROM consumed WHERE pattern = :'pattern'),
balances AS (SELECT count(*) FILTER (WHERE u.points <> e.points) AS wrong,
                    count(*) FILTER (WHERE :'pattern' = 'versioned'
                                       AND u.version <> e.orders) AS wrong_versions,
                    sum(u.points) AS total, sum(e.points) AS expected_total
             FROM users u JOIN expected e USING (id)),
concurrent AS (SELECT count(*) AS n
               FROM messages r
               JOIN consumed cr ON cr.pattern = :'pattern' AND cr.seq = r.seq
               JOIN messages o ON o.order_id = r.order_id AND NOT o.redelivery
               JOIN consumed co ON co.pattern = :'pattern' AND co.seq = o.seq
               WHERE r.redelivery AND cr.consumer <> co.consumer
                 AND cr.started_at < co.finished_at AND co.started_at < cr.finished_at),
verdict AS (SELECT b.wrong = 0 AND b.total = b.expected_total AS balances_ok,
                   b.wrong_versions = 0 AND m.consumed = i.messages
                       AND m.skipped = i.redeliveries AS counts_ok
            FROM balances b, measured m, input i)
SELECT v.balances_ok AND v.counts_ok,
       format('%-10s: %s messages, %s redeliveries, %s duplicates skipped, '
              'balances == exactly-once totals: %s',
              :'pattern', i.messages, i.redeliveries, m.skipped,
              CASE WHEN v.balances_ok THEN 'yes' ELSE 'no' END)
       || CASE WHEN v.balances_ok THEN ''
               ELSE format(' (%s users differ; total %s, expected %s)',
                           b.wrong, b.total, b.expected_total) END,
       c.n
FROM input i, measured m, balances b, concurrent c, verdict v;
