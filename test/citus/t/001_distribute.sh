#!/usr/bin/env bash
# idem_distribute, and the layout every later cluster test shares (run by
# test/citus/run):
#
#   wallets(id bigint PRIMARY KEY, points bigint NOT NULL DEFAULT 0),
#   distributed by id, ids 1..10000 with 0 points; idem_records distributed
#   by route, colocated with wallets; idem_scopes and idem_scope_grants
#   reference tables. Later tests use their own id ranges and scopes, never
#   call idem_distribute and never drop wallets.
#
# 1. Its refusals, each with its SQLSTATE, each leaving pg_idem's tables as
#    they were (none in pg_dist_partition, idem_records' primary key still
#    (key_id), route still nullable), with wallets itself a valid target:
#    a local table 22023; a table distributed by a text column 42804; a
#    reference table 22023; NULL 22004 (Citus is present, so the NULL check
#    is reached; a non-owner gets 42501 before it); a role with EXECUTE that
#    is not pg_idem's owner 42501; a record without a route 55000.
# 2. A record written with a route before distributing (route 7) survives
#    the distribution: it is still a duplicate, and lives on the shard of
#    route 7, on the worker that holds wallet 7.
# 3. After: idem_records is hash-distributed by route in wallets'
#    colocation group, idem_scopes and idem_scope_grants are reference
#    tables on every node, and a second idem_distribute is refused (55000).
set -euo pipefail
. "$(dirname "$0")/../testlib.sh"

# What a refusal must leave as it was: idem_records and the scope tables
# out of Citus's metadata, and idem_records' single-node shape.
untouched() {
	q coordinator "SELECT (SELECT count(*) FROM pg_dist_partition WHERE logicalrelid IN
			('idem_records'::regclass, 'idem_scopes'::regclass, 'idem_scope_grants'::regclass))
		|| '|' || (SELECT string_agg(a.attname, ',' ORDER BY k.n)
			FROM pg_constraint c, unnest(c.conkey) WITH ORDINALITY k(attnum, n), pg_attribute a
			WHERE c.conrelid = 'idem_records'::regclass AND c.contype = 'p'
			AND a.attrelid = c.conrelid AND a.attnum = k.attnum)
		|| '|' || (SELECT NOT attnotnull FROM pg_attribute
			WHERE attrelid = 'idem_records'::regclass AND attname = 'route')"
}
# The ports of the nodes that hold a placement of SHARD-OR-TABLE's shards.
# (citus_shards leaves out the tables of an extension, pg_idem's among them.)
ports() {
	q coordinator "SELECT string_agg(DISTINCT nodeport::text, ',')
		FROM pg_dist_shard JOIN pg_dist_placement USING (shardid) JOIN pg_dist_node USING (groupid)
		WHERE $1"
}
refused() { # refused DESC SQLSTATE SQL
	check "$1: SQLSTATE" "$2" "$(sqlstate coordinator "$3")"
	check "$1: pg_dist_partition rows|primary key|route nullable" "0|key_id|true" "$(untouched)"
}

echo "1. wallets, and the refusals"
q coordinator "CREATE TABLE wallets (id bigint PRIMARY KEY, points bigint NOT NULL DEFAULT 0)" >/dev/null
q coordinator "SELECT create_distributed_table('wallets', 'id')" >/dev/null
q coordinator "INSERT INTO wallets (id) SELECT g FROM generate_series(1, 10000) g" >/dev/null
check "wallets: rows|points" "10000|0" "$(q coordinator "SELECT count(*), sum(points) FROM wallets")"
check "wallets: workers holding its shards" 2 "$(q coordinator "SELECT count(DISTINCT nodeport)
	FROM pg_dist_shard JOIN pg_dist_placement USING (shardid) JOIN pg_dist_node USING (groupid)
	WHERE logicalrelid = 'wallets'::regclass")"
check "before: pg_dist_partition rows|primary key|route nullable" "0|key_id|true" "$(untouched)"

q coordinator "CREATE TABLE dist_local (id bigint PRIMARY KEY)" >/dev/null
refused "a local table" 22023 "SELECT idem_distribute('dist_local')"

q coordinator "CREATE TABLE dist_by_text (id text PRIMARY KEY)" >/dev/null
q coordinator "SELECT create_distributed_table('dist_by_text', 'id')" >/dev/null
refused "a table distributed by a text column" 42804 "SELECT idem_distribute('dist_by_text')"

q coordinator "CREATE TABLE dist_reference (id bigint PRIMARY KEY)" >/dev/null
q coordinator "SELECT create_reference_table('dist_reference')" >/dev/null
refused "a reference table" 22023 "SELECT idem_distribute('dist_reference')"

