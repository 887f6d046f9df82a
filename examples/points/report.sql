-- One line for pattern :'pattern', after its consumers have finished:
--   ok|<line>|<elsewhere>|<concurrent>|<problems>
-- <line> says whether every balance (and their sum) equals its exactly-once
-- total. ok is true when, besides, every message was consumed once, the
-- duplicates skipped (measured: the calls that returned false) equal the
-- redeliveries, for versioned every version equals the user's number of
-- orders, and for the other two some redeliveries really were processed
-- while their original was. <problems> lists what failed.
-- elsewhere: redeliveries consumed by another consumer than their original;
-- concurrent: those of them whose processing overlapped in time with the
-- original's.
WITH
input AS (SELECT count(*) AS messages,
                 count(*) - count(DISTINCT order_id) AS redeliveries
          FROM messages),
measured AS (SELECT count(*) AS consumed,
                    count(*) FILTER (WHERE NOT applied) AS skipped
             FROM consumed WHERE pattern = :'pattern'),
balances AS (SELECT count(*) FILTER (WHERE u.points <> e.points) AS wrong,
                    count(*) FILTER (WHERE :'pattern' = 'versioned'
                                       AND u.version <> e.orders) AS wrong_versions,
                    sum(u.points) AS total, sum(e.points) AS expected_total
             FROM users u JOIN expected e USING (id)),
concurrent AS (SELECT count(*) AS elsewhere,
                      count(*) FILTER (WHERE cr.started_at < co.finished_at
                                         AND co.started_at < cr.finished_at) AS n
               FROM messages r
               JOIN consumed cr ON cr.pattern = :'pattern' AND cr.seq = r.seq
               JOIN messages o ON o.order_id = r.order_id AND NOT o.redelivery
               JOIN consumed co ON co.pattern = :'pattern' AND co.seq = o.seq
               WHERE r.redelivery AND cr.consumer <> co.consumer),
verdict AS (SELECT b.wrong = 0 AND b.total = b.expected_total AS balances_ok,
                   concat_ws('; ',
                       CASE WHEN m.consumed <> i.messages
                            THEN format('%s messages consumed, not %s', m.consumed, i.messages) END,
                       CASE WHEN m.skipped <> i.redeliveries
                            THEN format('%s skipped, not %s', m.skipped, i.redeliveries) END,
                       CASE WHEN b.wrong_versions <> 0
                            THEN format('%s users with a wrong version', b.wrong_versions) END,
                       CASE WHEN :'pattern' <> 'versioned' AND c.n = 0
                            THEN 'no redelivery was processed while its original was' END,
                       CASE WHEN b.wrong <> 0 OR b.total <> b.expected_total
                            THEN format('%s users differ; total %s, expected %s',
                                        b.wrong, b.total, b.expected_total) END) AS problems
            FROM balances b, measured m, input i, concurrent c)
SELECT v.problems = '',
       format('%-10s: %s messages, %s redeliveries, %s duplicates skipped, '
              'balances == exactly-once totals: %s',
              :'pattern', i.messages, i.redeliveries, m.skipped,
              CASE WHEN v.balances_ok THEN 'yes' ELSE 'no' END),
       c.elsewhere,
       c.n,
       v.problems
FROM input i, measured m, concurrent c, verdict v;
