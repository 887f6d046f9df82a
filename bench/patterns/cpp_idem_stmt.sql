WITH d AS (SELECT idem_try_insert($4, $3) AS first)
UPDATE users SET points = points + $2 FROM d WHERE d.first AND id = $1
