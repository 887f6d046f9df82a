# The purge worker vacuums idem_records itself when autovacuum's own test
# says the table is due (src/pg/purge/purge_vacuum.cpp), so that purged space is
# reused without waiting for autovacuum's next visit. Autovacuum is off on
# this server: every vacuum of the table seen here is the worker's.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IdemTap;

my $node = PostgreSQL::Test::Cluster->new('node');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'pg_idem'
pg_idem.purge_databases = 'postgres'
pg_idem.purge_naptime = '200ms'
pg_idem.purge_batch_size = 5000
autovacuum = off
});
$node->start;

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub poll
{
	my ($query) = @_;
	return $node->poll_query_until('postgres', $query);
}

sub vacuums
{
	return sql(
		q{SELECT vacuum_count FROM pg_stat_user_tables
		  WHERE relname = 'idem_records'});
}

# Waits until the worker vacuumed idem_records more than $before times.
sub vacuumed_since
{
	my ($before) = @_;
	return poll(
		"SELECT vacuum_count > $before FROM pg_stat_user_tables
		 WHERE relname = 'idem_records'");
}

sub heap_pages
{
	return sql(q{SELECT pg_relation_size('idem_records') / 8192});
}

my $key_seq = 0;

# $n records that expire at once, then waits until the worker purged them.
sub churn
{
	my ($n) = @_;
	my $first = $key_seq + 1;
	$key_seq += $n;
	sql("SELECT count(*) FROM generate_series($first, $key_seq) i
		 WHERE idem_try_insert('churn', 'k' || i, '1 microsecond')");
	poll(q{SELECT count(*) = 0 FROM idem_records WHERE scope = 'churn'})
	  or die 'the worker did not purge the churn';
	return;
}

sub set_guc_and_wait
{
	my ($name, $value) = @_;
	IdemTap::set_guc($node, $name, $value);
	# Let a round run under the new setting.
	my $rounds = sql('SELECT rounds FROM idem_purge_status');
	poll("SELECT rounds >= $rounds + 3 FROM idem_purge_status")
	  or die 'no rounds';
	return;
}

sql('CREATE EXTENSION pg_idem');
sql(q{SELECT count(*) FROM generate_series(1, 2000) i
	  WHERE idem_try_insert('live', 'k' || i, '1 day')});
is(vacuums(), 0, 'no vacuum of idem_records yet');

note 'purged space is vacuumed by the worker and reused';
churn(20000);
ok(poll('SELECT vacuum_count >= 1 FROM pg_stat_user_tables
	WHERE relname = \'idem_records\''),
	'the worker vacuumed idem_records after purging 20,000 records');
ok(poll(q{SELECT n_dead_tup < 1000 FROM pg_stat_user_tables
	WHERE relname = 'idem_records'}),
	'the dead tuples are gone');
my $pages = heap_pages();
# Each churn's space is freed by the worker's vacuum after its purge; the
# next churn waits for that vacuum, or it would meet a heap still full.
for (1 .. 2)
{
	my $vacuums = vacuums();
	churn(20000);
	poll("SELECT vacuum_count > $vacuums AND n_dead_tup < 1000 FROM pg_stat_user_tables
		  WHERE relname = 'idem_records'")
	  or die 'the worker did not vacuum after the churn';
}
my $after = heap_pages();
cmp_ok($after, '<=', $pages * 1.1,
	"the heap reuses the space: $pages pages, then $after after two more churns");
is(sql(q{SELECT count(*) FROM idem_records WHERE scope = 'live'}), 2000,
	'the live records are untouched');
ok(sql(q{SELECT pg_stat_get_vacuum_count('idem_records'::regclass) >= 3}),
	'a vacuum after each churn');
my $activity = sql(
	q{SELECT wait_event FROM pg_stat_activity WHERE backend_type = 'pg_idem purge'});
ok(defined $activity, 'the worker is still running');

note 'pg_idem.purge_vacuum = off';
set_guc_and_wait('pg_idem.purge_vacuum', 'off');
my $before = vacuums();
churn(20000);
# Give the worker rounds in which it would have vacuumed.
my $rounds = sql('SELECT rounds FROM idem_purge_status');
poll("SELECT rounds >= $rounds + 5 FROM idem_purge_status") or die 'no rounds';
is(vacuums(), $before, 'no vacuum while pg_idem.purge_vacuum is off');
cmp_ok(sql(q{SELECT n_dead_tup FROM pg_stat_user_tables
	WHERE relname = 'idem_records'}), '>=', 20000, 'the dead tuples stay');

note 'autovacuum_enabled = false on the table is respected';
set_guc_and_wait('pg_idem.purge_vacuum', 'on');
sql('ALTER TABLE idem_records SET (autovacuum_enabled = false)');
$before = vacuums();
churn(20000);
$rounds = sql('SELECT rounds FROM idem_purge_status');
poll("SELECT rounds >= $rounds + 5 FROM idem_purge_status") or die 'no rounds';
is(vacuums(), $before, 'no vacuum of a table with autovacuum_enabled = false');
sql('ALTER TABLE idem_records RESET (autovacuum_enabled)');
ok(poll('SELECT vacuum_count > ' . $before . ' FROM pg_stat_user_tables
	WHERE relname = \'idem_records\''),
	'vacuumed again once the table allows it');

note 'autovacuum_vacuum_max_threshold caps the threshold, as for autovacuum';
SKIP:
{
	skip 'autovacuum_vacuum_max_threshold is new in PostgreSQL 18', 1
	  if $node->pg_version < 18;
	# A base threshold of 100,000 dead tuples, capped at 500.
	sql(q{ALTER TABLE idem_records SET (autovacuum_vacuum_threshold = 100000,
		  autovacuum_vacuum_max_threshold = 500)});
	my $before = vacuums();
	churn(1000);
	ok(vacuumed_since($before),
		'the worker vacuumed after 1,000 dead tuples, over the cap');
	sql(q{ALTER TABLE idem_records RESET (autovacuum_vacuum_threshold,
		  autovacuum_vacuum_max_threshold)});
}

note 'a transaction_timeout meant for clients does not end the worker';
SKIP:
{
	skip 'transaction_timeout is new in PostgreSQL 17', 3
	  if $node->pg_version < 17;
	# Every session started after the reload has it, but this test's own.
	local $ENV{PGOPTIONS} = '-c transaction_timeout=0';
	sql(q{ALTER SYSTEM SET transaction_timeout = '100ms'});
	# The worker's vacuum, throttled as autovacuum's (a few milliseconds a
	# page with this limit), takes longer than that.
	set_guc_and_wait('autovacuum_vacuum_cost_limit', '10');
	my $worker = sql(q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_idem purge'});
	my $before = vacuums();
	churn(20000);
	ok(vacuumed_since($before),
		'the worker vacuumed idem_records for longer than transaction_timeout');
	is(sql(q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_idem purge'}),
		$worker, 'the same worker runs');
	ok(!(slurp_file($node->logfile) =~ /transaction timeout/),
		'no transaction timeout in the server log');
	sql('ALTER SYSTEM RESET transaction_timeout');
	sql('ALTER SYSTEM RESET autovacuum_vacuum_cost_limit');
	sql('SELECT pg_reload_conf()');
}

ok(!(slurp_file($node->logfile) =~ /terminated by signal|TRAP|PANIC/),
	'no crash in the server log');
$node->stop;
done_testing();
