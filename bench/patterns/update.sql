-- The business write alone: no dedup at all (redeliveries are applied again).
UPDATE users SET points = points + :n WHERE id = :u;
