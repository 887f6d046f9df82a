#!/usr/bin/env bash
# Records on distributed idem_records, called through the coordinator by
# pg_idem's owner (run by test/citus/run after 001_distribute; wallets
# 5000-5099, scopes rec-*):
#
# 1. idem_try_insert without a route is refused (22004) and writes nothing;
#    with one it answers true, then false, and the record is in the shard
#    of its route, on the worker that holds the wallet (and nowhere else).
# 2. The CTE pattern (records.md) commits the record and the points
#    together (a replay adds nothing), and a rollback leaves neither.
# 3. An expired record (ttl 1 ms) is new again: true, true, false, and the
#    wallet got the points twice, once per life of the key.
# 4. The claim protocol through the coordinator: acquired, in_progress, a
#    wrong token refused with 55000 changing nothing, complete, completed
#    with its result; fail (failed, then dead), idem_retry, release,
#    lookup, forget (refused for a claim in progress), all with the route;
#    without one 22004.
# 5. idem_try_insert_many takes a route per key (22004 without, nothing
#    written), and a key repeated in the batch is recorded once, in the
#    shard of its route. idem_reconcile searches every shard and settles
#    each expired claim in its own: the scope's function says which
#    happened (completed) and which did not (failed); a second run finds
#    nothing. The coordinator's purge worker (the only node whose worker
#    purges and reconciles distributed records) is paused from here on, so
#    that what is counted is these calls'.
# 6. idem_purge() from the coordinator deletes the expired records of 30
#    routes on both workers in one call, and keeps the live ones.
# 7. idem_stats on the coordinator counted these calls, scope by scope.
set -euo pipefail
. "$(dirname "$0")/../testlib.sh"

# The ports of the nodes with a placement of the shards matching WHERE
# (citus_shards leaves out an extension's tables, pg_idem's among them).
ports() {
	q coordinator "SELECT string_agg(DISTINCT nodeport::text, ',')
		FROM pg_dist_shard JOIN pg_dist_placement USING (shardid) JOIN pg_dist_node USING (groupid)
		WHERE $1"
}
# The records matching WHERE (no %) in each worker's placements, as
# worker1-count|worker2-count, counted on the workers' shards themselves.
per_worker() {
	q coordinator "SELECT coalesce(sum(result::bigint) FILTER (WHERE nodeport = $CITUS_WORKER1_PORT), 0)
		|| '|' || coalesce(sum(result::bigint) FILTER (WHERE nodeport = $CITUS_WORKER2_PORT), 0)
		FROM run_command_on_placements('idem_records', \$\$SELECT count(*) FROM %s WHERE $1\$\$)"
}
points() { q coordinator "SELECT points FROM wallets WHERE id = $1"; }
# ttl_points ROUTE KEY POINTS [TTL]: the CTE pattern in scope rec-ttl, one
# statement that returns whether it added the points.
ttl_points() {
	echo "WITH d AS (SELECT idem_try_insert('rec-ttl', '$2', ${4:-NULL}, $1) AS first)
		UPDATE wallets SET points = points + $3 FROM d WHERE d.first AND id = $1 RETURNING d.first"
}

echo "1. idem_try_insert, routed"
check "without a route: SQLSTATE" 22004 "$(sqlstate coordinator "SELECT idem_try_insert('rec-noroute', 'k0')")"
check "without a route: records of the scope" 0 \
	"$(q coordinator "SELECT count(*) FROM idem_records WHERE scope = 'rec-noroute'")"
check "route 5000: first, then again" "t|f" \
	"$(q coordinator "SELECT idem_try_insert('rec-basic', 'k1', NULL, 5000)")|$(q coordinator \
		"SELECT idem_try_insert('rec-basic', 'k1', NULL, 5000)")"
shard=$(q coordinator "SELECT get_shard_id_for_distribution_column('idem_records', 5000)")
port=$(ports "shardid = $shard")
check "the shard of route 5000 is on wallet 5000's worker" \
	"$(ports "shardid = get_shard_id_for_distribution_column('wallets', 5000)")" "$port"
if [ "$port" = "$CITUS_WORKER1_PORT" ]; then node=worker1 want="1|0"; else node=worker2 want="0|1"; fi
check "$node's idem_records_$shard: the record (scope, key, route)" "rec-basic|k1|5000" \
	"$(q "$node" "SELECT scope || '|' || key || '|' || route FROM idem_records_$shard WHERE scope = 'rec-basic'")"
check "scope rec-basic's records on worker1|worker2" "$want" "$(per_worker "scope = 'rec-basic'")"

