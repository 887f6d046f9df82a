# Who can read and write what through pg_idem (issue 8, scenario 6).
#
# The roles, as the README's "Privileges" section sets them up:
#   postgres  the superuser that created the extension (the owner);
#   consumer  granted EXECUTE on idem_try_insert, idem_try_insert_many,
#             the claim protocol (idem_begin, idem_complete, idem_fail,
#             idem_release, idem_lookup) and the stream positions (idem_advance,
#             idem_position), and SELECT, INSERT, UPDATE on its business
#             tables;
#   stranger  the same pg_idem grants, but no privilege on the business
#             tables;
#   blind     UPDATE on orders without SELECT, and INSERT on one column of
#             points_log only;
#   tenant_b  a second tenant of the table with row-level security;
#   outsider  no grant at all: every function of the claim protocol is
#             refused to it (none of them is PUBLIC);
#   hostile   owns schema evil, full of functions, operators and tables
#             named like what pg_idem runs internally (now, lower, hashtext,
#             jsonb_build_object, =, <=, +, idem_records, ...), each of which
#             records its call; the owner's and the consumer's search_path
#             put evil first.
#
# Every refusal is asserted with its exact SQLSTATE, and every refused call
# with the tables compared before and after it (nothing written). A TAP test
# rather than a pg_regress file because roles are global to a cluster: this
# one makes its own, logs in as each role (a connection per role, not SET
# ROLE only), and can let a server crash without harming other suites.
#
# The last three parts are the regression tests of bugs this matrix found
# (a privilege escalation through idem_configure, and two crashes).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('node',
	defined $ENV{PG_IDEM_TAP_PORT} ? (port => $ENV{PG_IDEM_TAP_PORT}) : ());
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'pg_idem'
# The last tests tried to crash a backend (bugs since fixed): come back.
restart_after_crash = on
});
$node->start;

# ---------------------------------------------------------------------------
# Helpers.

# Runs each statement in one session of $role; returns, per statement,
# [its output, its SQLSTATE ('00000' when it succeeded)].
sub session
{
	my ($role, @statements) = @_;
	my $script = "\\set VERBOSITY sqlstate\n";
	$script .= "$_\n\\echo '#state' :SQLSTATE\n" for @statements;
	my ($out, $err) = ('', '');
	$node->psql(
		'postgres', $script,
		stdout => \$out,
		stderr => \$err,
		on_error_stop => 0,
		connstr => $node->connstr('postgres') . " user=$role");
	my (@results, @lines);
	for my $line (split /\n/, $out)
	{
		if ($line =~ /^#state ?(\S*)$/)
		{
			push @results, [ join("\n", @lines), $1 ];
			@lines = ();
		}
		else
		{
			push @lines, $line;
		}
	}
	# psql stops when it loses the connection: the statements it never ran
	# answer 'lost'.
	if (@results < @statements)
	{
		note "session as $role: " . scalar(@results) . " results for "
		  . scalar(@statements) . " statements; psql said: $err";
		push @results, [ '', 'lost' ] while @results < @statements;
	}
	return @results;
}

sub sql_as { my ($role, $statement) = @_; return (session($role, $statement))[0]; }
sub owner_sql { return $node->safe_psql('postgres', $_[0]); }

# Runs $sql as $role, dying on an error.
sub safe_as
{
	my ($role, $sql) = @_;
	return $node->safe_psql('postgres', $sql,
		connstr => $node->connstr('postgres') . " user=$role");
}

# Everything a refused call could have written: pg_idem's tables and the
# business tables, read by the owner.
sub snapshot
{
	return owner_sql(
		q{SELECT string_agg(t || ' ' || n || ' ' || h, ', ' ORDER BY t) FROM (
		    SELECT 'idem_records' t, count(*) n, md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) h FROM idem_records x
		    UNION ALL SELECT 'idem_scopes', count(*), md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) FROM idem_scopes x
		    UNION ALL SELECT 'idem_streams', count(*), md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) FROM idem_streams x
		    UNION ALL SELECT 'orders', count(*), md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) FROM orders x
		    UNION ALL SELECT 'points_log', count(*), md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) FROM points_log x
		    UNION ALL SELECT 'accounts', count(*), md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) FROM accounts x
		  ) s});
}

# Asserts that $statement, run by $role, fails with $state and writes
# nothing.
sub refused
{
	my ($role, $statement, $state, $name) = @_;
	my $before = snapshot();
	my $r = sql_as($role, $statement);
	is($r->[1], $state, "$name: $state");
	is(snapshot(), $before, "$name: nothing written");
	return;
}

# What psql prints when $statement, run by $role, fails: the message, its
# detail and hint.
sub psql_error
{
	my ($role, $statement) = @_;
	my ($out, $err) = ('', '');
	$node->psql(
		'postgres', $statement,
		stdout => \$out,
		stderr => \$err,
		connstr => $node->connstr('postgres') . " user=$role");
	return $err;
}

# Asserts that $statement, run by $role, succeeds with output $expected.
sub answers
{
	my ($role, $statement, $expected, $name) = @_;
	my $r = sql_as($role, $statement);
	is("$r->[1] $r->[0]", "00000 $expected", $name);
	return;
}

# ---------------------------------------------------------------------------
note 'setup: the owner creates the extension, the roles and the tables';

owner_sql(q{
CREATE EXTENSION pg_idem;
CREATE ROLE consumer LOGIN;
CREATE ROLE stranger LOGIN;
CREATE ROLE blind LOGIN;
CREATE ROLE tenant_b LOGIN;
CREATE ROLE hostile LOGIN;
CREATE ROLE outsider LOGIN;
-- What the README says to grant a consumer.
GRANT EXECUTE ON FUNCTION idem_try_insert(text, text, interval),
    idem_try_insert_many(text, text[], interval, bigint[]),
    idem_begin(text, text, interval, text, interval, boolean, interval, bigint),
    idem_complete(text, text, uuid, jsonb, bigint),
    idem_fail(text, text, uuid, text, boolean, bigint),
    idem_release(text, text, uuid, bigint),
    idem_lookup(text, text, bigint),
    idem_advance(text, integer, bigint, integer),
    idem_position(text, integer)
    TO consumer, stranger, blind, tenant_b, hostile;
-- ... and the scopes (and streams) each uses: pg_idem 0.3's scope grants.
SELECT idem_grant('points', 'consumer'), idem_grant('pay', 'consumer'),
       idem_grant('orders', 'consumer'), idem_grant('dos', 'consumer'),
       idem_grant('h', 'hostile'),
       idem_grant('hs', 'hostile'), idem_grant('x', 'hostile'),
       idem_grant('escalate', 'hostile');

CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL,
                     amount int NOT NULL DEFAULT 0, version int NOT NULL DEFAULT 1);
CREATE TABLE points_log (order_id int PRIMARY KEY, points int NOT NULL DEFAULT 0);
INSERT INTO orders VALUES (1, 'c1', 10, 1), (2, 'c2', 20, 1);
INSERT INTO points_log VALUES (1, 5);
GRANT SELECT, INSERT, UPDATE ON orders, points_log TO consumer, hostile;
GRANT UPDATE ON orders TO blind;
GRANT INSERT (order_id) ON points_log TO blind;

CREATE TABLE accounts (id int PRIMARY KEY, tenant text NOT NULL,
                       balance int NOT NULL DEFAULT 0, version int NOT NULL DEFAULT 1);
ALTER TABLE accounts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON accounts USING (tenant = current_user)
    WITH CHECK (tenant = current_user);
INSERT INTO accounts VALUES (1, 'consumer', 100, 1), (2, 'tenant_b', 200, 1);
GRANT SELECT, INSERT, UPDATE ON accounts TO consumer, tenant_b;
});

