# pg_upgrade of a cluster that uses pg_idem (issue 19): everything a
# consumer relies on is still there on the new major version, and the
# upgrade itself works with pg_idem preloaded in both clusters, as users
# copy their postgresql.conf.
#
# Two old clusters, each upgraded with pg_upgrade --check and then
# pg_upgrade (copy mode, the default):
#   0.3  CREATE EXTENSION pg_idem, populated through the API;
#   0.2  CREATE EXTENSION pg_idem VERSION '0.2', populated with 0.2's API as
#        far as the 0.3 library serves it (its claims and scopes written as
#        0.2 left them, as test/sql/upgrade.sql does), then ALTER EXTENSION
#        pg_idem UPDATE and a claim of the new version.
# In both: completed records (idem_try_insert, and a claim completed with a
# result), a claim in progress with a live lease and its token, a failed and
# a dead record, stuck claims (expired leases) in scopes with a reconciler,
# scope grants for a role, stream positions with a window.
#
# The new cluster must answer every duplicate as one, keep the claim in
# progress for its token alone, reconcile through the configured function,
# keep the stream windows and the grants, and run the purge worker. And
# pg_idem must keep out of pg_upgrade's way: while the servers run in
# binary-upgrade mode no purge worker may start (it would hold a connection
# to a database that pg_restore drops and recreates, and write to tables
# whose files pg_upgrade copies), checked in pg_upgrade's server log.
#
# Parametrised by the two installations, skipped without them:
#   PG_IDEM_UPGRADE_OLD_BIN   bin directory of the old PostgreSQL
#   PG_IDEM_UPGRADE_NEW_BIN   bin directory of the new PostgreSQL
#   PG_IDEM_UPGRADE_CHECK_ONLY=1  stop after pg_upgrade --check, for a new
#                             version that cannot restore the old one's
#                             schema (18.6 from Debian's 15.20, whose column
#                             option pg_attver it does not know)
#   PG_IDEM_UPGRADE_PORT      the first of the four ports to use
# pg_idem must be installed in both. test/upgrade/run sets all this up.
#
# The purge workers do not reconcile in the old cluster
# (pg_idem.purge_reconcile = off), so that the stuck claims are still there
# to reconcile after the upgrade; the new cluster starts with the same
# settings and turns reconciliation on at the end.
use strict;
use warnings;
use Cwd qw(getcwd);
use File::Basename qw(dirname);
use File::Find qw(find);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $old_bin = $ENV{PG_IDEM_UPGRADE_OLD_BIN};
my $new_bin = $ENV{PG_IDEM_UPGRADE_NEW_BIN};
if (!$old_bin || !$new_bin)
{
	plan skip_all =>
	  'PG_IDEM_UPGRADE_OLD_BIN and PG_IDEM_UPGRADE_NEW_BIN are not set (test/upgrade/run sets them)';
}
for my $bin ($old_bin, $new_bin)
{
	BAIL_OUT("$bin/pg_ctl does not exist") unless -x "$bin/pg_ctl";
}
my $check_only = $ENV{PG_IDEM_UPGRADE_CHECK_ONLY};

my $db = 'shop';
my $conf = q{
shared_preload_libraries = 'pg_idem'
pg_idem.purge_databases = 'postgres, shop'
pg_idem.purge_naptime = '200ms'
pg_idem.purge_reconcile = off
};

# The functions a consumer is granted (0.3 signatures).
my $consumer_functions = join(', ',
	'idem_try_insert(text, text, interval)',
	'idem_begin(text, text, interval, text, interval, boolean, interval, bigint)',
	'idem_complete(text, text, uuid, jsonb, bigint)',
	'idem_fail(text, text, uuid, text, boolean, bigint)',
	'idem_lookup(text, text, bigint)',
	'idem_advance(text, integer, bigint, integer)',
	'idem_position(text, integer)');

# ---------------------------------------------------------------------------
# Helpers.

sub sql
{
	my ($node, $query) = @_;
	return $node->safe_psql($db, $query);
}