echo "2. the CTE pattern in a transaction"
cte() { # cte KEY POINTS
	echo "WITH d AS (SELECT idem_try_insert('rec-cte', '$1', NULL, 5001) AS first)
		UPDATE wallets SET points = points + $2 FROM d WHERE d.first AND id = 5001"
}
q coordinator "BEGIN; $(cte o-1 10); COMMIT" >/dev/null
q coordinator "BEGIN; $(cte o-1 10); COMMIT" >/dev/null
check "o-1 committed twice: wallet 5001's points" 10 "$(points 5001)"
check "inside the transaction, before its rollback: records of o-2|points" "1|30" \
	"$(q coordinator "BEGIN; $(cte o-2 20);
		SELECT (SELECT count(*) FROM idem_records WHERE scope = 'rec-cte' AND key = 'o-2')
			|| '|' || (SELECT points FROM wallets WHERE id = 5001);
		ROLLBACK")"
check "o-2 rolled back: records of o-2|points" "0|10" \
	"$(q coordinator "SELECT count(*) FROM idem_records WHERE scope = 'rec-cte' AND key = 'o-2'")|$(points 5001)"
check "o-2 again, committed: points" 30 "$(q coordinator "BEGIN; $(cte o-2 20); COMMIT" >/dev/null; points 5001)"

# Pause the coordinator's purge worker, which purges the shards, until the
# end of part 5 (a reload ends its nap: let that round pass before the
# records are written). Part 3 renews an expired record, which a purge
# round between its expiry and its renewal would delete first; part 5
# counts the records kept.
q coordinator "ALTER SYSTEM SET pg_idem.purge_naptime = '1h'" >/dev/null
q coordinator "SELECT pg_reload_conf()" >/dev/null
sleep 1

echo "3. an expired record is a new life of its key"
first=$(q coordinator "$(ttl_points 5002 o-1 5 "'1 millisecond'")")
sleep 0.1
first="$first,$(q coordinator "$(ttl_points 5002 o-1 5)")"
first="$first,$(q coordinator "$(ttl_points 5002 o-1 5)" | tr -d '\n')"
check "o-1 with ttl 1 ms, after it expired, again: updated" "t,t," "$first"
check "wallet 5002's points (two lives, 5 each)" 10 "$(points 5002)"
check "o-1's record: attempts (taken over once)|still one row" "2|1" \
	"$(q coordinator "SELECT max(attempts) || '|' || count(*) FROM idem_records WHERE scope = 'rec-ttl'")"

echo "4. the claim protocol"
begin() { # begin KEY: status|attempt|token
	q coordinator "SELECT status || '|' || attempt || '|' || coalesce(token::text, '')
		FROM idem_begin('rec-claim', '$1', route => 5003)"
}
lookup() { q coordinator "SELECT concat_ws('|', status, attempt) FROM idem_lookup('rec-claim', '$1', 5003)"; }
check "idem_begin without a route: SQLSTATE" 22004 "$(sqlstate coordinator "SELECT idem_begin('rec-claim', 'c-1')")"
IFS='|' read -r status attempt token <<<"$(begin c-1)"
check "c-1: the first idem_begin" "acquired|1|36" "$status|$attempt|${#token}"
check "c-1: a second idem_begin" "in_progress|1|" "$(begin c-1)"
check "c-1: idem_complete with a wrong token: SQLSTATE" 55000 \
	"$(sqlstate coordinator "SELECT idem_complete('rec-claim', 'c-1', gen_random_uuid(), '{\"r\": 1}', route => 5003)")"
check "c-1: idem_complete without a route: SQLSTATE" 22004 \
	"$(sqlstate coordinator "SELECT idem_complete('rec-claim', 'c-1', '$token', '{\"r\": 1}')")"
check "c-1 after them: status|attempt|result" "in_progress|1|" \
	"$(q coordinator "SELECT status || '|' || attempt || '|' || coalesce(result::text, '')
		FROM idem_lookup('rec-claim', 'c-1', 5003)")"
check "c-1: idem_forget of a claim in progress: SQLSTATE" 55000 \
	"$(sqlstate coordinator "SELECT idem_forget('rec-claim', 'c-1', 5003)")"
q coordinator "SELECT idem_complete('rec-claim', 'c-1', '$token', '{\"r\": 1}', route => 5003)" >/dev/null
check "c-1 after idem_complete: idem_begin's status|result|token" 'completed|{"r": 1}|' \
	"$(q coordinator "SELECT status || '|' || result::text || '|' || coalesce(token::text, '')
		FROM idem_begin('rec-claim', 'c-1', route => 5003)")"
check "c-1: the same token again: SQLSTATE" 55000 \
	"$(sqlstate coordinator "SELECT idem_complete('rec-claim', 'c-1', '$token', '{\"r\": 2}', route => 5003)")"
