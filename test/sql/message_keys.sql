-- idem_key and idem_fingerprint: computed keys and payload fingerprints
-- (README "Computed keys"; the vectors in test/vectors are checked by the
-- unit tests, a few of them again here through SQL).

-- Independent of key order, whitespace and number spelling.
SELECT idem_fingerprint('{"a": 1, "b": [1, 2]}') = idem_fingerprint('{"b":[1.0,2e0],"a":1}')
    AS same_fingerprint;
SELECT idem_fingerprint('{"a": 1}') = idem_fingerprint('{"a": 2}') AS different_payloads_collide;
SELECT length(idem_fingerprint('{}')) AS digest_length,
       idem_fingerprint('{}') ~ '^[0-9a-f]{64}$' AS lower_case_hex;
-- SHA-256 of the canonical text's UTF-8 (convert_to: a bytea literal would
-- read backslashes as escapes).
SELECT idem_fingerprint('{}') = encode(sha256(convert_to('{}', 'UTF8')), 'hex') AS empty_object,
       idem_fingerprint('[1, 1.50, "x"]') = encode(sha256(convert_to('[1,1.5,"x"]', 'UTF8')), 'hex') AS array;

-- Keys: the named fields only; the delivery timestamp does not matter.
SELECT idem_key('{"order": {"id": 42}, "customer": "a", "ts": "2026-01-01T00:00:00Z"}',
                'order.id', 'customer')
     = idem_key('{"customer": "a", "ts": "2026-12-02T10:11:12Z", "order": {"id": 42.0}}',
                'customer', 'order.id') AS same_key;
SELECT idem_key('{"order": {"id": 42}}', 'order.id')
     = encode(sha256(convert_to('{"order.id":42}', 'UTF8')), 'hex') AS key_is_digest_of_selected_fields;
SELECT idem_key('{"order": {"id": 42}}', 'order.id')
     = idem_key('{"order": {"id": 43}}', 'order.id') AS different_ids_collide;
-- Arrays by index, escaped dots, null is a value.
SELECT idem_key('{"items": [{"sku": "x"}, {"sku": "y"}]}', 'items.1.sku')
     = encode(sha256(convert_to('{"items.1.sku":"y"}', 'UTF8')), 'hex') AS array_index;
SELECT idem_key('{"a.b": 1}', 'a\.b') = encode(sha256(convert_to('{"a\\.b":1}', 'UTF8')), 'hex') AS escaped_dot;
SELECT idem_key('{"a": null}', 'a') = encode(sha256(convert_to('{"a":null}', 'UTF8')), 'hex') AS null_is_present;
-- Big integers keep every digit.
SELECT idem_key('{"id": 12345678901234567890}', 'id')
     = idem_key('{"id": 12345678901234567891}', 'id') AS big_ids_collide;

-- The shared test vectors (test/vectors, checked by the unit tests against
-- the C++ core) give the same digests through SQL, where the payload is
-- first a jsonb: every vector whose payload jsonb can hold (not \u0000).
\set keys `cat test/vectors/keys.json`
\set fingerprints `cat test/vectors/fingerprints.json`
CREATE FUNCTION pg_temp.as_jsonb(t text) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN RETURN t::jsonb; EXCEPTION WHEN untranslatable_character THEN RETURN NULL; END $$;
SELECT count(*) AS key_vectors,
       count(*) FILTER (WHERE idem_key(pg_temp.as_jsonb(v->>'payload'),
                                       VARIADIC ARRAY(SELECT jsonb_array_elements_text(v->'fields')))
                              = v->>'key') AS keys_equal
FROM jsonb_array_elements(:'keys'::jsonb) v WHERE v ? 'key';
SELECT count(*) AS fingerprint_vectors,
       count(*) FILTER (WHERE pg_temp.as_jsonb(v->>'payload') IS NULL) AS not_a_jsonb,
       count(*) FILTER (WHERE CASE WHEN pg_temp.as_jsonb(v->>'payload') IS NULL THEN false
                              ELSE idem_fingerprint(pg_temp.as_jsonb(v->>'payload'))
                                   = v->>'fingerprint' END) AS fingerprints_equal
FROM jsonb_array_elements(:'fingerprints'::jsonb) v WHERE v ? 'fingerprint';

-- A key feeds idem_try_insert directly.
SELECT idem_try_insert('computed', idem_key('{"order": 7, "ts": 1}', 'order')) AS first,
       idem_try_insert('computed', idem_key('{"ts": 2, "order": 7.0}', 'order')) AS redelivery;

-- Bad input: the missing field is named, never a silent NULL.
SELECT idem_key('{"order": {"id": 42}}', 'order.number');
SELECT idem_key('{"order": 42}', 'order.id');
SELECT idem_key('{"items": [1]}', 'items.1');
SELECT idem_key('{"a": 1}', 'a', 'a');
SELECT idem_key('{"a": 1}', '');
SELECT idem_key('{"a": 1}', 'a..b');
SELECT idem_key('{"a": 1}', 'a\b');
SELECT idem_key('{"a": 1}', VARIADIC ARRAY[]::text[]);
SELECT idem_key('{"a": 1}', VARIADIC NULL::text[]);
SELECT idem_key('{"a": 1}', 'a', NULL);
SELECT idem_key(NULL, 'a');
SELECT idem_fingerprint(NULL);
-- Beyond the canonical form's limits: nesting deeper than 1000 levels.
SELECT idem_fingerprint((repeat('[', 1001) || repeat(']', 1001))::jsonb);
SELECT length(idem_fingerprint((repeat('[', 1000) || repeat(']', 1000))::jsonb)) AS at_the_limit;
-- An error naming a long non-ASCII field is cut between characters, never
-- inside one, so that a handler can store and read it back.
CREATE TABLE key_errors (message text);
DO $$
BEGIN
    PERFORM idem_key('{"a": 1}', 'x' || repeat('é', 300));
EXCEPTION WHEN sql_json_member_not_found THEN
    INSERT INTO key_errors VALUES (SQLERRM);
END $$;
SELECT length(upper(message)) > 200 AS readable, message LIKE 'idem_key: field "xéé%' AS names_the_field
FROM key_errors;
DROP TABLE key_errors;
DELETE FROM idem_records WHERE scope = 'computed';
