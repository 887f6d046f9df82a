# The duplicate cache and a standby's promotion: a standby never fills a
# cache (every claim is refused there: read-only), and the promoted standby
# starts with an empty one, so its first duplicate of a key comes from the
# table (a miss), the next from the cache; a key forgotten on the primary
# before the promotion is new on the promoted standby, although the old
# primary's cache knew it.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $conf = q{
shared_preload_libraries = 'pg_idem'
pg_idem.cache_size = 1000
pg_idem.purge_databases = ''
};

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', $conf);
$primary->start;

sub sql { my ($node, $query) = @_; return $node->safe_psql('postgres', $query); }

# "hits|misses" of scope 's' on $node.
sub counts
{
	my ($node) = @_;
	return sql($node,
		q{SELECT coalesce(sum(cache_hits), 0) || '|' || coalesce(sum(cache_misses), 0)
		  FROM idem_stats WHERE scope = 's'});
}

sql($primary, 'CREATE EXTENSION pg_idem');
is( sql($primary,
		q{SELECT idem_try_insert('s', 'k1') AND idem_try_insert('s', 'k2')}),
	't', 'two keys recorded on the primary');
# Duplicates: the first of each from the table, the second from the cache.
is( sql($primary,
		q{SELECT count(*) FILTER (WHERE idem_try_insert('s', k))
		  FROM (VALUES ('k1'), ('k1'), ('k2'), ('k2')) v(k)}),
	0, 'duplicates on the primary');
# Misses: the two new keys, and the first duplicate of each.
is(counts($primary), '2|4', 'the primary answered two from its cache');

$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->append_conf('postgresql.conf', $conf);
$standby->start;

# Forgotten after the primary cached it: new on the promoted standby.
sql($primary, q{SELECT idem_forget('s', 'k2')});
$primary->wait_for_catchup($standby);

my ($ret, $out, $err) = $standby->psql('postgres',
	q{SELECT idem_try_insert('s', 'k1')}, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
isnt($ret, 0, 'a claim on the standby is refused');
like($err, qr/25006/, 'as in a read-only transaction (25006)');
is(counts($standby), '0|0', 'the standby\'s cache was never asked');

$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the standby was not promoted';
$primary->stop;

is(sql($standby, q{SELECT idem_try_insert('s', 'k1')}),
	'f', 'promoted: k1 is a duplicate');
is(counts($standby), '0|1', 'answered by the table: the cache started empty');
is(sql($standby, q{SELECT idem_try_insert('s', 'k1')}),
	'f', 'k1 again');
is(counts($standby), '1|1', 'now from the cache');
is(sql($standby, q{SELECT idem_try_insert('s', 'k2')}),
	't', 'k2, forgotten on the old primary, is new');

$standby->stop;
done_testing();
