# The purge worker as a PostgreSQL process: what it deletes and what it
# never deletes, its settings reloaded with SIGHUP, SIGTERM, kill -9, a
# restart of the server, DROP and CREATE EXTENSION under it, and a database
# without the extension. See src/pg/purge/purge_worker.cpp.
#
# Every wait polls (poll_query_until, wait_for_log). The only fixed sleep
# is the short window that shows the worker does NOT run a round while it
# naps for an hour: a negative can only be shown by letting time pass.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('node');
$node->init;
$node->start;
# The workers connect to their database when the server starts: it must
# exist by then.
$node->safe_psql('postgres', 'CREATE DATABASE idem_noext');
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'pg_idem'
pg_idem.purge_databases = 'postgres, idem_noext'
pg_idem.purge_naptime = '200ms'
# PostgreSQL::Test::Cluster turns it off; the kill -9 test needs it.
restart_after_crash = on
});
$node->restart;

# ---------------------------------------------------------------------------
# Helpers.

sub sql
{
	my ($query, $db) = @_;
	return $node->safe_psql($db // 'postgres', $query);
}

sub poll
{
	my ($query, $expected, $db) = @_;
	return $node->poll_query_until($db // 'postgres', $query, $expected // 't');
}

# One column of idem_purge_status in database postgres.
sub status
{
	my ($column) = @_;
	return sql("SELECT $column FROM idem_purge_status");
}

# The pid of the purge worker of $db, '' when there is none.
sub worker_pid
{
	my ($db) = @_;
	return sql(
		"SELECT pid FROM pg_stat_activity
		 WHERE backend_type = 'pg_idem purge' AND datname = '$db'");
}

# Waits for a purge worker of $db other than $old_pid; returns its pid.
sub wait_for_new_worker
{
	my ($db, $old_pid) = @_;
	$old_pid ||= 0;
	poll(
		"SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE backend_type = 'pg_idem purge' AND datname = '$db'
		   AND pid <> $old_pid")
	  or die "no new purge worker for $db";
	return worker_pid($db);
}

# Sets pg_idem.* settings with ALTER SYSTEM and reloads. Returns once a new
# session sees them: the postmaster has then re-read the configuration and
# signalled the workers (it does both in one go), which apply it at their
# next nap.
sub set_gucs
{
	my (%gucs) = @_;
	my @names;
	for my $name (sort keys %gucs)
	{
		sql("ALTER SYSTEM SET pg_idem.$name = '$gucs{$name}'");
		push @names, "setting = '$gucs{$name}' AND name = 'pg_idem.$name'";
	}
	sql('SELECT pg_reload_conf()');
	my $n = scalar @names;
	poll("SELECT count(*) = $n FROM pg_settings WHERE "
		  . join(' OR ', map { "($_)" } @names))
	  or die "the reload did not take";
	return;
}

# Waits for $n more purge rounds in database postgres.
sub wait_rounds
{
	my ($n) = @_;
	my $rounds = status('rounds');
	poll("SELECT rounds >= $rounds + $n FROM idem_purge_status")
	  or die "the worker ran no $n rounds";
	return;
}

# After set_gucs: waits for a round that ran wholly under the new settings
# (the round in progress, and one that started just as the signal came,
# may still have run under the old ones).
sub settle { wait_rounds(3); }

my $key_seq = 0;

# Writes $n records of $scope with the given ttl in one transaction;
# returns how many were new.
sub insert_records
{
	my ($scope, $n, $ttl) = @_;
	my $first = $key_seq + 1;
	$key_seq += $n;
	return sql(
		"SELECT count(*) FILTER (WHERE idem_try_insert('$scope', 'k' || i, '$ttl'))
		 FROM generate_series($first, $key_seq) i");
}

# Already expired: purge material.
sub insert_expired
{
	my ($scope, $n) = @_;
	return insert_records($scope, $n, '1 microsecond');
}

sub count_scope
{
	my ($scope, $status) = @_;
	my $filter = defined $status ? " AND status = '$status'" : '';
	return sql(
		"SELECT count(*) FROM idem_records WHERE scope = '$scope'$filter");
}

# Expired records created (and to be purged) since the counters were last
# reset; idem_purge_status.purged_total must come to exactly this.
my $expected_purged = 0;

sub wait_purged
{
	my ($name) = @_;
	poll("SELECT purged_total >= $expected_purged FROM idem_purge_status")
	  or die "purged_total never reached $expected_purged";
	is(status('purged_total'), $expected_purged, $name);
	return;
}

# How often $regex occurs in the server log from byte $offset on.
sub log_count
{
	my ($regex, $offset) = @_;
	my $log = slurp_file($node->logfile, $offset // 0);
	my $n = () = $log =~ /$regex/g;
	return $n;
}

# Waits until the worker $pid has finished $n more rounds (or naps),
# whether or not the extension is there: each round sets its backend state
# to active and back to idle, so pg_stat_activity.state_change moves on.
sub wait_worker_naps
{
	my ($pid, $n, $db) = @_;
	for (1 .. $n)
	{
		my $since = sql(
			"SELECT state_change FROM pg_stat_activity WHERE pid = $pid", $db);
		poll(
			"SELECT state_change > '$since' FROM pg_stat_activity WHERE pid = $pid",
			't', $db)
		  or die "worker $pid did not move on";
	}
	return;
}

my $not_installed_noext =
  qr/pg_idem purge worker: extension pg_idem is not installed in database "idem_noext"; waiting/;
my $not_installed_postgres =
  qr/pg_idem purge worker: extension pg_idem is not installed in database "postgres"; waiting/;

# ---------------------------------------------------------------------------
note 'one worker per database of pg_idem.purge_databases';

ok( poll(
		q{SELECT string_agg(datname || ' ' || application_name || ' '
		                    || wait_event_type || ' ' || wait_event, ', '
		                    ORDER BY datname)
		  FROM pg_stat_activity WHERE backend_type = 'pg_idem purge'},
		'idem_noext pg_idem purge Extension Extension, '
		  . 'postgres pg_idem purge Extension Extension'),
	'a worker per database, napping with wait event Extension');
my $pid = worker_pid('postgres');
my $noext_pid = worker_pid('idem_noext');
$node->wait_for_log(qr/pg_idem purge worker started for database "postgres"/);
$node->wait_for_log(qr/pg_idem purge worker started for database "idem_noext"/);
pass('both workers logged that they started');

# ---------------------------------------------------------------------------
note 'a database without the extension: logged once, then it waits';

$node->wait_for_log($not_installed_noext);
$node->wait_for_log($not_installed_postgres);
wait_worker_naps($noext_pid, 5, 'idem_noext');
wait_worker_naps($pid, 5);
is(log_count($not_installed_noext), 1,
	'idem_noext: "not installed" logged exactly once after several naps');
is(log_count($not_installed_postgres),
	1, 'postgres: "not installed" logged exactly once before CREATE EXTENSION');
is(worker_pid('idem_noext'), $noext_pid, 'the idem_noext worker waits, it does not exit');

# ---------------------------------------------------------------------------
note 'CREATE EXTENSION under the running worker';

sql('CREATE EXTENSION pg_idem');
ok(poll('SELECT rounds >= 1 FROM idem_purge_status'),
	'the worker starts its rounds once the extension exists');
is(worker_pid('postgres'), $pid, 'the same worker process');
is( status(
		'worker_pid, purged_total, reconciled_completed, reconciled_failed,
		 reconciled_unknown, backlog_rows, oldest_expired_age IS NULL, expired_leases'),
	"$pid|0|0|0|0|0|t|0",
	'status: the worker pid, nothing purged or waiting');

# ---------------------------------------------------------------------------
note 'expired records are purged, live ones are not';

is(insert_records('live', 20, '1 hour'), 20, '20 live records');
is(insert_expired('expired', 30), 30, '30 expired records');
$expected_purged += 30;
wait_purged('purged_total counts the 30 expired records');
is(count_scope('expired'), 0, 'the expired records are gone');
wait_rounds(3);
is(count_scope('live'), 20, 'the live records are all there, several rounds later');
# clock_timestamp(), not now(): a round may end after this statement's
# transaction began, and before the view is read.
is( status(
		'backlog_rows, oldest_expired_age IS NULL, last_round_at <= clock_timestamp(),
		 last_round_rows >= 0, last_round_ms >= 0'),
	'0|t|t|t|t',
	'status: no backlog, a last round in the past');
is(status('worker_pid'), worker_pid('postgres'),
	'status: worker_pid is the pid in pg_stat_activity');

# ---------------------------------------------------------------------------
note 'claims in progress are never purged';

set_gucs(purge_reconcile => 'off');
settle();
sql(q{
CREATE FUNCTION happened(scope text, key text) RETURNS boolean
    LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION no_idea(scope text, key text) RETURNS boolean
    LANGUAGE sql AS 'SELECT NULL::boolean';
SELECT idem_configure('done', ttl => '1 microsecond', lease => '1 microsecond',
                      reconcile_function => 'happened(text, text)');
SELECT idem_configure('held', ttl => '1 microsecond', lease => '1 microsecond');
SELECT idem_configure('asked', ttl => '1 microsecond', lease => '1 microsecond',
                      reconcile_function => 'no_idea(text, text)');
});
# Oldest lease first: 'done', then the three of 'held', then 'asked'.
for my $claim (['done', 1], ['held', 3], ['asked', 1])
{
	my ($scope, $n) = @$claim;
	is( sql(
			"SELECT string_agg(c.status, ',') FROM generate_series(1, $n) i,
			 LATERAL idem_begin('$scope', 'c' || i) c"),
		join(',', ('acquired') x $n),
		"$n claim(s) in scope $scope");
}
is( sql(
		q{SELECT count(*) FROM idem_records WHERE status = 'in_progress'
		  AND expires_at <= now() AND lease_expires_at <= now()}),
	5,
	'5 claims in progress, past both their ttl and their lease');
is(insert_expired('expired', 5), 5, 'and 5 expired completed records');
$expected_purged += 5;
wait_purged('purge_reconcile off: the 5 completed records are purged');
wait_rounds(3);
is( sql(
		q{SELECT string_agg(scope || ':' || count, ',' ORDER BY scope) FROM
		  (SELECT scope, count(*) FROM idem_records
		   WHERE status = 'in_progress' GROUP BY scope) s}),
	'asked:1,done:1,held:3',
	'purge_reconcile off: the 5 claims are still in progress');
is(status('reconciled_completed, reconciled_failed, reconciled_unknown'),
	'0|0|0', 'purge_reconcile off: nothing reconciled');
is(status('expired_leases'), 5, 'status: 5 expired leases');

set_gucs(purge_reconcile => 'on');
ok( poll(
		q{SELECT reconciled_completed >= 1 AND reconciled_unknown >= 3
		  FROM idem_purge_status}),
	'purge_reconcile on: the worker reconciles, round after round');
$expected_purged += 1;
wait_purged(
	"the claim reconciled as completed, expired by its scope's ttl, is then purged"
);
is(count_scope('done'), 0, 'scope done is empty');
is(status('reconciled_completed, reconciled_failed'),
	'1|0', 'status: 1 reconciled completed, none failed');
is(count_scope('held', 'in_progress'),
	3, 'purge_reconcile on, no reconciler: the 3 claims stay in progress');
is(count_scope('asked', 'in_progress'),
	1, 'a reconciler that does not know: the claim stays in progress');
is(status('expired_leases'), 4, 'status: 4 expired leases');

# ---------------------------------------------------------------------------
note 'SIGHUP: pg_idem.purge_batch_size and pg_idem.purge_rate_limit';

# At 1 row/s, a full batch of 5 is followed by a 5 s nap (which a SIGHUP
# cuts short): each batch is a transaction of its own, so the count of the
# records left shows each batch.
set_gucs(purge_batch_size => 5, purge_rate_limit => 1);
settle();
is(insert_expired('batch', 26), 26, '26 expired records');
$expected_purged += 26;
poll("SELECT count(*) < 26 FROM idem_records WHERE scope = 'batch'");
is(count_scope('batch'), 21,
	'batch size 5: the first batch deletes 5, then the rate limit holds the worker');
my $rounds = status('rounds');
set_gucs(purge_batch_size => 7);
poll("SELECT count(*) < 21 FROM idem_records WHERE scope = 'batch'");
is(count_scope('batch'), 14,
	'batch size reloaded to 7 in the middle of the round: the next batch deletes 7');
is(status('rounds'), $rounds, 'still the same round');
# From here on the worker naps for an hour after each round.
set_gucs(purge_rate_limit => 0, purge_naptime => 3600000);
wait_purged('rate limit reloaded to 0: the rest is purged');
is(status('last_round_rows, rounds'), '26|' . ($rounds + 1), 'all 26 in that one round');

# ---------------------------------------------------------------------------
note 'SIGHUP: pg_idem.purge_naptime';

is(insert_expired('nap', 12), 12, '12 expired records');
usleep(1_500_000);
is(status('rounds'), $rounds + 1,
	'naptime 1 h: no round for 1.5 s (7 naps of the old 200 ms)');
is(count_scope('nap'), 12, 'naptime 1 h: the expired records wait');

# ---------------------------------------------------------------------------
note 'SIGINT (pg_cancel_backend) during a nap: nothing to cancel, the worker stays';

is(sql("SELECT pg_cancel_backend($pid)"), 't', 'pg_cancel_backend');
usleep(500_000);
is(sql("SELECT count(*) FROM pg_stat_activity WHERE pid = $pid"), '1',
	'the same worker process is still there');
is(status('worker_pid'), $pid, 'and still in idem_purge_status');

# ---------------------------------------------------------------------------
note 'SIGTERM (pg_terminate_backend), out of a 1 h nap';

my $offset = -s $node->logfile;
my $t0 = sql('SELECT clock_timestamp()');
my $started = time;
is(sql("SELECT pg_terminate_backend($pid)"), 't', 'pg_terminate_backend');
ok(poll("SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"),
	'the worker exits');
my $took = time - $started;
cmp_ok($took, '<', 10, 'promptly');
note sprintf('it took %.2f s', $took);
$node->wait_for_log(
	qr/FATAL:  terminating background worker "pg_idem purge" due to administrator command/,
	$offset);
pass('it logs that it was terminated by the administrator');
$node->wait_for_log(
	qr/background worker "pg_idem purge" \(PID $pid\) exited with exit code 1/,
	$offset);
pass('it exits with exit code 1, like any error exit');
note 'status while no worker runs: worker_pid = ' . status('worker_pid');
is(insert_expired('term', 6), 6, '6 expired records while it is down');
my $new_pid = wait_for_new_worker('postgres', $pid);
isnt($new_pid, $pid, 'the postmaster starts it again');
is( sql(
		"SELECT backend_start - '$t0' >= interval '9 s' FROM pg_stat_activity
		 WHERE pid = $new_pid"),
	't',
	'after bgw_restart_time (10 s)');
$pid = $new_pid;
$expected_purged += 12 + 6;
wait_purged(
	'its first round purges the 12 + 6 expired records; purged_total carries on');
is(status('worker_pid'), $pid, 'status: the new worker pid');
ok( !$node->log_contains(
		qr/terminated by signal|reinitializing|crash/, $offset),
	'no crash: the other processes were left alone');
is(worker_pid('idem_noext'), $noext_pid, 'the idem_noext worker was not touched');

# ---------------------------------------------------------------------------
note 'SIGHUP: pg_idem.purge_naptime back to 200 ms';

set_gucs(purge_naptime => 200, purge_batch_size => 1000);
ok(poll('SELECT rounds >= ' . ($rounds + 5) . ' FROM idem_purge_status'),
	'rounds again, one after the other');
is(insert_expired('nap', 4), 4, '4 more expired records');
$expected_purged += 4;
wait_purged('purged at the next rounds');

# ---------------------------------------------------------------------------
note 'kill -9: crash restart of the whole server';

# The worker commits asynchronously, so a crash can undo its last purges
# (they are then redone). A consumer's durable commit flushes them, since
# the WAL is one stream: here, a record written after the purge.
is(insert_records('durable', 1, '1 day'), 1,
	'a consumer commits after the purge (synchronous_commit = on)');
$offset = -s $node->logfile;
kill 'KILL', $pid;
$node->wait_for_log(
	qr/background worker "pg_idem purge" \(PID $pid\) was terminated by signal 9/,
	$offset);
$node->wait_for_log(qr/all server processes terminated; reinitializing/,
	$offset);
pass('the postmaster restarts all processes (crash recovery)');
$new_pid = wait_for_new_worker('postgres', $pid);
isnt($new_pid, $pid, 'the worker is back');
$pid = $new_pid;
$noext_pid = wait_for_new_worker('idem_noext', $noext_pid);
ok($noext_pid, 'so is the idem_noext worker');
ok(poll('SELECT rounds >= 1 FROM idem_purge_status'), 'it runs rounds');
# Shared memory is made anew by crash recovery: the counters restart.
$expected_purged = 0;
is(status('worker_pid, purged_total'), "$pid|0",
	'status: the new pid, the counters start again at zero');
is(insert_expired('kill9', 9), 9, '9 expired records');
$expected_purged += 9;
wait_purged('purged after the crash restart');
is(count_scope('live'), 20, 'the live records survived');
is(sql(q{SELECT count(*) FROM idem_records WHERE status = 'in_progress'}),
	4, 'and so did the claims in progress');

# ---------------------------------------------------------------------------
note 'restart of the server';

$offset = -s $node->logfile;
$node->restart;
$node->wait_for_log(qr/pg_idem purge worker started for database "postgres"/,
	$offset);
$new_pid = wait_for_new_worker('postgres', $pid);
isnt($new_pid, $pid, 'the worker is back after a restart');
$pid = $new_pid;
ok(poll('SELECT rounds >= 1 FROM idem_purge_status'), 'it runs rounds');
$expected_purged = 0;
is(status('worker_pid, purged_total'), "$pid|0",
	'status: the new pid, the counters start again at zero');
is(insert_expired('restart', 8), 8, '8 expired records');
$expected_purged += 8;
wait_purged('purged after the restart');
is(count_scope('live'), 20, 'the live records are still there');
$noext_pid = wait_for_new_worker('idem_noext', $noext_pid);
$node->wait_for_log($not_installed_noext, $offset);
wait_worker_naps($noext_pid, 5, 'idem_noext');
is(log_count($not_installed_noext, $offset),
	1, 'idem_noext: "not installed" logged once again by the new worker');

# ---------------------------------------------------------------------------
note 'DROP EXTENSION and CREATE EXTENSION under the running worker';

$offset = -s $node->logfile;
sql('DROP EXTENSION pg_idem');
$node->wait_for_log($not_installed_postgres, $offset);
wait_worker_naps($pid, 5);
is(log_count($not_installed_postgres, $offset),
	1, 'after DROP EXTENSION: "not installed" logged once, after several naps');
is(worker_pid('postgres'), $pid, 'the worker keeps running');
sql('CREATE EXTENSION pg_idem');
is(status('worker_pid, purged_total'), "$pid|$expected_purged",
	'after CREATE EXTENSION: the same worker, its counters carried on');
is(insert_records('live', 5, '1 hour'), 5, '5 live records');
is(insert_expired('recreated', 11), 11, '11 expired records');
$expected_purged += 11;
wait_purged('the worker purges the new extension\'s table');
wait_rounds(3);
is(count_scope('live'), 5, 'and leaves its live records alone');
is(worker_pid('postgres'), $pid, 'still the same worker');

$node->stop;
done_testing();
