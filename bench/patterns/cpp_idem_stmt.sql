UPDATE users SET points = points + $2
WHERE id = $1 AND (SELECT idem_try_insert($4, $3))
