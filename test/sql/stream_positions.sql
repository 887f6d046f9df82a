-- idem_advance, idem_position, idem_stream_positions, idem_reset_stream:
-- dedup by stream position (README "Stream positions").

-- A plain high-water mark (window 0): only positions above it are new.
SELECT idem_position('orders', 0) AS before_anything;
SELECT idem_advance('orders', 0, 10) AS first;
SELECT idem_advance('orders', 0, 10) AS replay;
SELECT idem_advance('orders', 0, 11) AS next;
SELECT idem_advance('orders', 0, 5) AS older;
SELECT idem_advance('orders', 0, 100) AS jump;
SELECT idem_position('orders', 0) AS position;

-- Parts are independent; position 0 is a position like any other.
SELECT idem_advance('orders', 1, 0) AS part1_first;
SELECT idem_advance('orders', 1, 0) AS part1_replay;
SELECT idem_position('orders', 1) AS part1_position;

-- A window of 8: out-of-order delivery inside it is accepted once.
SELECT p, idem_advance('payments', 0, p, 8) AS accepted
FROM unnest(ARRAY[20, 18, 19, 18, 20, 12, 11, 21, 13, 13]) WITH ORDINALITY AS d(p, n)
ORDER BY n;
SELECT idem_position('payments', 0) AS position;
-- 21 is the mark; 18, 19, 20, 13 lie in the window (13..20); 12 has
-- slid out, 11 was too old when it came.
SELECT stream, part, position, window_size, window_seen
FROM idem_stream_positions WHERE stream = 'payments';

-- Growing the window: positions newly covered have an unknown past and
-- are taken as seen; shrinking forgets the oldest.
SELECT idem_advance('grow', 0, 100, 4) AS a,
       idem_advance('grow', 0, 90, 16) AS newly_covered_rejected,
       idem_advance('grow', 0, 101, 16) AS above_accepted,
       idem_advance('grow', 0, 99, 16) AS in_old_window_accepted;

-- In a transaction: a rolled-back advance is forgotten.
BEGIN;
SELECT idem_advance('tx', 0, 1) AS in_tx;
ROLLBACK;
SELECT idem_position('tx', 0) AS after_rollback;
SELECT idem_advance('tx', 0, 1) AS accepted_again;

-- Bad input.
SELECT idem_advance(NULL, 0, 1);
SELECT idem_advance('s', NULL, 1);
SELECT idem_advance('s', 0, NULL);
SELECT idem_advance('s', 0, 1, NULL);
SELECT idem_advance('', 0, 1);
SELECT idem_advance('s', -1, 1);
SELECT idem_advance('s', 0, -1);
SELECT idem_advance('s', 0, 1, -1);
SELECT idem_advance('s', 0, 1, 8193);
SELECT idem_position(NULL, 0);
SELECT idem_stream_window_seen('\x00'::bytea);
SELECT idem_reset_stream(NULL);
SELECT idem_position('never', 0) IS NULL AS unknown_is_null;
-- Nothing was written by the failed calls.
SELECT count(*) AS streams_named_s FROM idem_streams WHERE stream IN ('s', '');
-- The largest window is accepted.
SELECT idem_advance('wide', 0, 1, 8192) AS widest;

-- Read-only transactions cannot advance.
BEGIN READ ONLY;
SELECT idem_advance('ro', 0, 1);
ROLLBACK;

-- Privileges: nothing is granted to PUBLIC.
CREATE ROLE idem_stream_consumer;
SET ROLE idem_stream_consumer;
SELECT idem_advance('orders', 0, 1000);
SELECT idem_position('orders', 0);
SELECT * FROM idem_stream_positions;
SELECT idem_reset_stream('orders');
RESET ROLE;
GRANT EXECUTE ON FUNCTION idem_advance(text, integer, bigint, integer),
                          idem_position(text, integer) TO idem_stream_consumer;
-- EXECUTE alone is not enough: the stream must be granted too.
SET ROLE idem_stream_consumer;
SELECT idem_advance('orders', 0, 1000);
RESET ROLE;
SELECT idem_grant('orders', 'idem_stream_consumer') AS stream_granted;
SET ROLE idem_stream_consumer;
SELECT idem_advance('orders', 0, 1000) AS granted;
SELECT idem_position('orders', 0) AS granted_position;
SELECT * FROM idem_streams;
SELECT idem_reset_stream('orders');
RESET ROLE;
SELECT idem_revoke('orders', 'idem_stream_consumer') AS stream_revoked;
DROP OWNED BY idem_stream_consumer;
DROP ROLE idem_stream_consumer;

-- Reset: one part, then the whole stream.
SELECT idem_reset_stream('orders', 1) AS one_part;
SELECT idem_advance('orders', 1, 0) AS part1_new_again;
SELECT idem_reset_stream('orders') AS all_parts;
SELECT idem_reset_stream('orders') AS nothing_left;
SELECT idem_advance('orders', 0, 3) AS new_again;

-- Storage stays one row per part whatever the traffic.
SELECT count(*) FILTER (WHERE idem_advance('busy', 7, p, 64)) AS accepted
FROM generate_series(1, 5000) p;
SELECT count(*) AS rows_for_busy, max(octet_length(window_state)) AS state_bytes
FROM idem_streams WHERE stream = 'busy';

SELECT idem_reset_stream(stream) FROM (SELECT DISTINCT stream FROM idem_streams) s ORDER BY 1;

-- idem_streams changed by an operator. idem_advance writes it below SQL: a
-- column added keeps its value, and one dropped and added again is no
-- obstacle; another index would be left without entries, so it is refused
-- (55000), with nothing written.
ALTER TABLE idem_streams ADD COLUMN note text DEFAULT 'kept';
SELECT idem_advance('altered', 0, 1) AS first, idem_advance('altered', 0, 3) AS ahead,
       idem_advance('altered', 0, 2) AS behind, idem_advance('altered', 0, 2) AS replay;
SELECT position, note FROM idem_streams WHERE stream = 'altered';
ALTER TABLE idem_streams DROP COLUMN note;
ALTER TABLE idem_streams ADD COLUMN note2 integer DEFAULT 7;
SELECT idem_advance('altered', 0, 4) AS after_a_drop_and_an_add;
SELECT position, note2 FROM idem_streams WHERE stream = 'altered';
ALTER TABLE idem_streams DROP COLUMN note2;
CREATE INDEX idem_streams_by_position ON idem_streams (position);
SELECT idem_advance('altered', 0, 5);
\echo :LAST_ERROR_SQLSTATE
SELECT position FROM idem_streams WHERE stream = 'altered';
DROP INDEX idem_streams_by_position;
SELECT idem_advance('altered', 0, 5) AS after_the_index_went;
SELECT idem_reset_stream('altered');