# ---------------------------------------------------------------------------
note 'the owner: everything';

answers('postgres', q{SELECT idem_try_insert('owner', 'k1');}, 't', 'owner: idem_try_insert');
answers('postgres', q{SELECT count(*) FROM idem_records;}, '1', 'owner: reads idem_records');
answers('postgres', q{SELECT idem_forget('owner', 'k1');}, 't', 'owner: idem_forget');
answers('postgres', q{SELECT idem_purge();}, '0', 'owner: idem_purge');
answers('postgres', q{SELECT count(*) FROM idem_in_flight, idem_dead_letters, idem_purge_status;},
	'0', 'owner: reads the views');

# ---------------------------------------------------------------------------
note 'the consumer: its grants work, nothing else of pg_idem does';

answers('consumer', q{SELECT idem_try_insert('points', 'order-1');}, 't',
	'consumer: idem_try_insert, a new key');
answers('consumer', q{SELECT idem_try_insert('points', 'order-1');}, 'f',
	'consumer: idem_try_insert, a duplicate');
# A batch: the positions of the keys it recorded, a repeat once, at its
# first position ('order-1' is a duplicate from above).
answers('consumer',
	q{SELECT array_agg(p ORDER BY p) FROM idem_try_insert_many('points', ARRAY['order-1', 'order-3', 'order-4', 'order-3']) p;},
	'{2,3}', 'consumer: idem_try_insert_many, new keys, a duplicate and a repeat');
answers('consumer',
	q{SELECT count(*) FROM idem_try_insert_many('points', ARRAY['order-3', 'order-4'], '1 day');},
	'0', 'consumer: idem_try_insert_many, a batch of duplicates');
is(owner_sql(q{SELECT string_agg(key, ',' ORDER BY key) FROM idem_records WHERE scope = 'points'}),
	'order-1,order-3,order-4', 'the batch recorded its two keys, each once');
refused('consumer', q{SELECT * FROM idem_try_insert_many('points', ARRAY['order-5', NULL]);},
	'22004', 'consumer: idem_try_insert_many with a NULL key');
my ($begin, $complete, $again) = session('consumer',
	q{SELECT status, token FROM idem_begin('pay', 'p1') \gset},
	q{SELECT idem_complete('pay', 'p1', :'token', '{"ok": true}');},
	q{SELECT status, result, token IS NULL FROM idem_begin('pay', 'p1');});
is("$begin->[1] $complete->[1] $again->[1] $again->[0]", '00000 00000 00000 completed|{"ok": true}|t',
	'consumer: idem_begin, idem_complete with its token, and the replay (no token)');
{
	my @r = session('consumer',
		q{SELECT attempt, token FROM idem_begin('pay', 'p2') \gset},
		q{SELECT :attempt, :'token'::uuid IS NOT NULL;},
		q{SELECT idem_fail('pay', 'p2', :'token', 'timeout');},
		q{SELECT status, attempt, token IS NULL, last_error FROM idem_lookup('pay', 'p2');});
	is(join(' ', map { "$_->[1]:$_->[0]" } @r), '00000: 00000:1|t 00000:failed 00000:failed|1|t|timeout',
		'consumer: a second claim with its token, idem_fail, and idem_lookup of the failed key');
}
{
	my @r = session('consumer',
		q{SELECT token FROM idem_begin('pay', 'p5', lease => '1 hour') \gset},
		q{SELECT status, token IS NULL FROM idem_lookup('pay', 'p5');},
		q{SELECT idem_release('pay', 'p5', :'token');},
		q{SELECT status, token IS NULL FROM idem_lookup('pay', 'p5');},
		q{SELECT status, attempt, token IS NOT NULL FROM idem_begin('pay', 'p5');},
		q{SELECT status FROM idem_lookup('pay', 'no such key');});
	is(join(' ', map { "$_->[1]:$_->[0]" } @r),
		'00000: 00000:in_progress|t 00000: 00000:failed|t 00000:acquired|2|t 00000:absent',
		'consumer: idem_lookup (never a token), idem_release, and the key claimable again at once');
}
{
	my @r = session('consumer',
		q{SELECT idem_advance('orders', 0, 1, 8);},
		q{SELECT idem_advance('orders', 0, 1, 8);},
		q{SELECT idem_position('orders', 0);});
	is(join(' ', map { "$_->[1]:$_->[0]" } @r), '00000:t 00000:f 00000:1',
		'consumer: idem_advance, its replay, idem_position');
}
answers('stranger', q{SELECT length(idem_key('{"id": 1}', 'id')), length(idem_fingerprint('{}'));},
	'64|64', 'anyone: the pure functions idem_key and idem_fingerprint');
refused('stranger', q{SELECT idem_stream_window_seen('\x00');}, '22P03',
	'anyone: idem_stream_window_seen refuses a forged window');

