UPDATE users SET points = points + $2 WHERE id = $1
