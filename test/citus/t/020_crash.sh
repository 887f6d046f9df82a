#!/usr/bin/env bash
# Exactly-once across crashes of a node (kill -9 of all its processes) in the
# middle of the CTE storm (test/citus/stormlib.sh: idem_try_insert and the
# wallet's UPDATE in one transaction, through the coordinator):
#
# 1. The coordinator killed (scope crash, wallets 2000-2099) while 8 pgbench
#    clients commit, then restarted; recover_prepared_transactions() leaves
#    no prepared transaction on a worker. Every wallet holds exactly the
#    points of the orders that have a record (no transaction cut by the crash
#    kept one without the other). Then every order 1..N is delivered once
#    more: each has exactly one record, and the wallets hold the points of
#    orders 1..N applied once (computed without pg_idem).
# 2. worker1 killed (scope crash-worker, wallets 2100-2199) while 8 psql
#    clients commit and go on after errors, restarted 1 s after it is gone: the
#    transactions that reached worker1 in the outage failed, those on
#    worker2 went on, and worker1 took records again after its restart. The
#    same checks as in 1.
set -euo pipefail
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/../stormlib.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Starts NODE after a kill9 and waits until it answers. While NODE was down,
# the other nodes' attempts to connect to it may have made a TCP
# self-connection (source port = NODE's port, which lies in Linux's
# ephemeral range), and its start then fails with "Address already in use"
# until that socket's TIME_WAIT ends (60 s): the start is tried again.
restart_node() {
	local try
	for try in $(seq 1 70); do
		if "$CITUS_CLUSTER" restart "$CITUS_DIR" "$1" >/dev/null 2>&1; then
			[ "$try" = 1 ] || echo "  ($1 started at try $try)"
			break
		fi
		sleep 1
	done
	for _ in $(seq 1 600); do
		q "$1" 'SELECT 1' >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "$1 does not answer" >&2
	return 1
}

# The checks after a crash, before and after every order is delivered again.
after_crash() {
	local scope=$1 base=$2 n node
	q coordinator 'SELECT recover_prepared_transactions()' >/dev/null
	for node in worker1 worker2; do
		check "$node: prepared transactions left" 0 "$(q "$node" 'SELECT count(*) FROM pg_prepared_xacts')"
	done
	echo "  records: $(q coordinator "SELECT count(*) FROM idem_records WHERE scope = '$scope'")"
	check "records not on their order's route" 0 "$(records_off_route "$scope" "$base")"
	check "wallets whose points are not their recorded orders'" 0 "$(ledger_mismatches "$scope" "$base")"
	n=$(sweep_count "$scope")
	echo "  every order 1..$n once more"
	sweep "$work/cte.sql" "$scope" "$base" "$n" >/dev/null
	check "records | distinct orders | lowest | highest" "$n|$n|1|$n" \
		"$(q coordinator "SELECT count(*), count(DISTINCT key), min(key::bigint), max(key::bigint)
			FROM idem_records WHERE scope = '$scope'")"
	check "wallets whose points are not those of orders 1..$n once" 0 "$(closed_form_mismatches "$base" "$n")"
}

echo "1. the coordinator killed in a storm"
reset_range crash 2000
storm_script cte "$work/cte.sql"
storm "$work/cte.sql" crash 2000 30 >"$work/sent" 2>"$work/storm.err" &
sleep 5
before=$(q coordinator "SELECT count(*) FROM idem_records WHERE scope = 'crash'")
"$CITUS_CLUSTER" kill9 "$CITUS_DIR" coordinator
wait $! || true
echo "  killed with $before records or more; pgbench ran $(cat "$work/sent" || true) transactions"
cat "$work/storm.err"
check "pgbench ended at the crash (its clients lost the server)" t \
	"$(grep -q 'aborted' "$work/storm.err" && echo t || echo f)"
restart_node coordinator
after_crash crash 2000

echo "2. worker1 killed in a storm"
reset_range crash-worker 2100
t0=$SECONDS
psql_storm crash-worker 2100 120 "$work/errs" &
storm_pid=$!
sleep 4
"$CITUS_CLUSTER" kill9 "$CITUS_DIR" worker1
down=$((SECONDS - t0))
sleep 1
restart_node worker1
restarted=$(q coordinator 'SELECT now()')
up=$((SECONDS - t0))
sleep 3
psql_storm_stop "$work/errs"
wait "$storm_pid"
echo "  the storm: worker1 killed at 4 s, down from ${down} s, up again at ${up} s, stopped at $((SECONDS - t0)) s"
errors=$(cat "$work"/errs.* | grep -c 'ERROR' || true)
cat "$work"/errs.* | sed -E "s/[0-9]+/N/g" | sort | uniq -c | sort -rn | head -n 8
echo "  $errors errors in the clients"
check "transactions failed in the outage" t "$([ "$errors" -gt 0 ] && echo t || echo f)"
worker_routes() { # the wallets of the range on worker $1's port
	echo "SELECT id FROM generate_series(2100, 2199) id
		WHERE (SELECT nodeport FROM citus_shards
			WHERE shardid = get_shard_id_for_distribution_column('wallets', id)) = $1"
}
check "records on worker2 while worker1 was down" t \
	"$(q coordinator "SELECT count(*) > 0 FROM idem_records WHERE scope = 'crash-worker'
		AND route IN ($(worker_routes "$CITUS_WORKER2_PORT"))")"
check "records on worker1 after its restart" t \
	"$(q coordinator "SELECT count(*) > 0 FROM idem_records WHERE scope = 'crash-worker'
		AND recorded_at > '$restarted' AND route IN ($(worker_routes "$CITUS_WORKER1_PORT"))")"
after_crash crash-worker 2100
finish
