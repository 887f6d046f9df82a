-- The managed table: its shape, and that only pg_idem's functions write it.

SELECT attname, format_type(atttypid, atttypmod) AS type, attnotnull
FROM pg_attribute
WHERE attrelid = 'idem_records'::regclass AND attnum > 0 AND NOT attisdropped
ORDER BY attnum;
SELECT enum_range(NULL::idem_status);
SELECT indexrelid::regclass, indisunique, pg_get_indexdef(indexrelid)
FROM pg_index WHERE indrelid = 'idem_records'::regclass;

-- Key ids: a short (scope, key) is stored exactly; a long one as 0x01 and
-- its SHA-256, which PostgreSQL's own sha256() must agree with.
SELECT idem_try_insert('ids', 'order-1'), idem_try_insert('ids', repeat('k', 100));
SELECT key_id, length(key_id) AS bytes FROM idem_records WHERE scope = 'ids' ORDER BY bytes;
SELECT encode(key_id, 'hex') = '01' || encode(sha256('\x00000003'::bytea || 'ids'::bytea
                                                     || convert_to(repeat('k', 100), 'UTF8')), 'hex')
       AS long_id_is_sha256
FROM idem_records WHERE scope = 'ids' AND length(key_id) = 33;

-- A role with nothing granted cannot read, write or claim.
CREATE ROLE regress_idem_nobody;
-- A consumer role, granted what the README says to grant.
CREATE ROLE regress_idem_consumer;
GRANT EXECUTE ON FUNCTION idem_try_insert(text, text, interval) TO regress_idem_consumer;
SELECT idem_grant('acl', 'regress_idem_consumer') AS scope_granted;

SET ROLE regress_idem_nobody;
SELECT count(*) FROM idem_records;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO idem_records (key_id, scope, key, status, recorded_at, expires_at)
VALUES ('\x00', 's', 'k', 'completed', now(), now());
\echo :LAST_ERROR_SQLSTATE
SELECT idem_try_insert('acl', 'k');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

SET ROLE regress_idem_consumer;
SELECT idem_try_insert('acl', 'k') AS consumer_claims, idem_try_insert('acl', 'k') AS again;
DELETE FROM idem_records;
\echo :LAST_ERROR_SQLSTATE
UPDATE idem_records SET expires_at = now();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

SELECT scope, key, status FROM idem_records WHERE scope = 'acl';

-- Dropping and recreating the extension in the same session works.
DROP EXTENSION pg_idem;
CREATE EXTENSION pg_idem;
SELECT idem_try_insert('acl', 'k') AS after_recreate;

DROP ROLE regress_idem_nobody;
REVOKE ALL ON FUNCTION idem_try_insert(text, text, interval) FROM regress_idem_consumer;
DROP ROLE regress_idem_consumer;
DELETE FROM idem_records WHERE scope = 'acl';
