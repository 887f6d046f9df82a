-- One statement: idem_try_insert_row into the same points_log as cte.sql,
-- as a subquery of the UPDATE's WHERE clause, as the README writes it (run
-- once, before any row is read; see idem_stmt.sql).
UPDATE users SET points = points + :n
WHERE id = :u AND (SELECT idem_try_insert_row('points_log',
                          jsonb_build_object('order_id', :k::bigint, 'user_id', :u::int,
                                             'points', :n::int)));
