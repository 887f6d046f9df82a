# idem_stats while many backends count at once (src/pg/stats/stats.cpp): each
# backend counts in a slot of its own and, counting more scopes than its slot
# holds, keeps moving counts from its slot to the shared table, while another
# session reads the view in a loop (tens of thousands of times). No count may
# be lost or counted twice: the totals read during the run never go down
# and never pass the number of calls made, and at the end they equal it
# exactly, and claims equal the records written. (A reader that took the
# lock in shared mode, and so could copy a count from the table and its
# slot, or from neither, made the totals go down.) A clean restart keeps them (the postmaster adds the slots
# to the table before it writes the stats file), and backends that exited
# leave their counts behind for the next owner of their slot.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('node');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'pg_idem'
pg_idem.cache_size = 64
pg_idem.purge_databases = ''
});
$node->start;

sub sql
{
	my ($query) = @_;
	return $node->safe_psql('postgres', $query);
}

sql('CREATE EXTENSION pg_idem');

# 12 scopes (a slot holds 8) over 500 keys each: claims, duplicates from the
# table and from the cache, all counted by 6 backends at once.
my $clients = 6;
my $per_client = 10000;
my $calls = $clients * $per_client;
my $script = $node->basedir . '/count.sql';
open(my $fh, '>', $script) or die "could not write $script: $!";
print $fh "\\set s random(1, 12)\n\\set k random(1, 500)\n";
print $fh "SELECT idem_try_insert('conc-' || :s, :k::text);\n";
close $fh;

my $total_sql = q{SELECT coalesce(sum(claims + duplicates), 0) FROM idem_stats
	WHERE database = current_database() AND scope LIKE 'conc-%'};

# Reads the totals in a loop, in one session, until every call is counted
# (or two minutes pass): "reads down over last".
sql(q{CREATE FUNCTION watch_totals(calls bigint) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    last bigint := 0;
    total bigint;
    reads int := 0;
    down int := 0;
    over int := 0;
BEGIN
    LOOP
        SELECT coalesce(sum(claims + duplicates), 0) INTO total FROM idem_stats
        WHERE database = current_database() AND scope LIKE 'conc-%';
        reads := reads + 1;
        IF total < last THEN down := down + 1; END IF;
        IF total > calls THEN over := over + 1; END IF;
        last := total;
        EXIT WHEN total >= calls OR clock_timestamp() > statement_timestamp() + interval '2 min';
    END LOOP;
    RETURN format('%s %s %s %s', reads, down, over, last);
END $$});

my ($out, $err);
my $pgbench = IPC::Run::start(
	[
		'pgbench', '-n', '-c', $clients, '-j', 2, '-t', $per_client,
		'-f', $script, $node->connstr('postgres')
	],
	'<', \undef, '>', \$out, '2>', \$err);
my ($reads, $went_down, $too_many, $last) = split / /, sql("SELECT watch_totals($calls)");
$pgbench->finish;
is($pgbench->result(0), 0, 'pgbench ran every call') or diag $err;
note "$reads reads of idem_stats during the run, the last $last";
cmp_ok($reads, '>=', 100, 'idem_stats was read while the backends counted');
is($went_down, 0, 'the total never went down');
is($too_many, 0, 'nor passed the number of calls');

is(sql($total_sql), $calls, 'every call counted once');
is( sql(
		q{SELECT sum(claims) FROM idem_stats
		  WHERE database = current_database() AND scope LIKE 'conc-%'}),
	sql(q{SELECT count(*) FROM idem_records WHERE scope LIKE 'conc-%'}),
	'the claims are the records written');
cmp_ok(
	sql(
		q{SELECT sum(cache_hits) FROM idem_stats
		  WHERE database = current_database() AND scope LIKE 'conc-%'}),
	'>', 0, 'some duplicates came from the cache');

# The backends that counted have exited, their counts left in their slots;
# new backends take those slots over (moving what they find to the table)
# before they count.
sql(q{SELECT idem_try_insert('conc-1', 'after ' || g) FROM generate_series(1, 2) g})
  for 1 .. 3;
is(sql($total_sql), $calls + 6, 'the counts of exited backends stay when others take their slots');

$node->restart;
is(sql($total_sql), $calls + 6, 'a clean restart keeps every count');

$node->stop;
done_testing();
