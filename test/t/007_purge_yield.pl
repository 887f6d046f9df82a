# The purge worker pauses between batches while durable commits wait for the
# write-ahead log (src/pg/purge/purge_yield.cpp, pg_idem.purge_yield), and still
# purges everything. A commit that waits for a synchronous standby that
# never comes stands for a commit-bound consumer: it waits for as long as
# the test needs (wait event SyncRep; sync rep needs max_wal_senders > 0,
# hence allows_streaming).
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IdemTap qw(set_guc);

my $node = PostgreSQL::Test::Cluster->new('node');
# Without data checksums, which 18's initdb turns on: with them, the first
# reader of a page after a checkpoint logs its image for the hint bits it
# sets (wal_log_hints or not), and the purge's deletes carry none. (15 and
# 17's Cluster.pm ignore the option: their initdb has them off.)
$node->init(allows_streaming => 1, no_data_checksums => 1);
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'pg_idem'
pg_idem.purge_databases = 'postgres'
pg_idem.purge_naptime = '100ms'
pg_idem.purge_batch_size = 100
synchronous_standby_names = 'nobody'
synchronous_commit = local
log_min_messages = debug1
# Every full-page image after the checkpoint below is the worker's (no
# autovacuum, and no images for the hint bits that readers set).
autovacuum = off
wal_log_hints = off
});
$node->start;

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub poll { return $node->poll_query_until('postgres', $_[0]); }

my $key_seq = 0;

# $n records that expire at once; returns once the worker purged them all,
# with the server log written meanwhile.
sub purge_log
{
	my ($n) = @_;
	my $offset = -s $node->logfile;
	my $first = $key_seq + 1;
	$key_seq += $n;
	sql("SELECT count(*) FROM generate_series($first, $key_seq) i
		 WHERE idem_try_insert('yield', 'k' || i, '1 microsecond')");
	ok(poll(q{SELECT count(*) = 0 FROM idem_records WHERE scope = 'yield'}),
		"the worker purged all $n records");
	return slurp_file($node->logfile, $offset);
}

my $pause = qr/pg_idem purge: pausing \d+ ms, commits are waiting for the WAL/;

sql('CREATE EXTENSION pg_idem');
sql('CREATE TABLE business (id int)');

note 'no commit waits: the worker never pauses';
unlike(purge_log(2000), $pause, 'no pause while no commit waits');

note 'the worker compresses its full-page images (the server does not)';
is(sql('SHOW wal_compression'), 'off', 'wal_compression is off for the server');
# Records that expire in 3 s, so that their pages are written before a
# checkpoint and their purge, after it, logs each page's image. On fresh
# pages (TRUNCATE), so that no pruning of earlier purges logs them first.
sql('TRUNCATE idem_records');
sql(q{SELECT count(*) FROM generate_series(1, 2000) i
	  WHERE idem_try_insert('yield', 'images' || i, '3 seconds')});
sql('CHECKPOINT');
my $start = sql('SELECT pg_current_wal_insert_lsn()');
ok(poll(q{SELECT count(*) = 0 FROM idem_records WHERE scope = 'yield'}),
	'the worker purged them');
my $end = sql('SELECT pg_current_wal_insert_lsn()');
# The worker commits asynchronously: flush its WAL before reading the files.
sql('CHECKPOINT');
my ($stdout, $stderr);
IPC::Run::run(
	[
		'pg_waldump', '--bkp-details', '--start', $start,
		'--end', $end, '--path', $node->data_dir . '/pg_wal'
	],
	'>', \$stdout, '2>', \$stderr);
note "pg_waldump: $stderr" if $stderr;
# The images the purge's deletes carry (a record's blkref lines follow it).
my ($deletes, $images, $compressed, $record) = (0, 0, 0, '');
for my $line (split /\n/, $stdout)
{
	if ($line =~ /^rmgr: /)
	{
		$record = $line;
		$deletes++ if $record =~ /desc: DELETE/;
	}
	elsif ($line =~ /\(FPW\)/ && $record =~ /desc: DELETE/)
	{
		$images++;
		$compressed++ if $line =~ /compression saved: \d+, method: (lz4|pglz)/;
	}
}
cmp_ok($deletes, '>=', 2000, 'the purge logged its deletes');
cmp_ok($images, '>=', 10, 'and the images of their pages');
is($compressed, $images, 'every one of them compressed');

note 'a durable commit waits for the WAL';
my $waiter = IPC::Run::start(
	[
		'psql', '-X', '-qAt', '-d', $node->connstr('postgres'),
		'-c', 'SET synchronous_commit = on',
		'-c', 'INSERT INTO business VALUES (1)'
	],
	'<', \undef, '>', \my $out, '2>', \my $err);
ok(poll(q{SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'}),
	'a commit waits (SyncRep)');
my $log = purge_log(2000);
like($log, $pause, 'the worker pauses between batches while it waits');
is(sql(q{SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'}),
	1, 'the commit still waits');

note 'pg_idem.purge_yield = off';
set_guc($node, 'pg_idem.purge_yield', 'off');
unlike(purge_log(2000), $pause, 'no pause with pg_idem.purge_yield off');
set_guc($node, 'pg_idem.purge_yield', 'on');
like(purge_log(2000), $pause, 'pauses again once it is back on');

sql(q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'});
$waiter->finish;
is(sql('SELECT count(*) FROM business'), 1, 'the waiting commit went through locally');

ok(!(slurp_file($node->logfile) =~ /terminated by signal|TRAP|PANIC/),
	'no crash in the server log');
$node->stop;
done_testing();
