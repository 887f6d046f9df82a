# Helpers shared by pg_idem's TAP tests (test/t/*.pl).
package IdemTap;

use strict;
use warnings;
use Exporter 'import';
use IPC::Run;
use Test::More;

our @EXPORT_OK = qw(crash_a_backend set_guc);

# Kills a backend of $node with SIGKILL, as a crash would: the postmaster
# then restarts every process and recovers. Returns once the server answers
# again, with ok() for both steps.
sub crash_a_backend
{
	my ($node) = @_;
	my $stdin = '';
	my $sleeper = IPC::Run::start(
		[
			'psql', '-X', '-qAt', '-d', $node->connstr('postgres'),
			'-c', 'SELECT pg_sleep(300)'
		],
		'<', \$stdin, '>', \my $sleeper_out, '2>', \my $sleeper_err);
	ok( $node->poll_query_until(
			'postgres',
			q{SELECT count(*) = 1 FROM pg_stat_activity
			  WHERE query = 'SELECT pg_sleep(300)'}),
		'a backend to kill');
	my $pid = $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(300)'});
	my $offset = -s $node->logfile;
	kill 'KILL', $pid;
	$node->wait_for_log(qr/all server processes terminated; reinitializing/,
		$offset);
	$sleeper->finish;
	ok($node->poll_query_until('postgres', 'SELECT true'),
		'the server is back after crash recovery');
	return;
}

# Sets a server setting with ALTER SYSTEM and a reload; returns once this
# session sees it (the worker has then been signalled too).
sub set_guc
{
	my ($node, $name, $value) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET $name = '$value'");
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	$node->poll_query_until('postgres',
		"SELECT current_setting('$name') = '$value'")
	  or die "the reload did not take";
	return;
}

1;
