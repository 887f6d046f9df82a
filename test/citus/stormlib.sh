# shellcheck shell=bash
# Sourced by the cluster tests that storm pg_idem through the coordinator
# with 8 clients, pgbench or psql (test/citus/t/010_storm.sh and later),
# after testlib.sh. Defines functions only. The pgbench clients connect as
# $STORM_USER (default postgres, pg_idem's owner).
#
# A message is an order: its id `o` decides everything else, so that a test
# can compute what the wallets must hold without trusting pg_idem's records:
#
#   wallet  = BASE + o % 100      (the route: the record lives in its shard)
#   points  = o % 7 + 1
#
# Each pgbench client sends fresh orders 1 + client_id + CLIENTS * n (n its
# own counter; clients never send the same fresh id) and, with probability
# REDELIVER %, a redelivery instead: half of them one of the ~16 newest ids
# of all clients (often still in flight in another client, so two
# transactions race for one key), half any id sent so far. With probability
# ROLLBACK % the transaction that carries a message ends in ROLLBACK.
#
#   storm_script KIND FILE  writes the pgbench script of KIND to FILE:
#       cte    BEGIN; WITH new AS (SELECT idem_try_insert(...)) UPDATE wallets
#              ... WHERE new.first; COMMIT or ROLLBACK
#       deleg  BEGIN; SELECT add_points(wallet, order, points); COMMIT or
#              ROLLBACK (a function the test creates and delegates)
#       own    BEGIN; WITH new AS (SELECT idem_try_insert_row('own_dedup',
#              ...)) UPDATE wallets ... WHERE new.first; COMMIT or ROLLBACK
#              (own_dedup: the test's dedup table, colocated with wallets)
#       claim  idem_begin; if acquired: BEGIN; UPDATE wallets; INSERT INTO
#              claim_effects; COMMIT then idem_complete, or ROLLBACK then
#              idem_release
#   storm FILE SCOPE BASE SECONDS [PGBENCH ARG...]
#       8 clients on the coordinator for SECONDS, 20 % redeliveries and 10 %
#       rollbacks (PGBENCH ARG may override them: -D redeliver=0 ...); prints
#       the number of transactions pgbench ran. A client that an error aborts
#       is not a failure here (the caller checks the outcome), but pgbench must
#       have run at least one transaction.
#   sweep FILE SCOPE BASE COUNT [PGBENCH ARG...]
#       redelivers every order 1 .. COUNT (COUNT a multiple of 8) once, with
#       8 clients and no rollbacks
#   expected_points BASE COUNT
#       SQL: (id, points) of every wallet of the range after orders 1 .. COUNT
#       were each applied once
#   ledger_mismatches SCOPE BASE [STATUS]
#       the wallets of BASE .. BASE + 99 whose points are not the sum of the
#       points of the orders that have a record in SCOPE (of STATUS, default
#       any)
#   psql_storm SCOPE BASE SECONDS ERRFILE
#       the cte storm from 8 psql clients that carry on after errors (a
#       node down); client C's errors are in ERRFILE.C
#   psql_storm_stop ERRFILE  ends that storm now (from another process)
#   reset_range SCOPE BASE  zero points of the range, delete the records of SCOPE
#   sweep_count SCOPE       a COUNT for sweep that covers every order sent
#   closed_form_mismatches BASE COUNT
#       the wallets of BASE .. BASE + 99 whose points are not those of
#       expected_points
#   records_off_route SCOPE BASE
#       the records of SCOPE whose route is not their order's wallet

STORM_CLIENTS=8

storm_script() {
	local kind=$1 file=$2
	cat >"$file" <<'EOF'
\set r random(1, 100)
\if :r <= :redeliver and :n > 0
\if :r <= :redeliver / 2
\set order random(greatest(1, :clients * :n - 16), :clients * :n)
\else
\set order random(1, :clients * :n)
\endif
\else
\set order 1 + :client_id + :clients * :n
\set n :n + 1
\endif
\set wallet :base + :order % 100
\set pts :order % 7 + 1
\set rb random(1, 100) <= :rollback
EOF
	case $kind in
	cte)
		cat >>"$file" <<'EOF'
BEGIN;
WITH new AS (SELECT idem_try_insert(':scope', ':order', NULL, :wallet) AS first)
UPDATE wallets SET points = points + :pts FROM new WHERE id = :wallet AND new.first;
\if :rb
ROLLBACK;
\else
COMMIT;
\endif
EOF
		;;
	deleg)
		cat >>"$file" <<'EOF'
BEGIN;
SELECT add_points(:wallet, ':order', :pts);
\if :rb
ROLLBACK;
\else
COMMIT;
\endif
EOF
		;;
	own)
		cat >>"$file" <<'EOF'
BEGIN;
WITH new AS (SELECT idem_try_insert_row('own_dedup', jsonb_build_object('wallet', :wallet, 'order_id', :order)) AS first)
UPDATE wallets SET points = points + :pts FROM new WHERE id = :wallet AND new.first;
\if :rb
ROLLBACK;
\else
COMMIT;
\endif
EOF
		;;
	claim)
		cat >>"$file" <<'EOF'
SELECT (status = 'acquired')::int AS acquired, coalesce(token::text, '') AS token
FROM idem_begin(':scope', ':order', lease => '1 hour', route => :wallet) \gset
\if :acquired
BEGIN;
UPDATE wallets SET points = points + :pts WHERE id = :wallet;
INSERT INTO claim_effects (wallet, order_id) VALUES (:wallet, :order);
\if :rb
ROLLBACK;
SELECT idem_release(':scope', ':order', ':token', route => :wallet);
\else
COMMIT;
SELECT idem_complete(':scope', ':order', ':token', '{"pts": :pts}', route => :wallet);
\endif
\endif
EOF
		;;
	*)
		echo "storm_script: unknown kind $kind" >&2
		return 2
		;;
	esac
}