shard=$(q coordinator "SELECT get_shard_id_for_distribution_column('idem_records', 5003)")
[ "$(ports "shardid = $shard")" = "$CITUS_WORKER1_PORT" ] && node=worker1 || node=worker2
check "c-1 in $node's idem_records_$shard (route 5003's): status|attempt|result" 'completed|1|{"r": 1}' \
	"$(q "$node" "SELECT status || '|' || attempts || '|' || result::text FROM idem_records_$shard
		WHERE scope = 'rec-claim' AND key = 'c-1'")"

IFS='|' read -r status attempt token <<<"$(begin c-2)"
check "c-2: idem_fail, retryable: returns" failed \
	"$(q coordinator "SELECT idem_fail('rec-claim', 'c-2', '$token', 'boom', true, route => 5003)")"
check "c-2: idem_lookup: status|attempt|last_error" "failed|1|boom" \
	"$(q coordinator "SELECT status || '|' || attempt || '|' || last_error FROM idem_lookup('rec-claim', 'c-2', 5003)")"
IFS='|' read -r status attempt token <<<"$(begin c-2)"
check "c-2: claimed again: status|attempt" "acquired|2" "$status|$attempt"
q coordinator "SELECT idem_release('rec-claim', 'c-2', '$token', route => 5003)" >/dev/null
check "c-2 released: idem_lookup's status" failed "$(lookup c-2 | cut -d'|' -f1)"
IFS='|' read -r status attempt token <<<"$(begin c-2)"
check "c-2: claimed after the release" acquired "$status"
check "c-2: idem_fail, not retryable: returns" dead \
	"$(q coordinator "SELECT idem_fail('rec-claim', 'c-2', '$token', 'final', false, route => 5003)")"
check "c-2: idem_begin of a dead key" dead "$(begin c-2 | cut -d'|' -f1)"
check "c-2: idem_retry without a route: SQLSTATE" 22004 "$(sqlstate coordinator "SELECT idem_retry('rec-claim', 'c-2')")"
check "c-2: idem_retry with its route" t "$(q coordinator "SELECT idem_retry('rec-claim', 'c-2', 5003)")"
check "c-2 after idem_retry: idem_lookup's status" failed "$(lookup c-2 | cut -d'|' -f1)"
check "c-2: idem_forget without a route: SQLSTATE" 22004 "$(sqlstate coordinator "SELECT idem_forget('rec-claim', 'c-2')")"
check "c-2: idem_forget with its route, then again" "t|f" \
	"$(q coordinator "SELECT idem_forget('rec-claim', 'c-2', 5003)")|$(q coordinator "SELECT idem_forget('rec-claim', 'c-2', 5003)")"
check "c-2 forgotten: idem_lookup|records" "absent|0" \
	"$(lookup c-2 | cut -d'|' -f1)|$(q coordinator "SELECT count(*) FROM idem_records WHERE scope = 'rec-claim' AND key = 'c-2'")"
check "c-2: the first claim of its next life: status|attempt" "acquired|1" "$(begin c-2 | cut -d'|' -f1,2)"

echo "5. batches with routes; reconciliation"
check "idem_try_insert_many without routes: SQLSTATE" 22004 \
	"$(sqlstate coordinator "SELECT idem_try_insert_many('rec-many', ARRAY['a', 'b'])")"
check "records of scope rec-many after the refusal" 0 "$(q coordinator "SELECT count(*) FROM idem_records WHERE scope = 'rec-many'")"
check "a batch with routes: the new positions" "1,2" \
	"$(q coordinator "SELECT string_agg(p::text, ',' ORDER BY p) FROM idem_try_insert_many('rec-many', ARRAY['a', 'b', 'a'], NULL, ARRAY[5050, 5051, 5050]) p")"
check "the next batch: the new positions" "2" \
	"$(q coordinator "SELECT string_agg(p::text, ',' ORDER BY p) FROM idem_try_insert_many('rec-many', ARRAY['a', 'c'], NULL, ARRAY[5050, 5052]) p")"
check "rec-many: key route" "a 5050,b 5051,c 5052" \
	"$(q coordinator "SELECT string_agg(key || ' ' || route, ',' ORDER BY key) FROM idem_records WHERE scope = 'rec-many'")"
q coordinator "CREATE FUNCTION rec_did_it_happen(scope text, key text) RETURNS boolean
	LANGUAGE sql AS \$\$ SELECT key LIKE 'done-%' \$\$" >/dev/null
