# The purge worker's reconciliation step (pg_idem.purge_reconcile), where it
# meets claims it cannot settle and reconciliation functions that fail.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('node');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'pg_idem'
pg_idem.purge_naptime = '200ms'
pg_idem.purge_batch_size = 2
});
$node->start;

sub sql { return $node->safe_psql('postgres', $_[0]); }
sub status { return sql("SELECT $_[0] FROM idem_purge_status"); }

sub worker_pid
{
	return sql(
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_idem purge'});
}

sub wait_rounds
{
	my ($n) = @_;
	my $rounds = status('rounds');
	$node->poll_query_until('postgres',
		"SELECT rounds >= $rounds + $n FROM idem_purge_status")
	  or die "the worker ran no $n rounds";
	return;
}

sql('CREATE EXTENSION pg_idem');
$node->poll_query_until('postgres', 'SELECT rounds >= 1 FROM idem_purge_status')
  or die 'the worker runs no rounds';

# ---------------------------------------------------------------------------
note 'claims nothing can settle must not hide the others from reconciliation';

sql(q{
CREATE FUNCTION happened(scope text, key text) RETURNS boolean
    LANGUAGE sql AS 'SELECT true';
SELECT idem_configure('held', lease => '1 microsecond');
SELECT idem_configure('done', lease => '1 microsecond',
                      reconcile_function => 'happened(text, text)');
});
# Three claims of a scope without a reconciliation function, the oldest
# leases; then one that the function of scope 'done' settles.
sql(q{SELECT * FROM generate_series(1, 3) i, LATERAL idem_begin('held', 'h' || i)});
sql(q{SELECT * FROM idem_begin('done', 'd1')});
wait_rounds(10);
is(sql(q{SELECT status FROM idem_records WHERE scope = 'done'}),
	'completed',
	'batch size 2, 3 older claims without a reconciler: the claim of scope done is reconciled');
is(status('reconciled_completed'), 1, 'status: 1 reconciled completed');
is(sql(q{SELECT count(*) FROM idem_records WHERE scope = 'held' AND status = 'in_progress'}),
	3, 'the claims without a reconciler stay in progress');

# ---------------------------------------------------------------------------
note 'a reconciliation function that raises an error';

my $pid = worker_pid();
my $rounds = status('rounds');
my $offset = -s $node->logfile;
sql(q{
CREATE FUNCTION boom(scope text, key text) RETURNS boolean
    LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'boom'; END$$;
SELECT idem_configure('boom', lease => '1 microsecond',
                      reconcile_function => 'boom(text, text)');
SELECT * FROM idem_begin('boom', 'b1');
});
$node->wait_for_log(
	qr/WARNING:  idem_reconcile: the reconciliation function of scope "boom" failed for key "b1": boom/,
	$offset);
pass('the worker called the function, which raised an error, logged as a warning');
ok( $node->poll_query_until('postgres',
		"SELECT rounds >= $rounds + 3 AND reconciled_unknown >= 1 FROM idem_purge_status"),
	'the worker carries on with its rounds, reporting the claim unknown');
is(worker_pid(), $pid, 'the same worker process');

# The error stops neither the other scopes' claims nor the purge.
sql(q{SELECT * FROM idem_begin('done', 'after-boom', lease => '1 microsecond')});
ok( $node->poll_query_until(
		'postgres',
		q{SELECT status = 'completed' FROM idem_records WHERE scope = 'done' AND key = 'after-boom'}),
	'a claim of another scope, behind the one whose reconciler raises, is reconciled');
is(sql(q{SELECT status FROM idem_records WHERE scope = 'boom'}),
	'in_progress', 'the claim whose reconciler raises stays in progress');

my $purged = status('purged_total');
sql(q{SELECT idem_try_insert('expired', 'e' || i, '1 microsecond')
      FROM generate_series(1, 4) i});
ok( $node->poll_query_until(
		'postgres',
		q{SELECT count(*) = 0 FROM idem_records WHERE scope = 'expired'}),
	'the expired records are purged, by the same worker');
ok( $node->poll_query_until('postgres',
		"SELECT purged_total >= $purged + 4 FROM idem_purge_status"),
	'purged_total counts them');
is(worker_pid(), $pid, 'still the same worker process');
ok( !$node->log_contains(qr/background worker "pg_idem purge" \(PID $pid\) exited/),
	'the worker never exited');
$node->stop;

done_testing();
