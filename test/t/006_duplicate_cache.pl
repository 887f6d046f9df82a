# The duplicate cache (src/pg/cache/duplicate_cache.cpp) across the server's life:
# a cache smaller than the working set evicts and still answers exactly; a
# crash (kill -9 of a backend) and a clean restart both start with an empty
# cache; DROP EXTENSION + CREATE EXTENSION makes a cached key new; with
# pg_idem.cache_size = 0 nothing is ever answered from the cache; the size
# is a postmaster setting. idem_begin too: after a crash or a restart its
# first completed answer comes from the table, with the result; with
# pg_idem.cache_result_size = 0 only claims completed without a result are
# answered from the cache.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IdemTap qw(crash_a_backend);
use List::Util;

my $node = PostgreSQL::Test::Cluster->new('node');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'pg_idem'
# Two buckets of eight entries: far smaller than the keys below.
pg_idem.cache_size = 16
pg_idem.purge_databases = ''
restart_after_crash = on
});
$node->start;

sub sql
{
	my ($query) = @_;
	return $node->safe_psql('postgres', $query);
}

# hits|misses of a scope.
sub counts
{
	my ($scope) = @_;
	return sql(
		qq{SELECT coalesce(sum(cache_hits), 0) || '|' || coalesce(sum(cache_misses), 0)
		   FROM idem_stats WHERE scope = '$scope'});
}

# How many of keys 1..n of a scope idem_try_insert calls new, one
# transaction per call (as consumers do), in random order.
sub new_keys
{
	my ($scope, $n) = @_;
	my $script = '';
	for my $i (List::Util::shuffle(1 .. $n))
	{
		$script .= "SELECT idem_try_insert('$scope', 'k$i');\n";
	}
	my $out = $node->safe_psql('postgres', $script);
	return scalar grep { $_ eq 't' } split /\n/, $out;
}

sql('CREATE EXTENSION pg_idem');

# ---------------------------------------------------------------------------
note 'the shared memory the README gives';

# cache_size x (144 + (40 + cache_result_size) rounded up to 128) bytes,
# plus 9 kB: with the default cache_result_size (256), 528 bytes an entry.
my $cache_bytes = sql(
	q{SELECT allocated_size FROM pg_shmem_allocations
	  WHERE name = 'pg_idem duplicate cache'});
cmp_ok($cache_bytes, '>=', 16 * 528, "16 entries take at least 16 x 528 bytes ($cache_bytes)");
cmp_ok($cache_bytes, '<=', 16 * 528 + 9 * 1024, 'and at most 9 kB more');

# ---------------------------------------------------------------------------
note 'a cache smaller than the working set';

is(new_keys('small', 200), 200, '200 new keys');
for my $round (1 .. 3)
{
	is(new_keys('small', 200), 0, "round $round: all 200 are duplicates");
}
my ($hits, $misses) = split /\|/, counts('small');
ok($hits > 0, "some duplicates came from the cache ($hits)");
ok($misses > 200 + 200, "most did not: it holds 16 of 200 keys ($misses misses)");
is($hits + $misses, 800, 'every call was a hit or a miss');
sql(q{SELECT idem_forget('small', 'k' || i) FROM generate_series(1, 200, 2) i});
is(new_keys('small', 200), 100, 'after forgetting half, exactly that half is new');
is(new_keys('small', 200), 0, 'and then a duplicate again');

# ---------------------------------------------------------------------------
note 'an entry without fingerprint or result, in a slot that held one with both';