q coordinator "SELECT idem_configure('rec-recon', reconcile_function => 'rec_did_it_happen(text,text)')" >/dev/null
q coordinator "SELECT (idem_begin('rec-recon', k || '-' || g, lease => '1 millisecond', route => 5060 + g)).status
	FROM generate_series(1, 6) g, (VALUES ('done'), ('lost')) v(k)" >/dev/null
q coordinator "SELECT (idem_begin('rec-recon', 'live', lease => '1 hour', route => 5070)).status" >/dev/null
sleep 0.1
check "idem_reconcile('rec-recon'): outcome count" "completed 6,failed 6" \
	"$(q coordinator "SELECT string_agg(outcome || ' ' || n, ',' ORDER BY outcome) FROM (
		SELECT outcome, count(*) AS n FROM idem_reconcile('rec-recon') GROUP BY 1) r")"
check "rec-recon: status count" "completed 6,failed 6,in_progress 1" \
	"$(q coordinator "SELECT string_agg(status || ' ' || n, ',' ORDER BY status) FROM (
		SELECT status::text, count(*) AS n FROM idem_records WHERE scope = 'rec-recon' GROUP BY 1) r")"
check "rec-recon: the done keys completed, the lost ones failed" 0 \
	"$(q coordinator "SELECT count(*) FROM idem_records WHERE scope = 'rec-recon' AND key <> 'live'
		AND (key LIKE 'done-%') <> (status = 'completed')")"
check "idem_reconcile again: rows" 0 "$(q coordinator "SELECT count(*) FROM idem_reconcile('rec-recon')")"

echo "6. idem_purge from the coordinator"
q coordinator "SELECT idem_try_insert('rec-purge', 'old-' || g, '1 millisecond', g)
	FROM generate_series(5010, 5039) g" >/dev/null
q coordinator "SELECT idem_try_insert('rec-purge', 'live-' || g, NULL, g) FROM generate_series(5040, 5049) g" >/dev/null
check "expired records on worker1|worker2 both > 0, total" "t|30" \
	"$(per_worker "scope = 'rec-purge' AND left(key, 4) = 'old-'" | awk -F'|' '{print ($1 > 0 && $2 > 0 ? "t" : "f") "|" $1 + $2}')"
sleep 0.2
check "idem_purge() deleted at least 30" t "$(q coordinator "SELECT idem_purge() >= 30")"
check "expired records left on worker1|worker2" "0|0" "$(per_worker "scope = 'rec-purge' AND left(key, 4) = 'old-'")"
check "live records kept (of 10)" 10 "$(q coordinator "SELECT count(*) FROM idem_records WHERE scope = 'rec-purge'")"
check "the other scopes' live records kept: rec-basic|rec-cte|rec-claim" "1|2|2" \
	"$(q coordinator "SELECT count(*) FILTER (WHERE scope = 'rec-basic') || '|' || count(*) FILTER (WHERE scope = 'rec-cte')
		|| '|' || count(*) FILTER (WHERE scope = 'rec-claim') FROM idem_records")"
q coordinator "ALTER SYSTEM RESET pg_idem.purge_naptime" >/dev/null
q coordinator "SELECT pg_reload_conf()" >/dev/null

echo "7. idem_stats on the coordinator"
declare -A stats
while IFS='=' read -r scope counts; do
	stats[$scope]=$counts
done < <(q coordinator "SELECT scope || '=' || claims || '|' || duplicates || '|' || in_progress || '|' || completions
	|| '|' || failures || '|' || dead_letters || '|' || purged
	FROM idem_stats WHERE database = current_database() AND scope LIKE 'rec-%'")
echo "  claims|duplicates|in_progress|completions|failures|dead_letters|purged"
check "rec-basic: k1 true, then false" "1|1|0|0|0|0|0" "${stats[rec-basic]:-}"
check "rec-cte: o-1 true, false; o-2 true (rolled back), true" "3|1|0|0|0|0|0" "${stats[rec-cte]:-}"
check "rec-ttl: true, true (expired), false" "2|1|0|0|0|0|0" "${stats[rec-ttl]:-}"
# c-1: acquired, in_progress, complete, completed; c-2: acquired, fail,
# acquired, (release), acquired, fail (dead), (dead: not counted),
# acquired in its next life.
check "rec-claim" "5|1|1|1|2|1|0" "${stats[rec-claim]:-}"
check "rec-purge: 40 claims, 30 purged" "40|0|0|0|0|0|30" "${stats[rec-purge]:-}"
# rec-many: a, b new and a repeated; then a again and c new (the refused
# batch counts nothing).
check "rec-many: the batches" "3|2|0|0|0|0|0" "${stats[rec-many]:-}"
check "rec-noroute: refused calls count nothing" "" "${stats[rec-noroute]:-}"
finish
