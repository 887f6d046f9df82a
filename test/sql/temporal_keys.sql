-- PostgreSQL 18's temporal keys: PRIMARY KEY (..., during WITHOUT OVERLAPS)
-- is a unique GiST index, and idem_versioned_update accepts it as it does a
-- btree one (`=` on its columns names at most one row). The read after a
-- miss must still compare periods with `=`: a key that no row has is
-- missing (NULL) even when its period overlaps a row's, never a version
-- mismatch (false, which a consumer takes for a replay). Before 18 there
-- are no temporal keys, and the test is skipped (temporal_keys_1.out). The
-- room is a range too, as GiST has no operator class for integer without
-- btree_gist.

SELECT current_setting('server_version_num')::int >= 180000 AS temporal_keys \gset
\if :temporal_keys
CREATE TABLE periods (room int4range, during int4range, price int,
                      version bigint NOT NULL DEFAULT 0,
                      PRIMARY KEY (room, during WITHOUT OVERLAPS));
INSERT INTO periods VALUES ('[1,2)', '[1,10)', 100, 5), ('[1,2)', '[10,20)', 200, 7);

-- A replay on a period that exists: false, nothing changed.
SELECT idem_versioned_update('periods', '{"room": "[1,2)", "during": "[10,20)"}', 3,
                             '{"price": 999}') AS replay;
-- Periods no row has, overlapping rows or inside one: missing.
SELECT idem_versioned_update('periods', '{"room": "[1,2)", "during": "[5,15)"}', 3,
                             '{"price": 999}') AS overlapping;
SELECT idem_versioned_update('periods', '{"room": "[1,2)", "during": "[2,3)"}', 3,
                             '{"price": 999}') AS inside;
SELECT idem_versioned_update('periods', jsonb_build_object('room', '[1,2)'::int4range,
                                                           'during', '[2,3)'::int4range), 3,
                             jsonb_build_object('price', 999)) AS inside_built;
-- A fresh message for an existing period applies.
SELECT idem_versioned_update('periods', '{"room": "[1,2)", "during": "[10,20)"}', 7,
                             '{"price": 250}') AS fresh;
SELECT * FROM periods ORDER BY during;
DROP TABLE periods;
\else
\echo 'no temporal keys before PostgreSQL 18'
\endif
