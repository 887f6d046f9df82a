#!/usr/bin/env bash
# A scope's settings and grants, set on the coordinator, reach the workers,
# where delegated functions use them (run by test/citus/run after
# 001_distribute; wallets 6000-6099, scopes sc-*):
#
# 1. sc_add_points, a plpgsql function doing the records.md pattern
#    (idem_try_insert with the wallet as route, then the UPDATE), is
#    distributed by the wallet, colocated with wallets, force_delegation:
#    called alone, it runs on the worker that holds the wallet (the
#    worker's idem_stats count its calls, the coordinator's do not).
# 2. idem_configure('sc-ttl', ttl => '3 days') on the coordinator: a record
#    written by the delegated function lives 3 days. Then, from another
#    session, ttl 5 days: the next records written by the SAME worker
#    backend (one coordinator session, its cached worker connection, the
#    worker's pid checked before and after) live 5 days: the worker's
#    cache of the scope's settings was invalidated by the change of the
#    reference table idem_scopes.
# 3. A role app2 (LOGIN, EXECUTE on idem_try_insert granted on every node,
#    since Citus does not propagate it): refused (42501) in scope sc-closed,
#    which it was not granted, writing neither record nor points; in
#    sc-open, granted by idem_grant on the coordinator, its delegated calls
#    add the points once; after idem_revoke (from another session) the
#    same app2 session, on the same worker backend, is refused again and
#    writes nothing.
set -euo pipefail
. "$(dirname "$0")/../testlib.sh"

# The node (worker1, worker2) holding wallet ID's shard.
worker_of() {
	case $(q coordinator "SELECT nodeport FROM pg_dist_placement JOIN pg_dist_node USING (groupid)
		WHERE shardid = get_shard_id_for_distribution_column('wallets', $1)") in
	"$CITUS_WORKER1_PORT") echo worker1 ;;
	"$CITUS_WORKER2_PORT") echo worker2 ;;
	*) echo none ;;
	esac
}
# One coordinator session (as ROLE) running the script on stdin, with
# errors shown as their SQLSTATE and not stopping it: a session keeps its
# worker connections, so every delegated call of it reaches the same
# worker backend. `\! other ...` in the script runs SQL in another session.
session() {
	"$CITUS_CLUSTER" psql "$CITUS_DIR" coordinator -U "$1" -At -v ON_ERROR_STOP=0 -v VERBOSITY=sqlstate -f - 2>&1 |
		sed -E 's/^psql:[^ ]* //; s/^ERROR: +/ERROR /' | paste -sd' ' -
}
other='"$CITUS_CLUSTER" psql "$CITUS_DIR" coordinator -qAt -c'
w6000=$(worker_of 6000)
w6010=$(worker_of 6010)

echo "1. a delegated function"
q coordinator "CREATE FUNCTION sc_add_points(account bigint, scope text, order_id text, pts bigint)
RETURNS boolean LANGUAGE plpgsql AS \$\$
BEGIN
	IF NOT idem_try_insert(scope, order_id, NULL, account) THEN
		RETURN false;
	END IF;
	UPDATE wallets SET points = wallets.points + pts WHERE id = account;
	RETURN true;
END \$\$" >/dev/null
q coordinator "CREATE FUNCTION sc_backend(account bigint) RETURNS integer
	LANGUAGE sql AS 'SELECT pg_backend_pid()'" >/dev/null
for f in 'sc_add_points(bigint,text,text,bigint)' 'sc_backend(bigint)'; do
	q coordinator "SELECT create_distributed_function('$f', 'account', colocate_with => 'wallets',
		force_delegation => true)" >/dev/null
done

echo "2. idem_configure reaches the worker's cache"
q coordinator "SELECT idem_configure('sc-ttl', ttl => '3 days')" >/dev/null
for node in worker1 worker2; do
	check "$node: idem_scopes' ttl of sc-ttl" "3 days" "$(q "$node" "SELECT ttl FROM idem_scopes WHERE scope = 'sc-ttl'")"
done
# pid, o-1 (3 days), o-1 again, [ttl 5 days elsewhere], o-2, o-3, pid
out=$(session postgres <<EOF
SELECT sc_backend(6000);
SELECT sc_add_points(6000, 'sc-ttl', 'o-1', 1);
SELECT sc_add_points(6000, 'sc-ttl', 'o-1', 1);
\! $other "SELECT idem_configure('sc-ttl', ttl => '5 days')" >/dev/null
SELECT sc_add_points(6000, 'sc-ttl', 'o-2', 1);
SELECT sc_add_points(6000, 'sc-ttl', 'o-3', 1);
SELECT sc_backend(6000);
EOF
)
read -r pid1 answers pid2 <<<"$(echo "$out" | awk '{print $1, $2 $3 $4 $5, $6}')"
check "one session: o-1, o-1 again, (ttl 5 days), o-2, o-3" "tftt" "$answers"
check "the same worker backend (pid) before and after the change" t \
	"$([ -n "$pid1" ] && [ "$pid1" = "$pid2" ] && echo t || echo "f ($out)")"
