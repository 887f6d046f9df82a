# shellcheck shell=bash
# Sourced by the cluster tests (test/citus/t/*.sh), which test/citus/run
# starts with the cluster's CITUS_* variables set: a few helpers that make
# a failed check print what was expected and what came, and the test exit
# non-zero at its end. Defines functions only.
#
#   q NODE SQL             the unaligned, tuples-only result of SQL on NODE
#                          (coordinator, worker1, worker2); an SQL error
#                          stops the test
#   sqlstate NODE SQL      the SQLSTATE of the error SQL raises on NODE, or
#                          `none`
#   check DESC EXPECTED ACTUAL
#                          records a failure if EXPECTED != ACTUAL
#   finish                 exits 1 if any check failed, else 0

: "${CITUS_CLUSTER:?run the cluster tests with test/citus/run}"
failures=0

q() {
	local node=$1
	shift
	"$CITUS_CLUSTER" psql "$CITUS_DIR" "$node" -At -c "$*"
}

sqlstate() {
	local node=$1 out
	shift
	if out=$("$CITUS_CLUSTER" psql "$CITUS_DIR" "$node" -At -v VERBOSITY=sqlstate -c "$*" 2>&1); then
		echo none
	else
		echo "$out" | sed -nE 's/^(psql:[^ ]* )?ERROR: +([0-9A-Z]{5}).*/\2/p' | head -n 1
	fi
}

check() {
	if [ "$2" = "$3" ]; then
		printf '  ok   %-64s %s\n' "$1" "$3"
	else
		printf '  FAIL %-64s expected %s, got %s\n' "$1" "$2" "$3"
		failures=$((failures + 1))
	fi
}

finish() {
	if [ "$failures" != 0 ]; then
		echo "$failures check(s) failed"
		exit 1
	fi
	exit 0
}
