#!/usr/bin/env bash
# Exactly-once for a role that is not pg_idem's owner, through a delegated
# function (wallets 4000-4099, scope deleg):
#
# 1. add_points(account, order, points), plpgsql, SECURITY INVOKER:
#    idem_try_insert, then the wallet's UPDATE if the order is new;
#    distributed by account, colocated with wallets, force_delegation, so
#    that Citus runs each call on the worker of the wallet, where both
#    writes are local. The role app may execute it and idem_try_insert
#    (granted on every node: Citus passes no grant on an extension's
#    function on), use the scope (idem_grant) and read and update wallets;
#    nothing on idem_records.
# 2. A storm of 8 pgbench clients connected as app, each message
#    BEGIN; SELECT add_points(...); COMMIT (10 % ROLLBACK), 20 %
#    redeliveries (test/citus/stormlib.sh). No client fails (a call Citus did
#    not delegate would fail with 25001, see 4); every wallet holds exactly
#    the points of its recorded orders, and there are fewer records than
#    messages.
# 3. Every order 1..N delivered once more as app: each has exactly one
#    record and the wallets hold the points of orders 1..N applied once. A
#    new order whose call is rolled back leaves no record and no point.
# 4. The same role cannot use the coordinator path: the CTE pattern (and
#    idem_try_insert then UPDATE in one transaction) fails with SQLSTATE
#    25001 (Citus's one connection per role: pg_idem writes as its owner)
#    and changes nothing: no record, no point.
set -euo pipefail
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/../stormlib.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
SECS=${STORM_SECONDS:-12}

# app_sqlstate SQL: like sqlstate, connected as app.
app_sqlstate() {
	local out
	if out=$("$PSQL" -X -At -h "$CITUS_DIR" -p "$CITUS_COORDINATOR_PORT" -U app -d "$CITUS_DB" \
		-v ON_ERROR_STOP=1 -v VERBOSITY=sqlstate -c "$1" 2>&1); then
		echo none
	else
		echo "$out" | sed -nE 's/^(psql:[^ ]* )?ERROR: +([0-9A-Z]{5}).*/\2/p' | head -n 1
	fi
}

echo "1. add_points and the role app"
reset_range deleg 4000
q coordinator "DELETE FROM idem_records WHERE scope = 'deleg-refused'" >/dev/null
[ "$(q coordinator "SELECT count(*) FROM pg_roles WHERE rolname = 'app'")" = 1 ] ||
	q coordinator "CREATE ROLE app LOGIN" >/dev/null
q coordinator "SET client_min_messages = warning; DROP FUNCTION IF EXISTS add_points(bigint, text, bigint)" >/dev/null
q coordinator "CREATE FUNCTION add_points(account bigint, order_id text, pts bigint) RETURNS boolean
	LANGUAGE plpgsql AS \$\$
	BEGIN
		IF NOT idem_try_insert('deleg', order_id, NULL, account) THEN
			RETURN false;
		END IF;
		UPDATE wallets SET points = wallets.points + pts WHERE id = account;
		RETURN true;
	END \$\$" >/dev/null
q coordinator "SELECT create_distributed_function('add_points(bigint,text,bigint)', 'account',
	colocate_with => 'wallets', force_delegation => true)" >/dev/null
q coordinator "GRANT SELECT, UPDATE ON wallets TO app" >/dev/null
# Citus passes the grant on add_points (a distributed function) on, and
# refuses it on a worker; not the one on pg_idem's function.
q coordinator "GRANT EXECUTE ON FUNCTION add_points(bigint, text, bigint) TO app" >/dev/null
for node in coordinator worker1 worker2; do
	q "$node" "GRANT EXECUTE ON FUNCTION idem_try_insert(text, text, interval, bigint) TO app" >/dev/null
	check "$node: app may execute add_points | idem_try_insert | write idem_records" "t|t|f" \
		"$(q "$node" "SELECT has_function_privilege('app', 'add_points(bigint,text,bigint)', 'EXECUTE'),
			has_function_privilege('app', 'idem_try_insert(text,text,interval,bigint)', 'EXECUTE'),
			has_table_privilege('app', 'idem_records', 'INSERT')")"
done
q coordinator "SELECT idem_grant('deleg', 'app'); SELECT idem_grant('deleg-refused', 'app')" >/dev/null

echo "2. a storm of add_points as app, $STORM_CLIENTS clients, ${SECS}s"
storm_script deleg "$work/deleg.sql"
sent=$(STORM_USER=app storm "$work/deleg.sql" deleg 4000 "$SECS" 2>"$work/storm.err")
cat "$work/storm.err"
records=$(q coordinator "SELECT count(*) FROM idem_records WHERE scope = 'deleg'")
echo "  $sent messages, $records records"
check "pgbench clients that an error ended" 0 "$(grep -c 'aborted' "$work/storm.err" || true)"
check "some records" t "$([ "$records" -gt 0 ] && echo t || echo f)"
check "fewer records than messages" t "$([ "$records" -lt "$sent" ] && echo t || echo f)"
check "records not on their order's route" 0 "$(records_off_route deleg 4000)"
check "wallets whose points are not their recorded orders'" 0 "$(ledger_mismatches deleg 4000)"

n=$(sweep_count deleg)
echo "3. every order 1..$n once more, as app"
STORM_USER=app sweep "$work/deleg.sql" deleg 4000 "$n" >/dev/null
check "records | distinct orders | lowest | highest" "$n|$n|1|$n" \
	"$(q coordinator "SELECT count(*), count(DISTINCT key), min(key::bigint), max(key::bigint)
		FROM idem_records WHERE scope = 'deleg'")"
check "wallets whose points are not those of orders 1..$n once" 0 "$(closed_form_mismatches 4000 "$n")"

o=$((n + 101))
w=$((4000 + o % 100))
points="SELECT points FROM wallets WHERE id = $w"
before=$(q coordinator "$points")
"$PSQL" -X -q -h "$CITUS_DIR" -p "$CITUS_COORDINATOR_PORT" -U app -d "$CITUS_DB" -v ON_ERROR_STOP=1 \
	-c "BEGIN" -c "SELECT add_points($w, '$o', 5)" -c "ROLLBACK" >/dev/null
check "order $o rolled back: its records | wallet $w's points" "0|$before" \
	"$(q coordinator "SELECT count(*) FROM idem_records WHERE scope = 'deleg' AND key = '$o'")|$(q coordinator "$points")"

echo "4. the coordinator path as app: refused"
points="SELECT points FROM wallets WHERE id = 4000"
before=$(q coordinator "$points")
check "the CTE pattern: SQLSTATE" 25001 "$(app_sqlstate "BEGIN;
	WITH new AS (SELECT idem_try_insert('deleg-refused', '1', NULL, 4000) AS first)
	UPDATE wallets SET points = points + 5 FROM new WHERE id = 4000 AND new.first;
	COMMIT")"
check "idem_try_insert, then UPDATE: SQLSTATE" 25001 "$(app_sqlstate "BEGIN;
	SELECT idem_try_insert('deleg-refused', '2', NULL, 4000);
	UPDATE wallets SET points = points + 5 WHERE id = 4000;
	COMMIT")"
check "records of the refused orders" 0 \
	"$(q coordinator "SELECT count(*) FROM idem_records WHERE scope = 'deleg-refused'")"
check "wallet 4000's points" "$before" "$(q coordinator "$points")"

q coordinator "DROP FUNCTION add_points(bigint, text, bigint)" >/dev/null
finish