# An entry whose record has neither leaves the room for them (EntryReplay)
# as the slot's earlier entry left it: a lookup must not read it. Fill every
# slot with completed records that have both (idem_begin's completed answers
# make the entries), then replace them with duplicates that idem_try_insert
# found, and ask idem_begin for those: a NULL result, from the cache.
my $fill = '';
for my $i (1 .. 40)
{
	$fill .= qq{SELECT idem_complete('reuse', 'r$i',
	              (SELECT token FROM idem_begin('reuse', 'r$i', fingerprint => 'fp')),
	              '{"r": $i}');
	            SELECT status FROM idem_begin('reuse', 'r$i', fingerprint => 'fp');
	            SELECT status FROM idem_begin('reuse', 'r$i', fingerprint => 'fp');\n};
}
sql($fill);
my ($reuse_hits) = split /\|/, counts('reuse');
ok($reuse_hits > 0, "records with a fingerprint and a result were cached ($reuse_hits hits)");
is(new_keys('reuse-plain', 40), 40, '40 claims without either');
# Each duplicate, which the table answers, replaces an entry; idem_begin
# then asks for it at once.
my $answers = '';
for my $i (1 .. 40)
{
	$answers .= qq{SELECT idem_try_insert('reuse-plain', 'k$i');
	               SELECT status || '|' || attempt || '|' || coalesce(result::text, 'NULL')
	               FROM idem_begin('reuse-plain', 'k$i');\n};
}
is_deeply([ split /\n/, sql($answers) ], [ ('f', 'completed|1|NULL') x 40 ],
	'a duplicate, then idem_begin: completed, attempt 1, no result, for every one');
my ($plain_hits) = split /\|/, counts('reuse-plain');
is($plain_hits, 40, 'every idem_begin answer came from the cache');

# ---------------------------------------------------------------------------
note 'a crash (kill -9 of a backend) empties the cache';

# Fill: a claim, then a duplicate from the table, then one from the cache.
sql(q{SELECT idem_try_insert('crash', 'k')});
sql(q{SELECT idem_try_insert('crash', 'k')});
sql(q{SELECT idem_try_insert('crash', 'k')});
is(counts('crash'), '1|2', 'the third call was a hit');

# idem_begin's answer of a completed claim, as the table gives it: no token,
# the record's expiry, and no fingerprint (idem_begin shows the stored one
# only in a fingerprint_mismatch answer; idem_lookup shows it always).
my $completed = q{completed|2|{"total": 42}||||true|};
sub begin_answer
{
	return sql(
		q{SELECT status || '|' || attempt || '|' || coalesce(result::text, '') || '|'
		   || coalesce(lease_expires_at::text, '') || '|' || coalesce(last_error, '') || '|'
		   || coalesce(token::text, '') || '|'
		   || (expires_at = (SELECT expires_at FROM idem_records
		                     WHERE scope = 'begin-crash' AND key = 'k'))::text || '|'
		   || coalesce(fingerprint, '')
		   FROM idem_begin('begin-crash', 'k', fingerprint => 'crash:v2')});
}
my $token = sql(q{SELECT token FROM idem_begin('begin-crash', 'k', fingerprint => 'crash:v1')});
sql(qq{SELECT idem_fail('begin-crash', 'k', '$token', 'timeout', true)});
$token = sql(
	q{SELECT token FROM idem_begin('begin-crash', 'k', fingerprint => 'crash:v2', ttl => '3 days')});
sql(qq{SELECT idem_complete('begin-crash', 'k', '$token', '{"total": 42}')});
is(sql(q{SELECT expires_at - recorded_at FROM idem_records WHERE scope = 'begin-crash'}),
	'3 days', 'the completed record lives for the ttl of its claim');
is(sql(q{SELECT fingerprint FROM idem_lookup('begin-crash', 'k')}), 'crash:v2',
	'the retry bound its own fingerprint (a failed claim binds none)');
is(begin_answer(), $completed, 'idem_begin: completed, from the table');
is(begin_answer(), $completed, 'idem_begin: the same answer');
is(counts('begin-crash'), '1|3', 'idem_begin: the second answer was a hit');

crash_a_backend($node);
is(sql(q{SELECT idem_try_insert('crash', 'k')}), 'f', 'still a duplicate');
is(counts('crash'), '0|1', 'from the table: the cache started empty');
is(sql(q{SELECT idem_try_insert('crash', 'k')}), 'f', 'a duplicate again');
is(counts('crash'), '1|1', 'now from the cache');
is(begin_answer(), $completed, 'idem_begin after the crash: completed, with the result');
is(counts('begin-crash'), '0|1', 'from the table: the cache started empty');
is(begin_answer(), $completed, 'idem_begin: the same answer again');
is(counts('begin-crash'), '1|1', 'now from the cache');

