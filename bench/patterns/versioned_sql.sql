-- Hand-written optimistic locking (after the read in _ver.sql).
UPDATE users SET points = :np, version = version + 1 WHERE id = :u AND version = :ev;