refused "NULL, as the superuser" 22004 "SELECT idem_distribute(NULL)"

# A role that may execute it but is not pg_idem's owner (owner check first,
# also before the NULL check).
q coordinator "CREATE ROLE dist_nonowner" >/dev/null
q coordinator "GRANT EXECUTE ON FUNCTION idem_distribute(regclass) TO dist_nonowner" >/dev/null
refused "wallets, by a non-owner with EXECUTE" 42501 \
	"SET ROLE dist_nonowner; SELECT idem_distribute('wallets')"
refused "NULL, by a non-owner with EXECUTE" 42501 \
	"SET ROLE dist_nonowner; SELECT idem_distribute(NULL)"

check "a record without a route, one with route 7: written" "t|t" \
	"$(q coordinator "SELECT idem_try_insert('pre', 'k'), idem_try_insert('pre', 'kept', NULL, 7)")"
refused "wallets, with a record without a route" 55000 "SELECT idem_distribute('wallets')"
check "the record without a route forgotten" t "$(q coordinator "SELECT idem_forget('pre', 'k')")"

echo "2. distributing, and the record of route 7"
q coordinator "SELECT idem_distribute('wallets')" >/dev/null
check "('pre', 'kept', route 7) again: first" f \
	"$(q coordinator "SELECT idem_try_insert('pre', 'kept', NULL, 7)")"
check "records of scope pre: key|route" "kept|7" \
	"$(q coordinator "SELECT string_agg(key || '|' || route, ',') FROM idem_records WHERE scope = 'pre'")"
shard=$(q coordinator "SELECT get_shard_id_for_distribution_column('idem_records', 7)")
check "shards holding scope pre's records (placements with a row)" "$shard" \
	"$(q coordinator "SELECT string_agg(shardid::text, ',') FROM run_command_on_placements('idem_records',
		\$\$SELECT count(*) FROM %s WHERE scope = 'pre'\$\$) WHERE result::bigint > 0")"
check "that shard's worker is wallet 7's" \
	"$(ports "shardid = get_shard_id_for_distribution_column('wallets', 7)")" "$(ports "shardid = $shard")"

echo "3. the distributed layout"
check "idem_records: partmethod|distribution column|colocation (wallets')" \
	"h|route|$(q coordinator "SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'wallets'::regclass")" \
	"$(q coordinator "SELECT partmethod, column_to_column_name(logicalrelid, partkey), colocationid
		FROM pg_dist_partition WHERE logicalrelid = 'idem_records'::regclass")"
check "idem_records' primary key, route NOT NULL" "route,key_id|t" \
	"$(q coordinator "SELECT (SELECT string_agg(a.attname, ',' ORDER BY k.n)
			FROM pg_constraint c, unnest(c.conkey) WITH ORDINALITY k(attnum, n), pg_attribute a
			WHERE c.conrelid = 'idem_records'::regclass AND c.contype = 'p'
			AND a.attrelid = c.conrelid AND a.attnum = k.attnum),
		(SELECT attnotnull FROM pg_attribute WHERE attrelid = 'idem_records'::regclass AND attname = 'route')")"
for t in idem_scopes idem_scope_grants; do
	check "$t: partmethod" n \
		"$(q coordinator "SELECT partmethod FROM pg_dist_partition WHERE logicalrelid = '$t'::regclass")"
	check "$t: placements on coordinator, worker1, worker2" \
		"$CITUS_COORDINATOR_PORT,$CITUS_WORKER1_PORT,$CITUS_WORKER2_PORT" "$(ports "logicalrelid = '$t'::regclass")"
done
check "idem_records' shards: on both workers, as many as wallets'" "$CITUS_WORKER1_PORT,$CITUS_WORKER2_PORT|t" \
	"$(ports "logicalrelid = 'idem_records'::regclass")|$(q coordinator "SELECT count(*) FILTER (WHERE logicalrelid = 'idem_records'::regclass)
		= count(*) FILTER (WHERE logicalrelid = 'wallets'::regclass) FROM pg_dist_shard")"
check "a second idem_distribute: SQLSTATE" 55000 "$(sqlstate coordinator "SELECT idem_distribute('wallets')")"
check "still wallets' colocation after it" t \
	"$(q coordinator "SELECT r.colocationid = w.colocationid FROM pg_dist_partition r, pg_dist_partition w
		WHERE r.logicalrelid = 'idem_records'::regclass AND w.logicalrelid = 'wallets'::regclass")"

q coordinator "DROP TABLE dist_local, dist_by_text, dist_reference" >/dev/null
q coordinator "REVOKE EXECUTE ON FUNCTION idem_distribute(regclass) FROM dist_nonowner; DROP ROLE dist_nonowner" >/dev/null
finish