# ---------------------------------------------------------------------------
note 'a clean restart empties the cache';

$node->restart;
is(sql(q{SELECT idem_try_insert('crash', 'k')}), 'f', 'a duplicate after the restart');
is(counts('crash'), '1|2', 'from the table (the counters were kept, the cache was not)');
is(begin_answer(), $completed, 'idem_begin after the restart: completed, with the result');
is(counts('begin-crash'), '1|2', 'from the table');

# ---------------------------------------------------------------------------
note 'DROP EXTENSION and CREATE EXTENSION';

sql(q{SELECT idem_try_insert('again', 'k')});
sql(q{SELECT idem_try_insert('again', 'k')});
is(sql(q{SELECT idem_try_insert('again', 'k')}), 'f', 'cached');
is(counts('again'), '1|2', 'a hit');
sql('DROP EXTENSION pg_idem');
sql('CREATE EXTENSION pg_idem');
is(sql(q{SELECT idem_try_insert('again', 'k')}), 't', 'new in the new idem_records');

# ---------------------------------------------------------------------------
note 'the size is set at server start';

sql('ALTER SYSTEM SET pg_idem.cache_size = 0');
$node->reload;
is(sql('SHOW pg_idem.cache_size'), '16', 'a reload does not change it');

note 'pg_idem.cache_size = 0: the cache is off';
$node->restart;
is(sql('SHOW pg_idem.cache_size'), '0', 'off after the restart');
sql(q{SELECT idem_try_insert('off', 'k')});
for (1 .. 3)
{
	is(sql(q{SELECT idem_try_insert('off', 'k')}), 'f', 'a duplicate');
}
is(counts('off'), '0|0', 'never a hit, and no lookups counted');
is(new_keys('off2', 20), 20, 'new keys are new');
is(new_keys('off2', 20), 0, 'and then duplicates, all from the table');
is(counts('off2'), '0|0', 'still no cache counts');
sql(q{SELECT idem_complete('off3', 'k', (SELECT token FROM idem_begin('off3', 'k')), '1')});
for (1 .. 2)
{
	is(sql(q{SELECT status || '|' || result FROM idem_begin('off3', 'k')}),
		'completed|1', 'idem_begin: completed, with the result');
}
is(counts('off3'), '0|0', 'no cache counts for idem_begin either');

# ---------------------------------------------------------------------------
note 'pg_idem.cache_result_size = 0: only results that are NULL are kept';

sql('ALTER SYSTEM SET pg_idem.cache_size = 16');
sql('ALTER SYSTEM SET pg_idem.cache_result_size = 0');
$node->restart;
is(sql('SHOW pg_idem.cache_result_size'), '0', 'set at the restart');
sql(q{SELECT idem_complete('nores', 'null', (SELECT token FROM idem_begin('nores', 'null')))});
sql(q{SELECT idem_complete('nores', 'small', (SELECT token FROM idem_begin('nores', 'small')), '{}')});
for (1 .. 3)
{
	is(sql(q{SELECT status || '|' || attempt || '|' || (result IS NULL) FROM idem_begin('nores', 'null')}),
		'completed|1|true', 'a claim completed without a result');
	is(sql(q{SELECT status || '|' || attempt || '|' || result FROM idem_begin('nores', 'small')}),
		'completed|1|{}', 'a claim completed with the smallest result');
}
# Per key: 'null' misses twice (its claim, its first completed answer),
# then hits twice; 'small' misses every time (claim + 3).
is(counts('nores'), '2|6', 'only the NULL result was answered from the cache');
# idem_begin made the entry of 'small', without its result.
is(sql(q{SELECT idem_try_insert('nores', 'small')}), 'f', 'idem_try_insert: a duplicate');
is(counts('nores'), '3|6', 'an entry without its result still serves idem_try_insert');

$node->stop;
done_testing();
