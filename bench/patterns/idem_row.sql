-- One statement: idem_try_insert_row into the same points_log as cte.sql.
WITH d AS (SELECT idem_try_insert_row('points_log',
                      jsonb_build_object('order_id', :k::bigint, 'user_id', :u::int,
                                         'points', :n::int)) AS first)
UPDATE users SET points = points + :n FROM d WHERE d.first AND id = :u;