# pgbench on the coordinator; prints its transaction count.
_pgbench() {
	local out rc=0 n
	out=$("$PG_BIN/pgbench" -n -h "$CITUS_DIR" -p "$CITUS_COORDINATOR_PORT" -U "${STORM_USER:-postgres}" \
		-c "$STORM_CLIENTS" -j 2 -D clients="$STORM_CLIENTS" -D n=0 "$@" "$CITUS_DB" 2>&1) || rc=$?
	n=$(echo "$out" | sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p')
	echo "$out" | grep -E 'aborted|error|ERROR' | sed -E 's/[0-9]+/N/g' | sort | uniq -c | sort -rn | head -n 5 | sed 's/^/    pgbench: /' >&2 || true
	if [ -z "$n" ] || [ "$n" = 0 ]; then
		echo "$out" | tail -n 20 >&2
		echo "pgbench ran nothing (exit $rc)" >&2
		return 1
	fi
	echo "$n"
}

storm() {
	local file=$1 scope=$2 base=$3 seconds=$4
	shift 4
	_pgbench -f "$file" -T "$seconds" -D scope="$scope" -D base="$base" \
		-D redeliver=20 -D rollback=10 "$@"
}

sweep() {
	local file=$1 scope=$2 base=$3 count=$4
	shift 4
	_pgbench -f "$file" -t $((count / STORM_CLIENTS)) -D scope="$scope" -D base="$base" \
		-D redeliver=0 -D rollback=0 "$@"
}

expected_points() {
	echo "SELECT $1 + o % 100 AS id, sum(o % 7 + 1) AS points
		FROM generate_series(1, $2) o GROUP BY 1"
}

ledger_mismatches() {
	q coordinator "WITH recorded AS (
			SELECT route AS id, sum(key::bigint % 7 + 1) AS points
			FROM idem_records WHERE scope = '$1' ${3:+AND status = '$3'} GROUP BY route)
		SELECT count(*) FROM wallets w LEFT JOIN recorded r USING (id)
		WHERE w.id BETWEEN $2 AND $2 + 99 AND w.points <> coalesce(r.points, 0)"
}

closed_form_mismatches() {
	q coordinator "WITH e AS ($(expected_points "$1" "$2"))
		SELECT count(*) FROM wallets w LEFT JOIN e USING (id)
		WHERE w.id BETWEEN $1 AND $1 + 99 AND w.points <> coalesce(e.points, 0)"
}

records_off_route() {
	q coordinator "SELECT count(*) FROM idem_records
		WHERE scope = '$1' AND route <> $2 + key::bigint % 100"
}

# A rerun on a kept cluster starts from zero: the range's wallets and the
# scope's records.
reset_range() {
	q coordinator "UPDATE wallets SET points = 0 WHERE id BETWEEN $2 AND $2 + 99;
		DELETE FROM idem_records WHERE scope = '$1'" >/dev/null
}

# The orders a sweep must cover: every id sent so far (the highest one with a
# record, or more), rounded up to a multiple of the clients.
sweep_count() {
	q coordinator "SELECT (coalesce(max(key::bigint), 0) / $STORM_CLIENTS + 1) * $STORM_CLIENTS
		FROM idem_records WHERE scope = '$1'"
}

# The cte storm from 8 psql clients that carry on after an error (pgbench
# 15 ends a client at its first error): each reads its messages, made as
# storm_script makes them, from awk; an error aborts its transaction only,
# and the client waits 0.2 s before its next message. The wait keeps the
# attempts to connect to a node that is down few: each may pick the node's
# own port as its source port (the test ports lie in Linux's ephemeral
# range) and connect to itself, and the node cannot listen on its port
# again until that socket's TIME_WAIT ends (60 s).
# Runs SECONDS, or until psql_storm_stop; each client's errors go to
# ERRFILE.CLIENT, the pids of the clients' timeout to ERRFILE.pids.
psql_storm() {
	local scope=$1 base=$2 seconds=$3 errs=$4 c
	for c in $(seq 0 $((STORM_CLIENTS - 1))); do
		awk -v c="$c" -v k="$STORM_CLIENTS" -v base="$base" -v scope="$scope" -v seed="$RANDOM" '
		BEGIN {
			srand(seed)
			for (n = 0; n < 1000000;) {
				r = int(rand() * 100) + 1
				if (r <= 20 && n > 0) {
					hi = k * n
					lo = r <= 10 ? hi - 16 : 1
					if (lo < 1) lo = 1
					o = lo + int(rand() * (hi - lo + 1))
				} else {
					o = 1 + c + k * n++
				}
				w = base + o % 100
				printf "BEGIN;\nWITH new AS (SELECT idem_try_insert(\047%s\047, \047%d\047, NULL, %d) AS first)\n", scope, o, w
				printf "UPDATE wallets SET points = points + %d FROM new WHERE id = %d AND new.first;\n", o % 7 + 1, w
				print "\\if :ERROR\nROLLBACK;\nSELECT pg_sleep(0.2);\n\\else"
				print (rand() < 0.1 ? "ROLLBACK;" : "COMMIT;")
				print "\\endif"
			}
		}' 2>/dev/null | timeout "$seconds" "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=0 -h "$CITUS_DIR" \
			-p "$CITUS_COORDINATOR_PORT" -U postgres -d "$CITUS_DB" >/dev/null 2>"$errs.$c" &
		echo $! >>"$errs.pids"
	done
	wait
}

psql_storm_stop() {
	local pid
	for pid in $(cat "$1.pids"); do
		kill "$pid" 2>/dev/null || true
	done
}
