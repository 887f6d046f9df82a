#!/usr/bin/env bash
# The own-table recipe on a cluster (docs/citus.md, recipe 3; wallets
# 4500-4599): idem_try_insert_row on the user's dedup table own_dedup,
# distributed by wallet and colocated with wallets (its primary key holds
# the distribution column), in one statement with the wallet's UPDATE,
# through the coordinator, under the same storm as 010_storm (8 clients,
# 20 % redeliveries, 10 % rollbacks).
#
# After the storm every wallet holds exactly the points of the orders that
# have a row in own_dedup, and there are fewer rows than messages; after
# every order 1..N is delivered once more, own_dedup has N rows for N
# orders and every wallet holds the points of orders 1..N applied once,
# computed without reading own_dedup. pg_idem's records are not used.
set -euo pipefail
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/../stormlib.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
SECS=${STORM_SECONDS:-10}
BASE=4500

q coordinator "SET client_min_messages = warning; DROP TABLE IF EXISTS own_dedup;
	CREATE TABLE own_dedup (wallet bigint NOT NULL, order_id bigint NOT NULL,
	                        PRIMARY KEY (wallet, order_id));
	SELECT create_distributed_table('own_dedup', 'wallet', colocate_with => 'wallets')" >/dev/null
reset_range own $BASE

# The wallets of the range whose points are not those of their orders in
# own_dedup.
own_mismatches() {
	q coordinator "WITH recorded AS (
			SELECT wallet AS id, sum(order_id % 7 + 1) AS points FROM own_dedup GROUP BY wallet)
		SELECT count(*) FROM wallets w LEFT JOIN recorded r USING (id)
		WHERE w.id BETWEEN $BASE AND $BASE + 99 AND w.points <> coalesce(r.points, 0)"
}

echo "1. the storm, $STORM_CLIENTS clients, ${SECS}s"
storm_script own "$work/own.sql"
sent=$(storm "$work/own.sql" own $BASE "$SECS")
rows=$(q coordinator "SELECT count(*) FROM own_dedup")
echo "  $sent messages, $rows dedup rows"
check "some dedup rows" t "$([ "$rows" -gt 0 ] && echo t || echo f)"
check "fewer dedup rows than messages" t "$([ "$rows" -lt "$sent" ] && echo t || echo f)"
check "dedup rows not on their order's wallet" 0 \
	"$(q coordinator "SELECT count(*) FROM own_dedup WHERE wallet <> $BASE + order_id % 100")"
check "wallets whose points are not their dedup rows' orders'" 0 "$(own_mismatches)"

n=$(q coordinator "SELECT (coalesce(max(order_id), 0) / $STORM_CLIENTS + 1) * $STORM_CLIENTS FROM own_dedup")
echo "2. every order 1..$n once more"
sweep "$work/own.sql" own $BASE "$n" >/dev/null
check "dedup rows | distinct orders | lowest | highest" "$n|$n|1|$n" \
	"$(q coordinator "SELECT count(*), count(DISTINCT order_id), min(order_id), max(order_id) FROM own_dedup")"
check "wallets whose points are not those of orders 1..$n once" 0 "$(closed_form_mismatches $BASE "$n")"
check "wallets whose points are not their dedup rows' orders'" 0 "$(own_mismatches)"
finish
