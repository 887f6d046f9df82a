#!/usr/bin/env bash
# Exactly-once under load through the coordinator (as the superuser, pg_idem's
# owner): 8 pgbench clients, 20 % of the messages redeliveries (half of them
# racing the first delivery in another client), 10 % of the transactions
# rolled back (test/citus/stormlib.sh says how orders, wallets and points are
# made).
#
# 1. The CTE pattern (scope storm-cte, wallets 1000-1099): idem_try_insert
#    and the wallet's UPDATE in one statement of one transaction, routed by
#    Citus to one worker. After the storm every wallet holds exactly the
#    points of the orders that have a record (a record without its points,
#    or points twice, would break it), every record sits on its order's
#    route, and there are fewer records than messages. Then every order
#    1..N is delivered once more: each now has exactly one record and every
#    wallet holds the points of orders 1..N applied once, computed without
#    looking at pg_idem.
# 2. The claim protocol (scope storm-claim, wallets 1100-1199): idem_begin
#    in its own transaction; if acquired, the work (the wallet's UPDATE and
#    a row in claim_effects, colocated) in its own transaction, then
#    idem_complete, or after a rollback idem_release. After the storm no
#    claim is left in progress; no order's work committed twice
#    (claim_effects has one row per order) and the orders that worked are
#    exactly the completed ones; every wallet holds the points of its
#    completed orders, which also stored them as their result. After every
#    order is delivered once more, all N are completed, each worked once.
set -euo pipefail
. "$(dirname "$0")/../testlib.sh"
. "$(dirname "$0")/../stormlib.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
SECS=${STORM_SECONDS:-10}

echo "1. the CTE pattern, $STORM_CLIENTS clients, ${SECS}s"
reset_range storm-cte 1000
storm_script cte "$work/cte.sql"
sent=$(storm "$work/cte.sql" storm-cte 1000 "$SECS")
records=$(q coordinator "SELECT count(*) FROM idem_records WHERE scope = 'storm-cte'")
echo "  $sent messages, $records records"
check "some records" t "$([ "$records" -gt 0 ] && echo t || echo f)"
check "fewer records than messages (duplicates refused, rollbacks left none)" t \
	"$([ "$records" -lt "$sent" ] && echo t || echo f)"
check "records not on their order's route" 0 "$(records_off_route storm-cte 1000)"
check "records not completed" 0 \
	"$(q coordinator "SELECT count(*) FROM idem_records WHERE scope = 'storm-cte' AND status <> 'completed'")"
check "wallets whose points are not their recorded orders'" 0 "$(ledger_mismatches storm-cte 1000)"

n=$(sweep_count storm-cte)
echo "  every order 1..$n once more"
sweep "$work/cte.sql" storm-cte 1000 "$n" >/dev/null
check "records | distinct orders | lowest | highest" "$n|$n|1|$n" \
	"$(q coordinator "SELECT count(*), count(DISTINCT key), min(key::bigint), max(key::bigint)
		FROM idem_records WHERE scope = 'storm-cte'")"
check "wallets whose points are not those of orders 1..$n once" 0 "$(closed_form_mismatches 1000 "$n")"
check "wallets whose points are not their recorded orders'" 0 "$(ledger_mismatches storm-cte 1000)"

echo "2. the claim protocol, $STORM_CLIENTS clients, ${SECS}s"
reset_range storm-claim 1100
q coordinator "SET client_min_messages = warning; DROP TABLE IF EXISTS claim_effects;
	CREATE TABLE claim_effects (wallet bigint NOT NULL, order_id bigint NOT NULL);
	SELECT create_distributed_table('claim_effects', 'wallet', colocate_with => 'wallets')" >/dev/null
storm_script claim "$work/claim.sql"
sent=$(storm "$work/claim.sql" storm-claim 1100 "$SECS")
echo "  $sent messages; records: $(q coordinator "SELECT string_agg(status || ' ' || n, ', ') FROM (
	SELECT status, count(*) AS n FROM idem_records WHERE scope = 'storm-claim' GROUP BY 1 ORDER BY 1) s")"
check "claims left in progress" 0 \
	"$(q coordinator "SELECT count(*) FROM idem_records WHERE scope = 'storm-claim' AND status = 'in_progress'")"
check "some completed" t \
	"$(q coordinator "SELECT count(*) > 0 FROM idem_records WHERE scope = 'storm-claim' AND status = 'completed'")"
check "fewer records than messages" t \
	"$(q coordinator "SELECT count(*) < $sent FROM idem_records WHERE scope = 'storm-claim'")"
check "orders whose work committed more than once" 0 \
	"$(q coordinator "SELECT count(*) FROM (SELECT order_id FROM claim_effects GROUP BY 1 HAVING count(*) > 1) d")"
check "orders worked but not completed, or completed but not worked" 0 \
	"$(q coordinator "SELECT count(*) FROM (SELECT key::bigint AS order_id FROM idem_records
		WHERE scope = 'storm-claim' AND status = 'completed') c
		FULL JOIN (SELECT DISTINCT order_id FROM claim_effects) e USING (order_id)
		WHERE c.order_id IS NULL OR e.order_id IS NULL")"
check "records not on their order's route" 0 "$(records_off_route storm-claim 1100)"
check "completed results not their order's points" 0 \
	"$(q coordinator "SELECT count(*) FROM idem_records WHERE scope = 'storm-claim' AND status = 'completed'
		AND (result->>'pts')::bigint IS DISTINCT FROM key::bigint % 7 + 1")"
check "wallets whose points are not their completed orders'" 0 "$(ledger_mismatches storm-claim 1100 completed)"

n=$(sweep_count storm-claim)
echo "  every order 1..$n once more"
sweep "$work/claim.sql" storm-claim 1100 "$n" >/dev/null
check "completed | distinct orders | other records" "$n|$n|0" \
	"$(q coordinator "SELECT count(*) FILTER (WHERE status = 'completed'), count(DISTINCT key),
		count(*) FILTER (WHERE status <> 'completed') FROM idem_records WHERE scope = 'storm-claim'")"
check "work rows | distinct orders worked" "$n|$n" \
	"$(q coordinator "SELECT count(*), count(DISTINCT order_id) FROM claim_effects")"
check "wallets whose points are not those of orders 1..$n once" 0 "$(closed_form_mismatches 1100 "$n")"

q coordinator "DROP TABLE claim_effects" >/dev/null
finish
