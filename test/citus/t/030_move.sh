#!/usr/bin/env bash
# Exactly-once while a shard moves: citus_move_shard_placement (logical
# replication, Citus's 'auto' transfer) of a shard of wallets that holds
# wallets of this test's range (3000-3099) from its worker to the other one,
# in the middle of the CTE storm (scope move; test/citus/stormlib.sh's
# psql_storm: 8 clients, from 3 s before the move to 2 s after it). The
# shard of idem_records colocated with it moves along, so a wallet's
# records stay on its worker.
#
# Checks: every client still ran after the move, and none saw an error.
# Afterwards the wallets' shard and its idem_records shard are on the other
# worker only (pg_dist_placement), and the moved wallets have records from
# before the move and from after it. Every wallet holds exactly the points
# of its recorded orders. Every order 1..N delivered once more: the orders
# with a record add no point (a record the move lost would have let its
# order apply twice), the others theirs; each order then has exactly one
# record and the wallets hold the points of orders 1..N applied once.
set -euo pipefail
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/../stormlib.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

placements() {
	q coordinator "SELECT string_agg(n.nodeport::text, ',' ORDER BY n.nodeport) FROM pg_dist_placement p
		JOIN pg_dist_node n USING (groupid) WHERE p.shardid = $1"
}

reset_range move 3000
# The shard of wallets with the most wallets of the range, its worker and
# the other worker.
read -r shard from <<<"$(q coordinator "SELECT s.shardid, s.nodeport
	FROM generate_series(3000, 3099) id
	JOIN citus_shards s ON s.shardid = get_shard_id_for_distribution_column('wallets', id)
	GROUP BY 1, 2 ORDER BY count(*) DESC, 1 LIMIT 1" | tr '|' ' ')"
if [ "$from" = "$CITUS_WORKER1_PORT" ]; then to=$CITUS_WORKER2_PORT; else to=$CITUS_WORKER1_PORT; fi
moved_wallets="SELECT id FROM generate_series(3000, 3099) id
	WHERE get_shard_id_for_distribution_column('wallets', id) = $shard"
records_shard=$(q coordinator "SELECT get_shard_id_for_distribution_column('idem_records', min(id)) FROM ($moved_wallets) w")
echo "moving shard $shard ($(q coordinator "SELECT count(*) FROM ($moved_wallets) w") wallets of the range;" \
	"idem_records' shard $records_shard) from port $from to $to in a storm"
check "placements of wallets' shard $shard | idem_records' shard $records_shard before" "$from|$from" \
	"$(placements "$shard")|$(placements "$records_shard")"

t0=$SECONDS
psql_storm move 3000 120 "$work/errs" &
storm_pid=$!
sleep 3
started=$(q coordinator 'SELECT now()')
q coordinator "SELECT citus_move_shard_placement($shard, '$CITUS_HOST', $from, '$CITUS_HOST', $to,
	shard_transfer_mode => 'auto')" >/dev/null
finished=$(q coordinator 'SELECT now()')
moved_at=$((SECONDS - t0))
sleep 2
clients=0
for pid in $(cat "$work/errs.pids"); do
	! kill -0 "$pid" 2>/dev/null || clients=$((clients + 1))
done
psql_storm_stop "$work/errs"
wait "$storm_pid"
echo "  the move: from 3 s to $moved_at s of the storm's $((SECONDS - t0)) s"
cat "$work"/errs.[0-9]* | head -n 5
check "storm clients running 2 s after the move" "$STORM_CLIENTS" "$clients"
check "errors in the storm" 0 "$(cat "$work"/errs.[0-9]* | grep -c ERROR || true)"
check "placements of wallets' shard $shard | idem_records' shard $records_shard after" "$to|$to" \
	"$(placements "$shard")|$(placements "$records_shard")"
check "the moved wallets' records: before the move | after it (both some)" "t|t" \
	"$(q coordinator "SELECT count(*) FILTER (WHERE recorded_at < '$started') > 0,
		count(*) FILTER (WHERE recorded_at > '$finished') > 0
		FROM idem_records WHERE scope = 'move' AND route IN ($moved_wallets)")"
check "records not on their order's route" 0 "$(records_off_route move 3000)"
check "wallets whose points are not their recorded orders'" 0 "$(ledger_mismatches move 3000)"

n=$(sweep_count move)
points="SELECT sum(points) FROM wallets WHERE id BETWEEN 3000 AND 3099"
before=$(q coordinator "$points")
# What the sweep may add: the points of orders 1..n less those of the
# orders that have a record (which the wallets hold, checked above).
new_points=$(q coordinator "SELECT (SELECT sum(o % 7 + 1) FROM generate_series(1, $n) o)
	- (SELECT coalesce(sum(key::bigint % 7 + 1), 0) FROM idem_records WHERE scope = 'move')")
echo "  every order 1..$n once more"
storm_script cte "$work/cte.sql"
sweep "$work/cte.sql" move 3000 "$n" >/dev/null
check "points the sweep added (only the unrecorded orders')" "$new_points" \
	"$(($(q coordinator "$points") - before))"
check "records | distinct orders | lowest | highest" "$n|$n|1|$n" \
	"$(q coordinator "SELECT count(*), count(DISTINCT key), min(key::bigint), max(key::bigint)
		FROM idem_records WHERE scope = 'move'")"
check "wallets whose points are not those of orders 1..$n once" 0 "$(closed_form_mismatches 3000 "$n")"
finish