for my $read ('idem_records', 'idem_scopes', 'idem_streams', 'idem_in_flight',
	'idem_dead_letters', 'idem_purge_status', 'idem_stream_positions', 'idem_stats')
{
	refused('consumer', "SELECT * FROM $read;", '42501', "consumer: SELECT FROM $read");
}
for my $call (
	q{SELECT idem_purge();},
	q{SELECT idem_purge(1);},
	q{SELECT * FROM idem_purge_status();},
	q{SELECT idem_forget('points', 'order-1');},
	q{SELECT idem_retry('pay', 'p2');},
	q{SELECT * FROM idem_reconcile();},
	q{SELECT idem_configure('points', ttl => '1 second');},
	q{SELECT idem_reset_stream('orders');},
	q{SELECT idem_reset_stream('orders', 0);},
	q{SELECT * FROM idem_stats();},
	q{SELECT idem_stats_reset();})
{
	refused('consumer', $call, '42501', "consumer: $call" =~ s/;$//r);
}
# None of the claim protocol is PUBLIC: a role without the grants is refused
# each function (a token of another role's claim included).
my $some_token = owner_sql(q{SELECT gen_random_uuid()});
for my $call (
	q{SELECT idem_try_insert('points', 'order-9');},
	q{SELECT * FROM idem_try_insert_many('points', ARRAY['order-9']);},
	q{SELECT * FROM idem_begin('pay', 'o1');},
	q{SELECT * FROM idem_begin('pay', 'o1', '1 hour', 'fp', '1 s', true, '1 day');},
	qq{SELECT idem_complete('pay', 'p5', '$some_token', '{}');},
	qq{SELECT idem_fail('pay', 'p5', '$some_token', 'no', false);},
	qq{SELECT idem_release('pay', 'p5', '$some_token');},
	q{SELECT * FROM idem_lookup('pay', 'p1');},
	q{SELECT idem_advance('orders', 0, 99);},
	q{SELECT idem_position('orders', 0);})
{
	refused('outsider', $call, '42501', "outsider: $call" =~ s/;$//r);
}
# Even in a scope granted to it: what it lacks is EXECUTE.
owner_sql(q{SELECT idem_grant('outsider', 'outsider');});
refused('outsider', q{SELECT * FROM idem_try_insert_many('outsider', ARRAY['o9']);}, '42501',
	'outsider, in a scope granted to it: idem_try_insert_many');
like(psql_error('outsider', q{SELECT * FROM idem_try_insert_many('outsider', ARRAY['o9']);}),
	qr/permission denied for function idem_try_insert_many/,
	'outsider: the refusal is for want of EXECUTE');
# Scopes are a boundary: hostile, with the same EXECUTE as the consumer,
# is refused every function in the consumer's scopes and streams.
for my $call (
	q{SELECT idem_try_insert('points', 'order-9');},
	q{SELECT * FROM idem_try_insert_many('points', ARRAY['order-9']);},
	q{SELECT * FROM idem_try_insert_many('points', ARRAY['order-1', 'order-9'], '1 us');},
	q{SELECT (idem_begin('pay', 'p1')).result;},
	q{SELECT * FROM idem_lookup('pay', 'p1');},
	qq{SELECT idem_complete('pay', 'p5', '$some_token', '{}');},
	qq{SELECT idem_release('pay', 'p5', '$some_token');},
	q{SELECT idem_advance('orders', 0, 99);},
	q{SELECT idem_position('orders', 0);})
{
	refused('hostile', $call, '42501', "hostile, in the consumer's scope: $call" =~ s/;$//r);
}
# A batch cannot tell a role which keys another scope holds: the keys the
# consumer recorded and keys no one did are refused alike, with the same
# words, in a read-only transaction too (where nothing could be written
# anyway), and a batch of them all is refused whole, not answered in part.
{
	my $before = snapshot();
	my @r = session('hostile',
		q{SELECT * FROM idem_try_insert_many('points', ARRAY['order-1', 'order-3']);},
		q{SELECT * FROM idem_try_insert_many('points', ARRAY['never-1', 'never-2']);},
		q{BEGIN READ ONLY;},
		q{SELECT * FROM idem_try_insert_many('points', ARRAY['order-1']);},
		q{ROLLBACK;},
		q{BEGIN READ ONLY;},
		q{SELECT * FROM idem_try_insert_many('points', ARRAY['never-1']);},
		q{ROLLBACK;},
		q{SELECT * FROM idem_try_insert_many('points', ARRAY['h-own', 'order-1', 'never-1']);});
	is(join(' ', map { $_->[1] } @r[ 0, 1, 3, 6, 8 ]), '42501 42501 42501 42501 42501',
		'hostile: idem_try_insert_many in the consumer\'s scope, keys recorded or not, is refused');
	is(snapshot(), $before, 'hostile: idem_try_insert_many in the consumer\'s scope: nothing written');
	my @words = map {
		psql_error('hostile', "SELECT * FROM idem_try_insert_many('points', ARRAY['$_']);")
	} ('order-1', 'never-1');
	note "hostile is told: $words[0]";
	like($words[0], qr/may not use scope "points"/, 'hostile: the refusal names the scope');
	is($words[1], $words[0], 'hostile: the same refusal for a recorded key and an unknown one');
}
answers('hostile', q{SELECT array_agg(p ORDER BY p) FROM idem_try_insert_many('h', ARRAY['b1', 'b2', 'b1']) p;},
	'{1,2}', 'hostile: idem_try_insert_many in its own scope');
is(owner_sql(q{SELECT string_agg(key, ',' ORDER BY key) FROM idem_records WHERE scope = 'points'}),
	'order-1,order-3,order-4', 'the consumer\'s scope holds only the consumer\'s keys');
# The 0.2 signatures, completing by attempt number, are gone.
refused('consumer', q{SELECT idem_complete('pay', 'p5', 2, '{}');}, '42883',
	'consumer: idem_complete with an attempt number (0.2) does not exist');
refused('consumer', q{SELECT idem_fail('pay', 'p5', 2, 'no', false);}, '42883',
	'consumer: idem_fail with an attempt number (0.2) does not exist');
# The PUBLIC functions that run as the caller cannot reach pg_idem's tables,
# and neither can plain statements.
for my $case (
	[ 'idem_try_insert_row into idem_records',
		q{SELECT idem_try_insert_row('idem_records', '{"key_id": "\\\\x0001", "scope": "points", "key": "x", "status": "completed", "recorded_at": "now", "expires_at": "infinity"}');} ],
	[ 'idem_try_insert_row into idem_scopes',
		q{SELECT idem_try_insert_row('idem_scopes', '{"scope": "points", "ttl": "1 us", "configured_by": "consumer", "configured_at": "now"}');} ],
	[ 'idem_versioned_update of idem_records',
		q{SELECT idem_versioned_update('idem_records', jsonb_build_object('key_id', '\\x0006706f696e74736f726465722d31'), 1, '{"status": "in_progress"}', 'attempts');} ],
	[ 'idem_try_insert_row into idem_streams',
		q{SELECT idem_try_insert_row('idem_streams', '{"stream": "orders", "part": 1, "position": 99, "window_size": 0, "window_state": "\\\\x00", "updated_at": "now"}');} ],
	[ 'idem_versioned_update of idem_streams',
		q{SELECT idem_versioned_update('idem_streams', '{"stream": "orders", "part": 0}', 8, '{"position": 1000}', 'window_size');} ],
	[ 'idem_versioned_update of idem_scopes',
		q{SELECT idem_versioned_update('idem_scopes', '{"scope": "pay"}', 1, '{"ttl": "1 us"}', 'max_attempts');} ],
	[ 'INSERT INTO idem_records',
		q{INSERT INTO idem_records (key_id, scope, key, status, recorded_at, expires_at) VALUES ('\\x00', 's', 'k', 'completed', now(), now());} ],
	[ 'DELETE FROM idem_records', q{DELETE FROM idem_records;} ],
	[ 'UPDATE idem_scopes', q{UPDATE idem_scopes SET ttl = '1 us';} ],
	[ 'TRUNCATE idem_records', q{TRUNCATE idem_records;} ])
{
	refused('consumer', $case->[1], '42501', "consumer: $case->[0]");
}
# PostgreSQL refuses ON CONFLICT on a catalog before it checks privileges.
refused('consumer', q{SELECT idem_try_insert_row('pg_authid', '{"rolname": "x"}');},
	'0A000', 'consumer: idem_try_insert_row into a system catalog');
refused('postgres', q{SELECT idem_try_insert_row('pg_authid', '{"rolname": "x"}');},
	'0A000', 'even the owner: idem_try_insert_row into a system catalog');
refused('consumer', q{SELECT idem_versioned_update('pg_class', '{"oid": 1259}', 1, '{}', 'relnatts');},
	'42501', 'consumer: idem_versioned_update of a system catalog');

# ---------------------------------------------------------------------------
note 'a role without privileges on the business tables';

refused('stranger', q{SELECT idem_try_insert_row('orders', '{"id": 3, "customer": "s"}');},
	'42501', 'stranger: idem_try_insert_row, a new row');
refused('stranger', q{SELECT idem_try_insert_row('orders', '{"id": 1, "customer": "s"}');},
	'42501', 'stranger: idem_try_insert_row of an existing key (no false: nothing leaks)');
refused('stranger', q{SELECT idem_versioned_update('orders', '{"id": 1}', 1, '{"amount": 0}');},
	'42501', 'stranger: idem_versioned_update of an existing row');
refused('stranger', q{SELECT idem_versioned_update('orders', '{"id": 1}', 7, '{"amount": 0}');},
	'42501', 'stranger: idem_versioned_update, a stale version (no false: nothing leaks)');
refused('stranger', q{SELECT idem_versioned_update('orders', '{"id": 99}', 1, '{"amount": 0}');},
	'42501', 'stranger: idem_versioned_update of a missing row (no NULL: nothing leaks)');
refused('stranger', q{SELECT idem_try_insert_row('accounts', '{"id": 9, "tenant": "stranger"}');},
	'42501', 'stranger: idem_try_insert_row into the RLS table');
refused('blind', q{SELECT idem_versioned_update('orders', '{"id": 1}', 1, '{"amount": 0}');},
	'42501', 'UPDATE without SELECT: idem_versioned_update of an existing row');
refused('blind', q{SELECT idem_versioned_update('orders', '{"id": 99}', 1, '{"amount": 0}');},
	'42501', 'UPDATE without SELECT: idem_versioned_update of a missing row');
answers('blind', q{SELECT idem_try_insert_row('points_log', '{"order_id": 7}');}, 't',
	'INSERT on one column: idem_try_insert_row of that column (the rest defaulted)');
refused('blind', q{SELECT idem_try_insert_row('points_log', '{"order_id": 8, "points": 3}');},
	'42501', 'INSERT on one column: idem_try_insert_row of another column');

# A statement prepared for the owner is not a way around the checks: in one
# session, the owner's calls first, then the same statements as stranger.
{
	my @r = session('postgres',
		q{SELECT idem_try_insert_row('orders', '{"id": 3, "customer": "o"}');},
		q{SELECT idem_versioned_update('orders', '{"id": 3}', 1, '{"amount": 30}');},
		q{SET ROLE stranger;},
		q{SELECT idem_try_insert_row('orders', '{"id": 4, "customer": "s"}');},
		q{SELECT idem_versioned_update('orders', '{"id": 3}', 2, '{"amount": 0}');},
		q{RESET ROLE;},
		q{SELECT amount, version FROM orders WHERE id = 3;},
		q{SELECT count(*) FROM orders WHERE id = 4;});
	is(join(' ', map { "$_->[1]:$_->[0]" } @r),
		'00000:t 00000:t 00000: 42501: 42501: 00000: 00000:30|2 00000:0',
		'cached statements: the owner inserts and updates, then stranger is refused with 42501 and writes nothing');
}

# ---------------------------------------------------------------------------
note 'row-level security applies to both functions';

answers('consumer', q{SELECT idem_try_insert_row('accounts', '{"id": 3, "tenant": "consumer"}');},
	't', 'RLS: the consumer inserts a row of its own');
refused('consumer', q{SELECT idem_try_insert_row('accounts', '{"id": 4, "tenant": "tenant_b"}');},
	'42501', "RLS: the consumer inserts a row of another tenant (WITH CHECK)");
{
	my $before = snapshot();
	answers('consumer', q{SELECT idem_versioned_update('accounts', '{"id": 2}', 1, '{"balance": 0}') IS NULL;},
		't', "RLS: idem_versioned_update of another tenant's row answers NULL, as for a missing row");
	is(snapshot(), $before, "RLS: and the other tenant's row is unchanged");
}
answers('consumer', q{SELECT idem_versioned_update('accounts', '{"id": 1}', 1, '{"balance": 150}');},
	't', 'RLS: idem_versioned_update of its own row');
refused('consumer', q{SELECT idem_versioned_update('accounts', '{"id": 1}', 2, '{"tenant": "tenant_b"}');},
	'42501', 'RLS: idem_versioned_update that would give its row away (WITH CHECK)');
refused('consumer', q{SET row_security = off; SELECT idem_try_insert_row('accounts', '{"id": 5, "tenant": "consumer"}');},
	'42501', 'RLS: row_security = off makes the call fail instead of bypassing the policy');
# ON CONFLICT sees rows that the policy hides: PostgreSQL's own behaviour,
# which idem_try_insert_row neither adds to nor hides.
{
	my @r = session('consumer',
		q{SELECT idem_try_insert_row('accounts', '{"id": 2, "tenant": "consumer"}');},
		q{WITH i AS (INSERT INTO accounts VALUES (2, 'consumer') ON CONFLICT DO NOTHING RETURNING 1)
		  SELECT count(*) FROM i;});
	is("$r[0][1]:$r[0][0] $r[1][1]:$r[1][0]", '00000:f 00000:0',
		'RLS: a conflict with a hidden row is a duplicate, exactly as for INSERT ... ON CONFLICT DO NOTHING');
}
# A statement prepared while the owner (who bypasses RLS) called the
# function must not carry that bypass over to another role.
{
	my @r = session('postgres',
		q{SELECT idem_versioned_update('accounts', '{"id": 2}', 1, '{"balance": 201}');},
		q{SELECT idem_try_insert_row('accounts', '{"id": 20, "tenant": "tenant_b"}');},
		q{SET ROLE consumer;},
		q{SELECT idem_versioned_update('accounts', '{"id": 2}', 2, '{"balance": 666}') IS NULL;},
		q{SELECT idem_try_insert_row('accounts', '{"id": 21, "tenant": "tenant_b"}');},
		q{RESET ROLE;},
		q{SELECT balance, version FROM accounts WHERE id = 2;},
		q{SELECT count(*) FROM accounts WHERE id = 21;});
	is(join(' ', map { "$_->[1]:$_->[0]" } @r),
		'00000:t 00000:t 00000: 00000:t 42501: 00000: 00000:201|2 00000:0',
		'cached statements: after the owner, the consumer still sees only its rows and cannot write others');
}
answers('tenant_b', q{SELECT balance FROM accounts ORDER BY id;}, "201\n0",
	"tenant_b sees its rows, with the owner's update");

# ---------------------------------------------------------------------------
note 'hostile objects earlier in search_path are never called';

owner_sql(q{CREATE SCHEMA evil AUTHORIZATION hostile;});
safe_as('hostile', q{
CREATE SEQUENCE evil.hits;
CREATE TABLE evil.calls (fn text, by_role text, at timestamptz DEFAULT pg_catalog.clock_timestamp());
GRANT USAGE ON SCHEMA evil TO PUBLIC;
GRANT USAGE, UPDATE ON SEQUENCE evil.hits TO PUBLIC;
GRANT INSERT ON evil.calls TO PUBLIC;
-- Records a call, in a sequence (survives a rollback) and in a table.
CREATE FUNCTION evil.record(fn text) RETURNS void LANGUAGE sql AS $$
    SELECT pg_catalog.nextval('evil.hits');
    INSERT INTO evil.calls (fn, by_role) VALUES (fn, current_user);
$$;
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql
    AS $$SELECT evil.record('now'); SELECT pg_catalog.now()$$;
CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql
    AS $$SELECT evil.record('clock_timestamp'); SELECT pg_catalog.clock_timestamp()$$;
CREATE FUNCTION evil.statement_timestamp() RETURNS timestamptz LANGUAGE sql
    AS $$SELECT evil.record('statement_timestamp'); SELECT pg_catalog.statement_timestamp()$$;
CREATE FUNCTION evil.lower(text) RETURNS text LANGUAGE sql
    AS $$SELECT evil.record('lower'); SELECT pg_catalog.lower($1)$$;
CREATE FUNCTION evil.upper(text) RETURNS text LANGUAGE sql
    AS $$SELECT evil.record('upper'); SELECT pg_catalog.upper($1)$$;
CREATE FUNCTION evil.length(text) RETURNS int LANGUAGE sql
    AS $$SELECT evil.record('length'); SELECT pg_catalog.length($1)$$;
CREATE FUNCTION evil.octet_length(text) RETURNS int LANGUAGE sql
    AS $$SELECT evil.record('octet_length'); SELECT pg_catalog.octet_length($1)$$;
CREATE FUNCTION evil.hashtext(text) RETURNS int LANGUAGE sql
    AS $$SELECT evil.record('hashtext'); SELECT pg_catalog.hashtext($1)$$;
CREATE FUNCTION evil.sha256(bytea) RETURNS bytea LANGUAGE sql
    AS $$SELECT evil.record('sha256'); SELECT pg_catalog.sha256($1)$$;
CREATE FUNCTION evil.jsonb_build_object(VARIADIC text[]) RETURNS jsonb LANGUAGE sql
    AS $$SELECT evil.record('jsonb_build_object'); SELECT pg_catalog.jsonb_object($1)$$;
CREATE FUNCTION evil.to_jsonb(text) RETURNS jsonb LANGUAGE sql
    AS $$SELECT evil.record('to_jsonb'); SELECT pg_catalog.to_jsonb($1)$$;
CREATE FUNCTION evil.quote_ident(text) RETURNS text LANGUAGE sql
    AS $$SELECT evil.record('quote_ident'); SELECT pg_catalog.quote_ident($1)$$;
CREATE FUNCTION evil.format(text, VARIADIC text[]) RETURNS text LANGUAGE sql
    AS $$SELECT evil.record('format'); SELECT pg_catalog.format($1, VARIADIC $2)$$;
CREATE FUNCTION evil.count_step(bigint) RETURNS bigint LANGUAGE sql
    AS $$SELECT evil.record('count'); SELECT $1 OPERATOR(pg_catalog.+) 1$$;
CREATE AGGREGATE evil.count(*) (sfunc = evil.count_step, stype = bigint, initcond = '0');
CREATE FUNCTION evil.min_step(timestamptz, timestamptz) RETURNS timestamptz LANGUAGE sql
    AS $$SELECT evil.record('min'); SELECT LEAST($1, $2)$$;
CREATE AGGREGATE evil.min(timestamptz) (sfunc = evil.min_step, stype = timestamptz);

-- Operators, for every pair of types pg_idem compares.
CREATE FUNCTION evil.eq_text(text, text) RETURNS boolean LANGUAGE sql
    AS $$SELECT evil.record('= text'); SELECT pg_catalog.texteq($1, $2)$$;
CREATE OPERATOR evil.= (leftarg = text, rightarg = text, function = evil.eq_text);
CREATE FUNCTION evil.ne_text(text, text) RETURNS boolean LANGUAGE sql
    AS $$SELECT evil.record('<> text'); SELECT pg_catalog.textne($1, $2)$$;
CREATE OPERATOR evil.<> (leftarg = text, rightarg = text, function = evil.ne_text);
CREATE FUNCTION evil.cat_text(text, text) RETURNS text LANGUAGE sql
    AS $$SELECT evil.record('|| text'); SELECT pg_catalog.textcat($1, $2)$$;
CREATE OPERATOR evil.|| (leftarg = text, rightarg = text, function = evil.cat_text);
CREATE FUNCTION evil.eq_bytea(bytea, bytea) RETURNS boolean LANGUAGE sql
    AS $$SELECT evil.record('= bytea'); SELECT pg_catalog.byteaeq($1, $2)$$;
CREATE OPERATOR evil.= (leftarg = bytea, rightarg = bytea, function = evil.eq_bytea);
CREATE FUNCTION evil.eq_int(int, int) RETURNS boolean LANGUAGE sql
    AS $$SELECT evil.record('= int'); SELECT pg_catalog.int4eq($1, $2)$$;
CREATE OPERATOR evil.= (leftarg = int, rightarg = int, function = evil.eq_int);
CREATE FUNCTION evil.eq_bigint(bigint, bigint) RETURNS boolean LANGUAGE sql
    AS $$SELECT evil.record('= bigint'); SELECT pg_catalog.int8eq($1, $2)$$;
CREATE OPERATOR evil.= (leftarg = bigint, rightarg = bigint, function = evil.eq_bigint);
CREATE FUNCTION evil.eq_int_bigint(int, bigint) RETURNS boolean LANGUAGE sql
    AS $$SELECT evil.record('= int bigint'); SELECT pg_catalog.int48eq($1, $2)$$;
CREATE OPERATOR evil.= (leftarg = int, rightarg = bigint, function = evil.eq_int_bigint);
CREATE FUNCTION evil.pl_bigint_int(bigint, int) RETURNS bigint LANGUAGE sql
    AS $$SELECT evil.record('+ bigint int'); SELECT pg_catalog.int84pl($1, $2)$$;
CREATE OPERATOR evil.+ (leftarg = bigint, rightarg = int, function = evil.pl_bigint_int);
CREATE FUNCTION evil.pl_int(int, int) RETURNS int LANGUAGE sql
    AS $$SELECT evil.record('+ int'); SELECT pg_catalog.int4pl($1, $2)$$;
CREATE OPERATOR evil.+ (leftarg = int, rightarg = int, function = evil.pl_int);
CREATE FUNCTION evil.le_ts(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql
    AS $$SELECT evil.record('<= timestamptz'); SELECT pg_catalog.timestamptz_le($1, $2)$$;
CREATE OPERATOR evil.<= (leftarg = timestamptz, rightarg = timestamptz, function = evil.le_ts);
CREATE FUNCTION evil.eq_ts(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql
    AS $$SELECT evil.record('= timestamptz'); SELECT pg_catalog.timestamptz_eq($1, $2)$$;
CREATE OPERATOR evil.= (leftarg = timestamptz, rightarg = timestamptz, function = evil.eq_ts);
CREATE FUNCTION evil.mi_ts(timestamptz, timestamptz) RETURNS interval LANGUAGE sql
    AS $$SELECT evil.record('- timestamptz'); SELECT pg_catalog.timestamptz_mi($1, $2)$$;
CREATE OPERATOR evil.- (leftarg = timestamptz, rightarg = timestamptz, function = evil.mi_ts);
CREATE FUNCTION evil.pl_ts(timestamptz, interval) RETURNS timestamptz LANGUAGE sql
    AS $$SELECT evil.record('+ timestamptz interval'); SELECT pg_catalog.timestamptz_pl_interval($1, $2)$$;
CREATE OPERATOR evil.+ (leftarg = timestamptz, rightarg = interval, function = evil.pl_ts);
CREATE FUNCTION evil.eq_tid(tid, tid) RETURNS boolean LANGUAGE sql
    AS $$SELECT evil.record('= tid'); SELECT pg_catalog.tideq($1, $2)$$;
CREATE OPERATOR evil.= (leftarg = tid, rightarg = tid, function = evil.eq_tid);
CREATE FUNCTION evil.eq_status(public.idem_status, public.idem_status) RETURNS boolean LANGUAGE sql
    AS $$SELECT evil.record('= idem_status'); SELECT pg_catalog.enum_eq($1, $2)$$;
CREATE OPERATOR evil.= (leftarg = public.idem_status, rightarg = public.idem_status,
                        function = evil.eq_status);
CREATE FUNCTION evil.ne_status(public.idem_status, public.idem_status) RETURNS boolean LANGUAGE sql
    AS $$SELECT evil.record('<> idem_status'); SELECT pg_catalog.enum_ne($1, $2)$$;
CREATE OPERATOR evil.<> (leftarg = public.idem_status, rightarg = public.idem_status,
                         function = evil.ne_status);
CREATE FUNCTION evil.eq_jsonb(jsonb, jsonb) RETURNS boolean LANGUAGE sql
    AS $$SELECT evil.record('= jsonb'); SELECT pg_catalog.jsonb_eq($1, $2)$$;
CREATE OPERATOR evil.= (leftarg = jsonb, rightarg = jsonb, function = evil.eq_jsonb);

-- Tables named like pg_idem's (hostile cannot read them, so no LIKE).
CREATE TABLE evil.idem_records (key_id bytea, scope text, key text, status text,
    attempts int, attempt_base int, recorded_at timestamptz, expires_at timestamptz,
    lease_expires_at timestamptz, holder_pid int, holder_started_at timestamptz,
    fingerprint text, result jsonb, last_error text);
CREATE TABLE evil.idem_scopes (scope text, ttl interval, lease interval, max_attempts int,
    on_fingerprint_mismatch text, reconcile_function regprocedure,
    takeover_on_disconnect boolean, configured_by regrole, configured_at timestamptz);
GRANT ALL ON evil.idem_records, evil.idem_scopes TO PUBLIC;
});
# The trap works: an unqualified call from that search_path is caught.
answers('postgres', q{SET search_path = evil, pg_catalog, public;
	SELECT now() IS NOT NULL AND lower('A') = 'a';}, 't',
	'the trap: unqualified now(), lower() and = from search_path are the planted ones');
is(owner_sql(q{SELECT string_agg(fn || ' by ' || by_role, ', ' ORDER BY fn) FROM evil.calls}),
	'= text by postgres, lower by postgres, now by postgres',
	'the trap records each call and the role it ran as');
owner_sql(q{TRUNCATE evil.calls; ALTER SEQUENCE evil.hits RESTART;});

my $evil_path = q{SET search_path = evil, pg_catalog, public;};
# A reconciliation function that pins its own search_path: what it calls is
# its business, not pg_idem's.
owner_sql(q{
CREATE FUNCTION settled(scope text, key text) RETURNS boolean LANGUAGE sql
    SET search_path = pg_catalog AS 'SELECT true';
GRANT EXECUTE ON FUNCTION idem_configure(text, interval, interval, integer, text, regprocedure, boolean)
    TO hostile;
});

# Every path of every function, as the owner (SECURITY DEFINER functions run
# as the owner: a planted object called there would be a privilege
# escalation) with the hostile schema first in search_path. Errors are part
# of the workload (a fingerprint mismatch, a refused completion).
my @owner_workload = (
	$evil_path,
	q{SELECT * FROM public.idem_configure('h', ttl => '1 hour', lease => '1 us', max_attempts => 3, reconcile_function => 'public.settled(text, text)');},
	q{SELECT * FROM public.idem_configure('h', ttl => '1 hour', lease => '1 us', max_attempts => 2, reconcile_function => 'public.settled(text, text)');},
	q{SELECT * FROM public.idem_configure('fp', on_fingerprint_mismatch => 'status');},
	q{SELECT public.idem_try_insert('h', 'k1');},
	q{SELECT public.idem_try_insert('h', 'k1');},
	q{SELECT public.idem_try_insert('h', repeat('long', 100));},
	q{SELECT public.idem_try_insert('h', 'k2', '1 us');},
	q{SELECT pg_catalog.pg_sleep(0.01);},
	q{SELECT public.idem_try_insert('h', 'k2');},
	q{SELECT pg_catalog.count(*) FROM public.idem_try_insert_many('h', ARRAY['k1', 'k3', 'k3', repeat('long', 100), 'k4'], '1 day');},
	q{SELECT * FROM public.idem_try_insert_many('h', ARRAY['k5', 'k6'], '1 us');},
	q{SELECT pg_catalog.pg_sleep(0.01);},
	q{SELECT * FROM public.idem_try_insert_many('h', ARRAY['k6', 'k5']);},
	q{SELECT token FROM public.idem_begin('h', 'c1') \gset},
	q{SELECT * FROM public.idem_begin('h', 'c1');},
	q{SELECT * FROM public.idem_begin('h', 'c1');},
	q{SELECT * FROM public.idem_begin('h', 'c1');},
	q{SELECT public.idem_retry('h', 'c1');},
	q{SELECT token FROM public.idem_begin('h', 'c1', lease => '1 hour') \gset},
	q{SELECT public.idem_fail('h', 'c1', :'token', 'boom', false);},
	q{SELECT public.idem_forget('h', 'c1');},
	q{SELECT token FROM public.idem_begin('h', 'c2', lease => '1 hour', fingerprint => repeat('a', 64)) \gset},
	q{SELECT * FROM public.idem_begin('h', 'c2', wait => '20 ms');},
	q{SELECT public.idem_forget('h', 'c2');},
	q{SELECT public.idem_complete('h', 'c2', :'token', '{"r": 1}');},
	q{SELECT public.idem_complete('h', 'c2', :'token', '{"r": 1}');},
	q{SELECT * FROM public.idem_begin('h', 'c2', fingerprint => repeat('a', 64));},
	q{SELECT * FROM public.idem_begin('h', 'c2', fingerprint => repeat('b', 64));},
	q{SELECT * FROM public.idem_begin('fp', 'f1', fingerprint => repeat('a', 64));},
	q{SELECT * FROM public.idem_begin('fp', 'f1', fingerprint => repeat('b', 64));},
	q{SELECT * FROM public.idem_begin('h', 'c3', takeover_on_disconnect => true);},
	q{SELECT * FROM public.idem_begin('h', 'c3', takeover_on_disconnect => true);},
	q{SELECT * FROM public.idem_begin('h', 'c4');},
	q{SELECT token FROM public.idem_begin('h', 'c5', lease => '1 hour', fingerprint => 'v1:Zm9vYmFy', ttl => '2 days') \gset},
	q{SELECT status, fingerprint FROM public.idem_lookup('h', 'c5');},
	q{SELECT public.idem_complete('h', 'c5', pg_catalog.gen_random_uuid());},
	q{SELECT public.idem_fail('h', 'c5', NULL, 'no');},
	q{SELECT public.idem_release('h', 'c5', :'token');},
	q{SELECT public.idem_release('h', 'c5', :'token');},
	q{SELECT token FROM public.idem_begin('h', 'c5', lease => '1 hour', fingerprint => 'v2:YmFyYmF6') \gset},
	q{SELECT public.idem_complete('h', 'c5', :'token', '{"r": 5}');},
	q{SELECT * FROM public.idem_begin('h', 'c5', fingerprint => 'v1:Zm9vYmFy');},
	q{SELECT * FROM public.idem_lookup('h', 'c5');},
	q{SELECT * FROM public.idem_lookup('h', 'nothing');},
	q{SELECT pg_catalog.pg_sleep(0.01);},
	q{SELECT * FROM public.idem_reconcile();},
	q{SELECT * FROM public.idem_reconcile('h', 10);},
	q{SELECT public.idem_try_insert('gone', 'g1', '1 us');},
	q{SELECT pg_catalog.pg_sleep(0.01);},
	q{SELECT public.idem_purge();},
	q{SELECT * FROM public.idem_purge_status();},
	q{SELECT * FROM public.idem_purge_status;},
	q{SELECT * FROM public.idem_in_flight;},
	q{SELECT * FROM public.idem_dead_letters;},
	q{SELECT public.idem_try_insert_row('orders', '{"id": 50, "customer": "e"}');},
	q{SELECT public.idem_try_insert_row('orders', '{"id": 50, "customer": "e"}');},
	q{SELECT public.idem_try_insert_row('points_log', '{"order_id": 50}');},
	q{SELECT public.idem_versioned_update('orders', '{"id": 50}', 1, '{"amount": 5}');},
	q{SELECT public.idem_versioned_update('orders', '{"id": 50}', 1, '{"amount": 5}');},
	q{SELECT public.idem_versioned_update('orders', '{"id": 51}', 1, '{"amount": 5}');},
	q{SELECT public.idem_versioned_update('accounts', '{"id": 1}', 2, '{"balance": 1}');},
	q{SELECT public.idem_versioned_update('orders', '{"id": 50}', 2, '{}', 'version');},
	q{SELECT public.idem_advance('hs', 0, 5, 8);},
	q{SELECT public.idem_advance('hs', 0, 7, 8);},
	q{SELECT public.idem_advance('hs', 0, 6, 8);},
	q{SELECT public.idem_advance('hs', 0, 6, 8);},
	q{SELECT public.idem_advance('hs', 1, 6);},
	q{SELECT public.idem_position('hs', 0);},
	q{SELECT * FROM public.idem_stream_positions;},
	q{SELECT public.idem_reset_stream('hs', 1);},
	q{SELECT public.idem_reset_stream('hs');},
	q{SELECT public.idem_key('{"a": {"b": [1, 2]}, "c.d": "x"}', 'a.b.1', 'c\\.d');},
	q{SELECT public.idem_fingerprint('{"b": 1, "a": [1.0, "x"]}');},
	q{SELECT pg_catalog.count(*) FROM public.idem_stats;},
	q{SELECT public.idem_stats_reset();},
	q{BEGIN; SELECT public.idem_try_insert('h', 'rolled back'); SELECT public.idem_begin('h', 'rolled back 2'); ROLLBACK;},
	q{BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT public.idem_try_insert('h', 'k1'); SELECT public.idem_try_insert('h', 'ser'); COMMIT;},
);
my @owner_results = session('postgres', @owner_workload);
my %owner_states;
$owner_states{ $_->[1] }++ for @owner_results;
is(join(' ', map { "$_:$owner_states{$_}" } sort keys %owner_states), '00000:71 55000:5 IDM01:2',
	'the owner\'s workload ran (refusals expected: forgetting a claim in progress, '
	  . 'a repeated completion, a random and a NULL token, a released token, '
	  . 'two fingerprint mismatches)');

# The consumer's granted functions with the hostile schema first, and its
# own temporary tables named like pg_idem's (pg_temp comes first for tables).
my @consumer_results = session('consumer',
	q{CREATE TEMP TABLE idem_records (key_id bytea, scope text, key text, status text);},
	q{CREATE TEMP TABLE idem_scopes (scope text, ttl interval);},
	$evil_path,
	q{SELECT public.idem_try_insert('points', 'order-2');},
	q{SELECT public.idem_try_insert('points', 'order-2');},
	q{SELECT * FROM public.idem_try_insert_many('points', ARRAY['order-2', 'order-6']);},
	q{SELECT token FROM public.idem_begin('pay', 'p3', lease => '1 hour') \gset},
	q{SELECT public.idem_complete('pay', 'p3', :'token');},
	q{SELECT token FROM public.idem_begin('pay', 'p4', lease => '1 hour') \gset},
	q{SELECT public.idem_fail('pay', 'p4', :'token', 'no');},
	q{SELECT token FROM public.idem_begin('pay', 'p6', lease => '1 hour', fingerprint => 'v1', ttl => '1 day') \gset},
	q{SELECT public.idem_release('pay', 'p6', :'token');},
	q{SELECT * FROM public.idem_lookup('pay', 'p6');},
	q{SELECT public.idem_try_insert_row('orders', '{"id": 60, "customer": "c"}');},
	q{SELECT public.idem_versioned_update('orders', '{"id": 60}', 1, '{"amount": 6}');},
	q{SELECT public.idem_versioned_update('accounts', '{"id": 2}', 2, '{"balance": 6}');},
	q{SELECT public.idem_advance('orders', 1, 10, 4);},
	q{SELECT public.idem_position('orders', 1);},
	q{SELECT pg_catalog.count(*) FROM pg_temp.idem_records;},
	q{SELECT pg_catalog.count(*) FROM pg_temp.idem_scopes;});
is(join(' ', map { $_->[1] } @consumer_results), join(' ', ('00000') x 20),
	'the consumer\'s workload ran');
is($consumer_results[18][0] . ' ' . $consumer_results[19][0], '0 0',
	'the consumer\'s temporary idem_records and idem_scopes were not written');
is(owner_sql(q{SELECT count(*) FROM idem_records WHERE key IN ('order-2', 'order-6', 'p3', 'p4', 'p6')}), '5',
	'the real idem_records was');

# And hostile itself, with its own schema first.
my @hostile_results = session('hostile',
	$evil_path,
	q{SELECT public.idem_try_insert('x', 'h1');},
	q{SELECT * FROM public.idem_try_insert_many('x', ARRAY['h1', 'h4']);},
	q{SELECT token FROM public.idem_begin('x', 'h2') \gset},
	q{SELECT public.idem_complete('x', 'h2', :'token', '{}');},
	q{SELECT * FROM public.idem_lookup('x', 'h2');},
	q{SELECT token FROM public.idem_begin('x', 'h3', ttl => '1 hour') \gset},
	q{SELECT public.idem_release('x', 'h3', :'token');},
	q{SELECT * FROM public.idem_configure('x', ttl => '1 day');});
is(join(' ', map { $_->[1] } @hostile_results), join(' ', ('00000') x 9),
	'hostile\'s own workload ran');

is(owner_sql(q{SELECT count(*) FROM evil.calls}), '0', 'no planted object was called (evil.calls)');
is(owner_sql(q{SELECT is_called FROM evil.hits}), 'f',
	'no planted object was called, not even in a rolled-back transaction (evil.hits)');
note 'calls: ' . owner_sql(q{SELECT string_agg(fn || ' by ' || by_role, ', ') FROM evil.calls});
is(owner_sql(q{SELECT count(*) FROM evil.idem_records}) . ' '
	  . owner_sql(q{SELECT count(*) FROM evil.idem_scopes}),
	'0 0', 'the planted idem_records and idem_scopes were never written');

# ---------------------------------------------------------------------------
note 'fixed bug: idem_configure recorded the session user, not the caller';

# A role allowed to configure scopes made a superuser's routine ANALYZE
# call idem_configure for it (an expression index runs as the table owner,
# but GetOuterUserId() was still the superuser's): its reconciliation
# function then ran as the superuser, from idem_reconcile or the purge
# worker. Autovacuum's own ANALYZE did the same. idem_configure is now
# SECURITY INVOKER and records the current user.
safe_as('hostile', q{
CREATE FUNCTION evil.reconcile_as(scope text, key text) RETURNS boolean LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN
    INSERT INTO evil.calls (fn, by_role) VALUES ('reconcile_as', current_user);
    RETURN NULL;
END$$;
CREATE FUNCTION evil.configure_on_analyze(i int) RETURNS int LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog AS $$
BEGIN
    PERFORM public.idem_configure('escalate', lease => '1 us',
                                  reconcile_function => 'evil.reconcile_as(text, text)');
    RETURN i;
END$$;
CREATE TABLE evil.bait (i int);
INSERT INTO evil.bait VALUES (1);
CREATE INDEX ON evil.bait (evil.configure_on_analyze(i));
});
owner_sql('ANALYZE evil.bait');
sql_as('hostile', q{SELECT public.idem_begin('escalate', 'e1');});
owner_sql(q{SELECT pg_sleep(0.01); SELECT * FROM idem_reconcile('escalate');});
{
	is(owner_sql(q{SELECT configured_by FROM idem_scopes WHERE scope = 'escalate'}),
		'hostile', 'a scope configured by hostile\'s code is configured_by hostile');
	is(owner_sql(q{SELECT string_agg(by_role, ',') FROM evil.calls WHERE fn = 'reconcile_as'}),
		'hostile', 'its reconciliation function runs as hostile, never as the superuser');
}

# ---------------------------------------------------------------------------
note 'fixed bug: a long stored error crashed idem_begin (freed SPI memory)';

# idem_begin copied the stored last_error into SPI's memory, which
# SPI_finish freed before the answer was built from it: a long message came
# back as garbage, or the backend read unmapped memory.
my $offset = -s $node->logfile;
my @long_error = session('consumer',
	q{SELECT token FROM idem_begin('dos', 'k', lease => '1 hour') \gset},
	q{SELECT idem_fail('dos', 'k', :'token', repeat('e', 2000000), false);},
	q{SELECT status, length(last_error) FROM idem_begin('dos', 'k');},
	q{SELECT status, length(last_error) FROM idem_begin('dos', 'k');});
$node->poll_query_until('postgres', 'SELECT 1', '1');
{
	is(join(' ', map { "$_->[1]:$_->[0]" } @long_error[ 2, 3 ]),
		'00000:dead|2000000 00000:dead|2000000',
		'idem_begin hands back the stored 2 MB error, twice');
	ok(!$node->log_contains(qr/terminated by signal/, $offset),
		'the server survives (no backend terminated by a signal)');
}

# ---------------------------------------------------------------------------
note 'fixed bug: a column named like a signature tag crashed idem_versioned_update';

# idem_versioned_update keyed its statement cache on a signature that joined
# the key's and the changes' column names with the tag "changes:<oid>": a
# column of that name moved between the two lists without changing the
# signature, and the second call read column descriptions that were never
# built. The signature now carries each list's length.
$offset = -s $node->logfile;
my @crash = session('stranger',
	q{CREATE TEMP TABLE t (id int PRIMARY KEY, version int NOT NULL DEFAULT 1);},
	q{SELECT format('ALTER TABLE t ADD COLUMN %I int', 'changes:' || 't'::regclass::oid) \gexec},
	q{INSERT INTO t VALUES (1, 1);},
	q{SELECT idem_versioned_update('t', jsonb_build_object('id', 1, 'changes:' || 't'::regclass::oid, 1), 1, '{}');},
	q{SELECT idem_versioned_update('t', '{"id": 1}', 1, jsonb_build_object('changes:' || 't'::regclass::oid, 2));});
$node->poll_query_until('postgres', 'SELECT 1', '1');
{
	ok(!$node->log_contains(qr/terminated by signal/, $offset),
		'the server survives (no backend terminated by a signal)');
	is($crash[4][1], '00000', 'the second call runs its own statement');
}

$node->stop;
done_testing();
