# idem_stats across the server's life: the counters written at a clean (or
# immediate) shutdown come back at the next start; after a crash (kill -9 of a
# backend) they start at zero; scopes beyond pg_idem.stats_max_scopes are
# counted in their database's "other" row (scope NULL), also when a lower
# limit is set before a restart; the limit is a postmaster setting. See
# src/pg/stats/stats.cpp.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IdemTap qw(crash_a_backend);

my $node = PostgreSQL::Test::Cluster->new('node');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'pg_idem'
pg_idem.stats_max_scopes = 3
# No purge worker: nothing counts but this test's calls.
pg_idem.purge_databases = ''
# PostgreSQL::Test::Cluster turns it off; the kill -9 test needs it.
restart_after_crash = on
});
$node->start;

my $stats_file = $node->data_dir . '/pg_stat/pg_idem_stats.stat';

sub sql
{
	my ($query, $db) = @_;
	return $node->safe_psql($db // 'postgres', $query);
}

# $n new keys in $scope (claims), and the first one again (a duplicate).
my $key_seq = 0;

sub claim
{
	my ($scope, $n, $db) = @_;
	my $first = $key_seq + 1;
	$key_seq += $n;
	sql("SELECT count(*) FROM generate_series($first, $key_seq) i
	     WHERE idem_try_insert('$scope', 'k' || i)", $db);
	sql("SELECT idem_try_insert('$scope', 'k$first')", $db);
	return;
}

# Every row of idem_stats: database|scope|claims|duplicates, the other
# rows' scope shown as <other>.
sub rows
{
	return sql(
		q{SELECT database, coalesce(scope, '<other>'), claims, duplicates
		  FROM idem_stats ORDER BY database, scope NULLS LAST});
}

sql('CREATE EXTENSION pg_idem');
sql('CREATE DATABASE idem_second');
sql('CREATE EXTENSION pg_idem', 'idem_second');

# ---------------------------------------------------------------------------
note 'pg_idem.stats_max_scopes';

is( sql(
		q{SELECT setting || ' ' || context FROM pg_settings
		  WHERE name = 'pg_idem.stats_max_scopes'}),
	'3 postmaster',
	'the limit is set, and only at server start');
my ($rc, $stdout, $stderr) =
  $node->psql('postgres', 'SET pg_idem.stats_max_scopes = 10');
like(
	$stderr,
	qr/parameter "pg_idem.stats_max_scopes" cannot be changed without restarting the server/,
	'SET is refused');

# ---------------------------------------------------------------------------
note 'more scopes than the table holds';

# The first three scopes of the server get rows of their own; the others
# are counted together per database, and nothing is lost.
claim('s1', 1);
claim('s2', 2);
claim('s3', 3);
claim('s4', 4);
claim('s5', 5);
claim('t1', 6, 'idem_second');
my $before = join("\n",
	'idem_second|<other>|6|1',
	'postgres|s1|1|1', 'postgres|s2|2|1', 'postgres|s3|3|1',
	'postgres|<other>|9|2');
is(rows(), $before,
	'three scopes of their own; the rest in an other row per database');
is(sql('SELECT sum(claims) FROM idem_stats'), 21, 'every claim counted');
ok(!-e $stats_file, 'no stats file while the server runs');

# ---------------------------------------------------------------------------
note 'a clean restart keeps the counters';

my $since = sql(q{SELECT stats_since FROM idem_stats WHERE scope = 's1'});
$node->stop;
ok(-e $stats_file, 'the shutdown wrote the stats file');
$node->start;
is(rows(), $before, 'the counters are back after a clean restart');
is(sql(q{SELECT stats_since FROM idem_stats WHERE scope = 's1'}),
	$since, 'and so is the time counting began');
ok(!-e $stats_file, 'the start deleted the file');
claim('s1', 1);
claim('s6', 1);
is(sql(q{SELECT claims FROM idem_stats WHERE scope = 's1'}),
	2, 'a loaded row counts on');
is( sql(
		q{SELECT claims FROM idem_stats
		  WHERE database = 'postgres' AND scope IS NULL}),
	10,
	'a new scope still goes to the other row');

# ---------------------------------------------------------------------------
note 'a lower limit at a restart folds the excess into the other rows';

$node->append_conf('postgresql.conf', 'pg_idem.stats_max_scopes = 2');
$node->restart;
is(sql('SHOW pg_idem.stats_max_scopes'), 2, 'the new limit');
is( sql(
		q{SELECT count(*) FILTER (WHERE scope IS NOT NULL), sum(claims),
		         sum(duplicates)
		  FROM idem_stats}),
	'2|23|8',
	'two scopes of their own, and not a count lost');

# ---------------------------------------------------------------------------
note 'a crash (kill -9 of a backend) resets the counters';

crash_a_backend($node);
is(sql('SELECT count(*) FROM idem_stats'), 0, 'the counters start at zero');
ok(!-e $stats_file, 'and no stats file was written');
claim('s1', 1);
is(rows(), 'postgres|s1|1|1', 'counting starts again');

# A clean shutdown after the crash saves what was counted since.
$node->restart;
is(rows(), 'postgres|s1|1|1', 'kept by the next clean restart');

# An immediate shutdown is not a crash to the postmaster: it saves the
# counters too (as pg_stat_statements does).
$node->stop('immediate');
ok(-e $stats_file, 'an immediate shutdown writes the stats file');
$node->start;
is(rows(), 'postgres|s1|1|1', 'kept by an immediate shutdown');

$node->stop;
done_testing();
