# The duplicate cache on a logical replication subscriber of idem_records:
# the changes the apply worker makes must reach the cache as an operator's
# would. A replicated DELETE fires the row triggers (enabled ALWAYS, so also
# under the apply worker's session_replication_role = replica), and a
# replicated TRUNCATE, which no object access hook sees, fires the trigger
# idem_records_truncating: after either, a key the subscriber's cache knew
# is new there.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $publisher = PostgreSQL::Test::Cluster->new('publisher');
$publisher->init(allows_streaming => 'logical');
$publisher->start;

my $subscriber = PostgreSQL::Test::Cluster->new('subscriber');
$subscriber->init;
$subscriber->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'pg_idem'
pg_idem.cache_size = 1000
pg_idem.purge_databases = ''
});
$subscriber->start;

sub sql { my ($node, $query) = @_; return $node->safe_psql('postgres', $query); }

# "hits|misses" of scope 's' on the subscriber.
sub counts
{
	return sql($subscriber,
		q{SELECT coalesce(sum(cache_hits), 0) || '|' || coalesce(sum(cache_misses), 0)
		  FROM idem_stats WHERE scope = 's'});
}

sql($publisher, 'CREATE EXTENSION pg_idem');
sql($publisher, 'CREATE PUBLICATION records FOR TABLE idem_records');
sql($subscriber, 'CREATE EXTENSION pg_idem');
my $connstr = $publisher->connstr . ' dbname=postgres';
sql($subscriber,
	"CREATE SUBSCRIPTION records CONNECTION '$connstr' PUBLICATION records");
$subscriber->wait_for_subscription_sync($publisher, 'records');

is( sql($publisher,
		q{SELECT idem_try_insert('s', 'deleted') AND idem_try_insert('s', 'truncated')}),
	't', 'two keys recorded on the publisher');
$publisher->wait_for_catchup('records');

# On the subscriber, both are duplicates: the first of each from the table,
# which fills the cache, the second from the cache.
is( sql($subscriber,
		q{SELECT count(*) FILTER (WHERE idem_try_insert('s', k))
		  FROM (VALUES ('deleted'), ('deleted'), ('truncated'), ('truncated')) v(k)}),
	0, 'both keys are duplicates on the subscriber');
is(counts(), '2|2', 'the subscriber answered two from its cache');

sql($publisher, q{DELETE FROM idem_records WHERE key = 'deleted'});
$publisher->wait_for_catchup('records');
is(sql($subscriber, q{SELECT count(*) FROM idem_records WHERE key = 'deleted'}),
	0, 'the DELETE was applied');
is(sql($subscriber, q{SELECT idem_try_insert('s', 'deleted')}),
	't', 'after a replicated DELETE the key is new on the subscriber');

is(sql($subscriber, q{SELECT idem_try_insert('s', 'truncated')}),
	'f', 'the other key is still a duplicate there');
sql($publisher, 'TRUNCATE idem_records');
$publisher->wait_for_catchup('records');
is(sql($subscriber, q{SELECT count(*) FROM idem_records WHERE key = 'truncated'}),
	0, 'the TRUNCATE was applied');
is(sql($subscriber, q{SELECT idem_try_insert('s', 'truncated')}),
	't', 'after a replicated TRUNCATE the key is new on the subscriber');

done_testing();