check "records' lifetimes o-1|o-2|o-3" "3 days|5 days|5 days" \
	"$(q coordinator "SELECT string_agg((expires_at - recorded_at)::text, '|' ORDER BY key)
		FROM idem_records WHERE scope = 'sc-ttl' AND route = 6000")"
check "wallet 6000's points" 3 "$(q coordinator "SELECT points FROM wallets WHERE id = 6000")"
check "$w6000 (wallet 6000's) idem_stats of sc-ttl: claims|duplicates" "3|1" \
	"$(q "$w6000" "SELECT claims || '|' || duplicates FROM idem_stats
		WHERE database = current_database() AND scope = 'sc-ttl'")"
check "the coordinator's idem_stats rows of sc-ttl (it ran none)" 0 \
	"$(q coordinator "SELECT count(*) FROM idem_stats WHERE scope = 'sc-ttl'")"

echo "3. idem_grant and idem_revoke reach the workers"
q coordinator "CREATE ROLE app2 LOGIN" >/dev/null
q coordinator "GRANT SELECT, UPDATE ON wallets TO app2" >/dev/null
for node in coordinator worker1 worker2; do
	q "$node" "GRANT EXECUTE ON FUNCTION idem_try_insert(text, text, interval, bigint) TO app2" >/dev/null
done
check "app2 in sc-closed (no grant): SQLSTATE" "ERROR 42501" \
	"$(echo "SELECT sc_add_points(6010, 'sc-closed', 'o-1', 7);" | session app2)"
check "sc-closed: records|wallet 6010's points" "0|0" \
	"$(q coordinator "SELECT count(*) FROM idem_records WHERE scope = 'sc-closed'")|$(q coordinator \
		"SELECT points FROM wallets WHERE id = 6010")"
check "idem_grant('sc-open', 'app2')" t "$(q coordinator "SELECT idem_grant('sc-open', 'app2')")"
for node in worker1 worker2; do
	check "$node: idem_scope_grants of sc-open" app2 \
		"$(q "$node" "SELECT string_agg(grantee, ',') FROM idem_scope_grants WHERE scope = 'sc-open'")"
done
# pid, o-1, o-1 again, [idem_revoke elsewhere], o-2, pid
out=$(session app2 <<EOF
SELECT sc_backend(6010);
SELECT sc_add_points(6010, 'sc-open', 'o-1', 7);
SELECT sc_add_points(6010, 'sc-open', 'o-1', 7);
\! $other "SELECT idem_revoke('sc-open', 'app2')" >/dev/null
SELECT sc_add_points(6010, 'sc-open', 'o-2', 7);
SELECT sc_backend(6010);
EOF
)
IFS='|' read -r pid1 answers pid2 <<<"$(echo "$out" | awk '{print $1 "|" $2 " " $3 " " $4 " " $5 "|" $6}')"
check "app2, one session in sc-open: o-1, o-1 again, (revoked), o-2" "t f ERROR 42501" "$answers"
check "the same worker backend (pid) before and after the revoke" t \
	"$([ -n "$pid1" ] && [ "$pid1" = "$pid2" ] && echo t || echo "f ($out)")"
check "sc-open: keys recorded|wallet 6010's points" "o-1|7" \
	"$(q coordinator "SELECT string_agg(key, ',') FROM idem_records WHERE scope = 'sc-open'")|$(q coordinator \
		"SELECT points FROM wallets WHERE id = 6010")"
for node in worker1 worker2; do
	check "$node: idem_scope_grants of sc-open after the revoke" 0 \
		"$(q "$node" "SELECT count(*) FROM idem_scope_grants WHERE scope = 'sc-open'")"
done
check "the calls ran on $w6010 (wallet 6010's): its sc-open claims|duplicates" "1|1" \
	"$(q "$w6010" "SELECT claims || '|' || duplicates FROM idem_stats
		WHERE database = current_database() AND scope = 'sc-open'")"

for node in coordinator worker1 worker2; do
	q "$node" "REVOKE EXECUTE ON FUNCTION idem_try_insert(text, text, interval, bigint) FROM app2" >/dev/null
done
q coordinator "REVOKE SELECT, UPDATE ON wallets FROM app2" >/dev/null
q coordinator "DROP ROLE app2" >/dev/null
finish