# Runs $query as $role (a connection of its own); returns "SQLSTATE output"
# ('00000' when it succeeded).
sub as_role
{
	my ($node, $role, $query) = @_;
	my ($out, $err) = ('', '');
	$node->psql(
		$db, "\\set VERBOSITY sqlstate\n$query;\n\\echo '#state' :SQLSTATE\n",
		stdout => \$out,
		stderr => \$err,
		on_error_stop => 0,
		connstr => $node->connstr($db) . " user=$role");
	my ($state) = $out =~ /^#state (\S+)$/m;
	$out =~ s/^#state.*\n?//m;
	chomp $out;
	return ($state // "no answer: $err") . " $out";
}

# pg_idem's tables, each as sorted JSON rows: what the upgrade must carry
# over unchanged. Generic over the columns, so it holds whatever form a
# release gives them; but not the OID a scope's reconciliation function is
# bound to and the cluster where it was bound (function OIDs and the system
# identifier change in an upgrade: idem_reconcile binds it again).
sub snapshot
{
	my ($node) = @_;
	my @parts;
	for my $table (qw(idem_records idem_scopes idem_streams idem_scope_grants))
	{
		my $row = "to_jsonb(t) - 'reconcile_function_oid' - 'reconcile_bound_in'";
		push @parts,
		  "$table:\n"
		  . sql($node,
			"SELECT string_agg(($row)::text, E'\\n' ORDER BY ($row)::text)
			 FROM public.$table t");
	}
	return join("\n", @parts);
}

# With PG_IDEM_UPGRADE_PORT, the nodes take the ports from there on;
# otherwise PostgreSQL::Test::Cluster picks free ones.
my $next_port = $ENV{PG_IDEM_UPGRADE_PORT};

sub port
{
	return () unless $next_port;
	return (port => $next_port++);
}

# The pg_upgrade logs, printed when it failed.
sub show_upgrade_logs
{
	my ($dir) = @_;
	return unless -d $dir;
	find(
		sub {
			return unless -f $_ && /\.(log|txt)$/;
			diag("=== $File::Find::name ===\n" . slurp_file($_));
		},
		$dir);
	return;
}

# The servers' log of every pg_upgrade run kept in $dir (--retain): both
# clusters were started in binary-upgrade mode, with pg_idem preloaded.
sub no_worker_in_binary_upgrade
{
	my ($dir, $name) = @_;
	my $server_log = '';
	find(sub { $server_log .= slurp_file($_) if $_ eq 'pg_upgrade_server.log' }, $dir);
	like($server_log, qr/ -b /, "$name: kept the servers' log (started with -b)");
	unlike($server_log, qr/pg_idem purge worker started/,
		"$name: no purge worker started while the servers ran in binary-upgrade mode");
	return;
}

# The key holding the claim in progress whose token the consumer kept.
my $held_key = 'in-flight';

# ---------------------------------------------------------------------------
# The old clusters' contents.

# What both versions share: the roles, the business table the reconciler
# asks, the reconciler, and the extension in database postgres too (the
# purge worker serves both).
sub setup_common
{
	my ($node) = @_;
	$node->safe_psql('postgres', qq{
CREATE ROLE consumer LOGIN;
CREATE ROLE stranger LOGIN;
CREATE DATABASE $db;
CREATE EXTENSION pg_idem;
SELECT idem_try_insert('postgres-scope', 'k');
});
	sql($node, q{
-- The business system: a payment was made for these keys.
CREATE TABLE public.payments (order_key text PRIMARY KEY);
INSERT INTO public.payments VALUES ('stuck-paid'), ('stuck-refund');
CREATE FUNCTION public.payment_made(scope text, key text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT EXISTS (SELECT 1 FROM public.payments p WHERE p.order_key = key) $$;
});
	return;
}

sub populate_0_3
{
	my ($node) = @_;
	setup_common($node);
	sql($node, qq{
CREATE EXTENSION pg_idem;
GRANT EXECUTE ON FUNCTION $consumer_functions TO consumer, stranger;
SELECT idem_configure('orders', ttl => '30 days', lease => '1 hour', max_attempts => 3,
                      reconcile_function => 'public.payment_made(text, text)');
SELECT idem_configure('refunds', reconcile_function => 'public.payment_made(text, text)');
SELECT idem_grant('orders', 'consumer'), idem_grant('events', 'consumer');
SELECT count(*) FILTER (WHERE idem_try_insert('orders', 'msg-' || i)) FROM generate_series(1, 100) i;
SELECT idem_complete('orders', 'paid', c.token, '{"charge": "ch_1"}')
FROM idem_begin('orders', 'paid') c;
SELECT idem_fail('orders', 'retry-me', c.token, 'timeout', retryable => true)
FROM idem_begin('orders', 'retry-me') c;
SELECT idem_fail('orders', 'poison', c.token, 'bad payload', retryable => false)
FROM idem_begin('orders', 'poison') c;
SELECT status FROM idem_begin('orders', 'stuck-paid', lease => '1 millisecond');
SELECT status FROM idem_begin('orders', 'stuck-unpaid', lease => '1 millisecond');
SELECT status FROM idem_begin('refunds', 'stuck-refund', lease => '1 millisecond');
SELECT idem_advance('events', 0, 100, 64), idem_advance('events', 0, 97, 64),
       idem_advance('events', 1, 7);
});
	return;
}

sub populate_0_2
{
	my ($node) = @_;
	setup_common($node);
	# The 0.3 library refuses 0.2's claim functions (they took the attempt
	# number) and idem_configure (0.2 kept the reconciliation function as a
	# regprocedure, which pg_upgrade refuses): the claims and the scopes are
	# written as 0.2 left them, as test/sql/upgrade.sql does. A claim is a record
	# by idem_try_insert, then its claim columns.
	sql($node, q{
CREATE EXTENSION pg_idem VERSION '0.2';
GRANT EXECUTE ON FUNCTION idem_try_insert(text, text, interval),
    idem_begin(text, text, interval, text, interval, boolean),
    idem_complete(text, text, integer, jsonb),
    idem_advance(text, integer, bigint, integer), idem_position(text, integer)
TO consumer, stranger;
INSERT INTO idem_scopes (scope, ttl, lease, max_attempts, reconcile_function,
                         configured_by, configured_at)
VALUES ('orders', '30 days', '1 hour', 3, 'public.payment_made(text, text)',
        current_user::regrole, now()),
       ('refunds', NULL, NULL, NULL, 'public.payment_made(text, text)',
        current_user::regrole, now());
SELECT count(*) FILTER (WHERE idem_try_insert('orders', 'msg-' || i)) FROM generate_series(1, 100) i;
SELECT idem_try_insert('orders', k)
FROM unnest(ARRAY['paid', 'retry-me', 'poison', 'stuck-paid', 'stuck-unpaid', 'in-flight-0.2']) k;
SELECT idem_try_insert('refunds', 'stuck-refund');
UPDATE idem_records SET result = '{"charge": "ch_1"}' WHERE key = 'paid';
UPDATE idem_records SET status = 'failed', last_error = 'timeout' WHERE key = 'retry-me';
UPDATE idem_records SET status = 'dead', last_error = 'bad payload' WHERE key = 'poison';
UPDATE idem_records SET status = 'in_progress', holder_pid = pg_backend_pid(),
       holder_started_at = now(),
       lease_expires_at = now() + CASE WHEN key = 'in-flight-0.2' THEN interval '1 day'
                                       ELSE interval '-1 minute' END
WHERE key IN ('stuck-paid', 'stuck-unpaid', 'stuck-refund', 'in-flight-0.2');
SELECT idem_advance('events', 0, 100, 64), idem_advance('events', 0, 97, 64),
       idem_advance('events', 1, 7);
});
	# The update grants PUBLIC the scopes in use (with a WARNING); the
	# operator narrows them to the consumer and grants it the new claim
	# functions, as the README's Upgrading section says.
	my ($ret, $out, $err) = $node->psql($db, 'ALTER EXTENSION pg_idem UPDATE');
	is($ret, 0, '0.2: ALTER EXTENSION pg_idem UPDATE');
	like($err, qr/scopes and streams in use were granted to PUBLIC/,
		'0.2: the update says it granted the scopes in use to PUBLIC');
	is( sql($node,
			q{SELECT extversion = default_version FROM pg_extension, pg_available_extensions
			  WHERE extname = 'pg_idem' AND name = 'pg_idem'}),
		't',
		'0.2: updated to the default version');
	sql($node, qq{
GRANT EXECUTE ON FUNCTION $consumer_functions TO consumer, stranger;
SELECT idem_grant('orders', 'consumer'), idem_grant('events', 'consumer');
SELECT idem_revoke(scope, 'public') FROM idem_scope_grants WHERE grantee = 'public';
});
	return;
}

# ---------------------------------------------------------------------------
# What the upgraded cluster must do. $tag names the case in every assertion.

sub check_upgraded
{
	my ($node, $tag, $token, $before) = @_;

	is(snapshot($node), $before,
		"$tag: records, scopes, streams and grants are what they were");

	note "$tag: duplicates";
	is( as_role($node, 'consumer',
			q{SELECT count(*) FILTER (WHERE idem_try_insert('orders', 'msg-' || i))
			  FROM generate_series(1, 100) i}),
		'00000 0',
		"$tag: the 100 keys of idem_try_insert are all still duplicates");
	is( as_role($node, 'consumer',
			q{SELECT status, result FROM idem_begin('orders', 'paid')}),
		'00000 completed|{"charge": "ch_1"}',
		"$tag: a completed claim answers completed, with its stored result");
	is( as_role($node, 'consumer',
			q{SELECT status, attempt FROM idem_begin('orders', 'retry-me')}),
		'00000 acquired|2',
		"$tag: the failed record is claimed again, as attempt 2");
	is( as_role($node, 'consumer',
			q{SELECT status, last_error FROM idem_begin('orders', 'poison')}),
		'00000 dead|bad payload',
		"$tag: the dead record stays dead, with its error");
	is(as_role($node, 'consumer', q{SELECT idem_try_insert('orders', 'new-after-upgrade')}),
		'00000 t', "$tag: a new key is new");

	note "$tag: the claim in progress";
	is( as_role($node, 'consumer',
			qq{SELECT status, token IS NULL FROM idem_begin('orders', '$held_key')}),
		'00000 in_progress|t',
		"$tag: the claim in progress refuses a second holder");
	like(
		as_role($node, 'consumer',
			qq{SELECT idem_complete('orders', '$held_key', gen_random_uuid())}),
		qr/^55000/,
		"$tag: another token cannot complete it (55000)");
	is( as_role($node, 'consumer',
			qq{SELECT idem_complete('orders', '$held_key', '$token', '{"done": true}')}),
		'00000 ',
		"$tag: its original token completes it");
	is( as_role($node, 'consumer',
			qq{SELECT status, result FROM idem_begin('orders', '$held_key')}),
		'00000 completed|{"done": true}',
		"$tag: it is then completed, with its result");

	note "$tag: reconciliation";
	is( sql($node,
			q{SELECT string_agg(key || ':' || outcome, ',' ORDER BY key)
			  FROM idem_reconcile('orders')}),
		'stuck-paid:completed,stuck-unpaid:failed',
		"$tag: idem_reconcile asks the configured function about the stuck claims");
	is( sql($node,
			q{SELECT string_agg(key || ':' || status, ',' ORDER BY key) FROM idem_records
			  WHERE key IN ('stuck-paid', 'stuck-unpaid')}),
		'stuck-paid:completed,stuck-unpaid:failed',
		"$tag: and records its answers");
	is( sql($node,
			q{SELECT string_agg(scope, ',' ORDER BY scope) FROM idem_scopes
			  WHERE reconcile_function_oid = 'public.payment_made(text, text)'::regprocedure
			    AND reconcile_bound_in = (SELECT system_identifier FROM pg_control_system())}),
		'orders,refunds',
		"$tag: the scopes' reconciler is bound to the function's OID in the new cluster");

	note "$tag: stream positions";
	is( as_role($node, 'consumer',
			q{SELECT idem_position('events', 0), idem_position('events', 1),
			         idem_advance('events', 0, 100, 64), idem_advance('events', 0, 97, 64),
			         idem_advance('events', 0, 96, 64), idem_advance('events', 0, 30, 64),
			         idem_advance('events', 1, 7), idem_advance('events', 1, 8)}),
		'00000 100|7|f|f|t|f|f|t',
		"$tag: high-water marks and the window's seen positions are kept");

	note "$tag: scope grants";
	is( as_role($node, 'stranger', q{SELECT idem_try_insert('orders', 'msg-1')}),
		'42501 ', "$tag: a role without the scope is refused (42501)");
	is( as_role($node, 'stranger', q{SELECT idem_advance('events', 0, 200, 64)}),
		'42501 ', "$tag: and without the stream (42501)");
	is( as_role($node, 'stranger', q{SELECT status FROM idem_begin('refunds', 'x')}),
		'42501 ', "$tag: and without a scope no one was granted (42501)");
	is(sql($node, q{SELECT string_agg(scope || ':' || grantee, ',' ORDER BY scope)
	                FROM idem_scope_grants}),
		'events:consumer,orders:consumer', "$tag: idem_scope_grants as granted");

	note "$tag: the purge worker";
	ok( $node->poll_query_until($db,
			q{SELECT count(*) = 1 FROM pg_stat_activity
			  WHERE backend_type = 'pg_idem purge' AND datname = current_database()}),
		"$tag: a purge worker serves the database");
	is( sql($node,
			q{SELECT count(*) FILTER (WHERE idem_try_insert('orders', 'expired-' || i, '1 microsecond'))
			  FROM generate_series(1, 20) i}),
		20, "$tag: 20 expired records");
	ok( $node->poll_query_until($db,
			q{SELECT count(*) = 0 FROM idem_records WHERE key LIKE 'expired-%'}),
		"$tag: the worker purges them");
	$node->safe_psql('postgres', 'ALTER SYSTEM SET pg_idem.purge_reconcile = on');
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	ok( $node->poll_query_until($db,
			q{SELECT status = 'completed' FROM idem_records WHERE key = 'stuck-refund'}),
		"$tag: with purge_reconcile on, the worker reconciles through the configured function"
	);
	is(sql($node, q{SELECT count(*) FROM idem_records WHERE key LIKE 'msg-%'}),
		100, "$tag: and leaves the live records alone");
	return;
}

# ---------------------------------------------------------------------------
# One case: an old cluster populated by $populate, upgraded.

sub upgrade_case
{
	my ($tag, $populate) = @_;
	note "case $tag";

	my $old = PostgreSQL::Test::Cluster->new("old_$tag",
		install_path => dirname($old_bin), port());
	# Data checksums in both: initdb turns them on by default since 18, and
	# pg_upgrade wants the same in both clusters.
	$old->init(extra => ['--data-checksums']);
	$old->append_conf('postgresql.conf', $conf);
	$old->start;
	$populate->($old);

	# The claim whose token its consumer keeps across the upgrade.
	my $token = as_role($old, 'consumer',
		qq{SELECT token FROM idem_begin('orders', '$held_key', lease => '1 day')});
	like($token, qr/^00000 [0-9a-f-]{36}$/, "$tag: a claim in progress, with its token");
	$token =~ s/^00000 //;
	is( sql($old,
			q{SELECT string_agg(key || ':' || status, ',' ORDER BY key) FROM idem_records
			  WHERE key NOT LIKE 'msg-%'}),
		'in-flight:in_progress,'
		  . ($tag eq '0.2' ? 'in-flight-0.2:in_progress,' : '')
		  . 'paid:completed,poison:dead,retry-me:failed,stuck-paid:in_progress,'
		  . 'stuck-refund:in_progress,stuck-unpaid:in_progress',
		"$tag: the old cluster holds every kind of record");
	my $before = snapshot($old);
	$old->stop;

	my $new = PostgreSQL::Test::Cluster->new("new_$tag",
		install_path => dirname($new_bin), port());
	$new->init(extra => ['--data-checksums']);
	$new->append_conf('postgresql.conf', $conf);

	# pg_upgrade writes files into its working directory. (Back afterwards:
	# PostgreSQL::Test::Utils of 17 and later may name its directories
	# relative to the test's.)
	my $cwd = getcwd();
	chdir $PostgreSQL::Test::Utils::tmp_check;
	my @upgrade = (
		"$new_bin/pg_upgrade", '--no-sync',
		'--old-datadir' => $old->data_dir,
		'--new-datadir' => $new->data_dir,
		'--old-bindir' => $old_bin,
		'--new-bindir' => $new_bin,
		'--socketdir' => $new->host,
		'--old-port' => $old->port,
		'--new-port' => $new->port,
		'--retain');
	my $output_dir = $new->data_dir . '/pg_upgrade_output.d';

	# (run_log, not command_ok, which does not say whether it passed.)
	my $checked = ok($new->run_log([ @upgrade, '--check' ]), "$tag: pg_upgrade --check");
	show_upgrade_logs($output_dir) unless $checked;
	no_worker_in_binary_upgrade($output_dir, "$tag: pg_upgrade --check") if $checked;
	my $upgraded;
	if ($checked && !$check_only)
	{
		$upgraded = ok($new->run_log(\@upgrade), "$tag: pg_upgrade");
		show_upgrade_logs($output_dir) unless $upgraded;
	}
	chdir $cwd;
	return unless $upgraded;
	no_worker_in_binary_upgrade($output_dir, "$tag: pg_upgrade");

	$new->start;
	is( sql($new, q{SELECT extversion FROM pg_extension WHERE extname = 'pg_idem'}),
		sql($new, q{SELECT default_version FROM pg_available_extensions WHERE name = 'pg_idem'}),
		"$tag: the new cluster has pg_idem at its default version");
	is( $new->safe_psql('postgres',
			q{SELECT idem_try_insert('postgres-scope', 'k')}),
		'f', "$tag: database postgres keeps its record too");
	check_upgraded($new, $tag, $token, $before);
	if ($tag eq '0.2')
	{
		is( as_role($new, 'consumer',
				q{SELECT status FROM idem_begin('orders', 'in-flight-0.2')}),
			'00000 in_progress',
			'0.2: the claim 0.2 left in flight is still held (until its lease ends)');
	}
	$new->stop;
	return;
}

upgrade_case('0.3', \&populate_0_3);
upgrade_case('0.2', \&populate_0_2);

done_testing();
