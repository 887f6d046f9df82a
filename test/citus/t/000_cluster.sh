#!/usr/bin/env bash
# The cluster harness itself, and pg_idem's user-table functions on a
# distributed table (run by test/citus/run):
#
# 1. Every node preloads citus and pg_idem together (once, they did not
#    start: "out of relcache_callback_list slots"), and runs pg_idem's purge
#    worker; the coordinator knows both workers.
# 2. CREATE EXTENSION pg_idem on the coordinator reached both workers, in
#    the same version, with its tables.
# 3. accounts(id bigint primary key, balance bigint, version bigint),
#    distributed by id, has shards on both workers. The version column is
#    idem_versioned_update's.
# 4. idem_try_insert_row from the coordinator: 20 new rows, then the same 20
#    again, all refused as duplicates; a rolled-back transaction that wrote
#    to both workers leaves nothing; the rows are on both workers.
# 5. idem_versioned_update: every row from version 0 to 1 once (true), the
#    replay refused (false), a message from the future refused with 55000, an
#    unknown key NULL; the balances and versions add up.
# 6. citus_move_shard_placement of a shard of accounts that holds rows from
#    worker1 to worker2 (logical replication, Citus's default for a table
#    with a primary key): the shard is then on worker2 only, and its rows are
#    still deduplicated and versioned there.
set -euo pipefail
. "$(dirname "$0")/../testlib.sh"
W1=$CITUS_WORKER1_PORT
W2=$CITUS_WORKER2_PORT

echo "1. preloading and the nodes"
for node in coordinator worker1 worker2; do
	check "$node: shared_preload_libraries" "citus,pg_idem" "$(q "$node" 'SHOW shared_preload_libraries')"
	check "$node: pg_idem's purge worker runs" 1 \
		"$(q "$node" "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_idem purge'")"
	check "$node: no relcache_callback_list error in its log" 0 \
		"$(grep -c 'relcache_callback_list' "$CITUS_DIR/$node/server.log" || true)"
done
check "the coordinator's active workers" "$W1,$W2" \
	"$(q coordinator "SELECT string_agg(node_port::text, ',' ORDER BY node_port) FROM citus_get_active_worker_nodes()")"

echo "2. pg_idem on every node"
want=$(q coordinator "SELECT extversion FROM pg_extension WHERE extname = 'pg_idem'")
for node in worker1 worker2; do
	check "$node: pg_idem's version (the coordinator's)" "$want" \
		"$(q "$node" "SELECT extversion FROM pg_extension WHERE extname = 'pg_idem'")"
	check "$node: pg_idem's table idem_records" t \
		"$(q "$node" "SELECT to_regclass('idem_records') IS NOT NULL")"
done

echo "3. a distributed table"
q coordinator "SET client_min_messages = warning; DROP TABLE IF EXISTS accounts" >/dev/null
q coordinator "CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint,
	version bigint NOT NULL DEFAULT 0)" >/dev/null
q coordinator "SELECT create_distributed_table('accounts', 'id')" >/dev/null
check "accounts' shards are on both workers" "$W1,$W2" \
	"$(q coordinator "SELECT string_agg(DISTINCT nodeport::text, ',') FROM citus_shards
		WHERE table_name = 'accounts'::regclass")"

echo "4. idem_try_insert_row"
insert_20="SELECT count(*) FILTER (WHERE inserted) || '/' || count(*) FROM (
	SELECT idem_try_insert_row('accounts', jsonb_build_object('id', g, 'balance', 100)) AS inserted
	FROM generate_series(1, 20) g) s"
check "20 new ids: inserted/calls" "20/20" "$(q coordinator "$insert_20")"
check "the same 20 again: inserted/calls" "0/20" "$(q coordinator "$insert_20")"
q coordinator "BEGIN;
	SELECT idem_try_insert_row('accounts', jsonb_build_object('id', g, 'balance', 1))
	FROM generate_series(21, 40) g;
	ROLLBACK" >/dev/null
check "rows, sum of balances (a rolled-back batch left nothing)" "20|2000" \
	"$(q coordinator "SELECT count(*), sum(balance) FROM accounts")"
check "workers holding rows | rows in all shards" "2|20" \
	"$(q coordinator "SELECT count(*) FILTER (WHERE n > 0), sum(n) FROM (
		SELECT nodeport, sum(result::bigint) AS n
		FROM run_command_on_placements('accounts', 'SELECT count(*) FROM %s')
		GROUP BY nodeport) w")"

echo "5. idem_versioned_update"
update_20="SELECT count(*) FILTER (WHERE applied) || '/' || count(*) FILTER (WHERE NOT applied)
	|| '/' || count(*) FILTER (WHERE applied IS NULL) FROM (
	SELECT idem_versioned_update('accounts', jsonb_build_object('id', g), 0,
		jsonb_build_object('balance', 100 + g)) AS applied
	FROM generate_series(1, 20) g) s"
check "version 0 -> 1 of the 20: applied/replays/missing" "20/0/0" "$(q coordinator "$update_20")"
check "the same 20 messages again: applied/replays/missing" "0/20/0" "$(q coordinator "$update_20")"
check "a message built on version 5 (the row is at 1): SQLSTATE" 55000 \
	"$(sqlstate coordinator "SELECT idem_versioned_update('accounts', '{\"id\": 1}', 5, '{\"balance\": 0}')")"
check "an unknown id: NULL" null \
	"$(q coordinator "SELECT coalesce(idem_versioned_update('accounts', '{\"id\": 999}', 0, '{}')::text, 'null')")"
check "rows, sum of balances, sum of versions" "20|2210|20" \
	"$(q coordinator "SELECT count(*), sum(balance), sum(version) FROM accounts")"

echo "6. a shard moved between workers"
shard=$(q coordinator "SELECT shardid FROM run_command_on_placements('accounts', 'SELECT count(*) FROM %s')
	WHERE nodeport = $W1 AND result::bigint > 0 ORDER BY shardid LIMIT 1")
id=$(q coordinator "SELECT min(g) FROM generate_series(1, 20) g
	WHERE get_shard_id_for_distribution_column('accounts', g) = $shard")
echo "  moving shard $shard (holding id $id) from worker1 to worker2"
q coordinator "SELECT citus_move_shard_placement($shard, '$CITUS_HOST', $W1, '$CITUS_HOST', $W2)" >/dev/null
check "shard $shard's placements" "$W2" \
	"$(q coordinator "SELECT string_agg(nodeport::text, ',') FROM citus_shards WHERE shardid = $shard")"
check "id $id inserted again after the move: inserted" f \
	"$(q coordinator "SELECT idem_try_insert_row('accounts', jsonb_build_object('id', $id, 'balance', 0))")"
check "id $id from version 1 to 2 after the move: applied" t \
	"$(q coordinator "SELECT idem_versioned_update('accounts', jsonb_build_object('id', $id), 1, '{\"balance\": 7}')")"
check "id $id: balance|version" "7|2" "$(q coordinator "SELECT balance, version FROM accounts WHERE id = $id")"
check "rows after the move" 20 "$(q coordinator "SELECT count(*) FROM accounts")"

q coordinator "DROP TABLE accounts" >/dev/null
finish
