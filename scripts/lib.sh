# Shared by scripts/demo, scripts/test, test/ and bench/: the PostgreSQL
# under test, packages, build, and a throwaway cluster owned by an
# unprivileged user. Source it; it defines functions and the variables
# below, and nothing else.
#
# The PostgreSQL under test is chosen here, and only here:
#   PG_IDEM_PG_VERSION  its major: 15 (the default), 17 or 18
#   PG_IDEM_PG_BIN      its bin directory. Default: where scripts/servers puts
#                       that version (17: inside the Debian 13 chroot, where
#                       its tests run). Another installation, e.g. a copy
#                       made with `make install DESTDIR=...`, for a run that
#                       must not replace the machine's installed pg_idem; its
#                       major then defaults to what its pg_config says.
# Everything else (PGXS, pg_regress, the Perl test modules, the library and
# share directories) is asked of that server's pg_config, which PostgreSQL
# answers relative to where its binaries are.
#
# Sets PG_VERSION, PG_BIN, PG_CONFIG and RUN_AS.

_pg_idem_scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -n "${PG_IDEM_PG_BIN:-}" ]; then
	PG_BIN=$PG_IDEM_PG_BIN
	PG_VERSION=${PG_IDEM_PG_VERSION:-$({ "$PG_BIN/pg_config" --version 2>/dev/null || true; } |
		sed -E 's/^PostgreSQL ([0-9]+).*/\1/')}
	PG_VERSION=${PG_VERSION:-15}
else
	PG_VERSION=${PG_IDEM_PG_VERSION:-15}
	PG_BIN=$("$_pg_idem_scripts/servers" pg_bin "$PG_VERSION")
fi
PG_CONFIG=$PG_BIN/pg_config
# initdb and pg_regress refuse root, so servers and tests run as this user.
RUN_AS=${PG_IDEM_RUN_AS:-postgres}

log() { printf '\n==> %s\n' "$*"; }

as_runner() {
	if [ "$(id -un)" = "$RUN_AS" ]; then
		"$@"
	else
		runuser -u "$RUN_AS" -- "$@"
	fi
}

# Installs the Debian packages named (the same names on Debian 12 and 13),
# plus what every script needs on this platform for this PostgreSQL: the
# one list of package names that depends on the platform and the version.
install_packages() {
	local codename wanted
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	case $codename in
	# clang: the JIT bitcode of Debian's 15 (its PGXS wants clang-14 and
	# llvm-14) and the reliability suite's libFuzzer target (libclang-rt).
	# clang-format-14: make lintcheck, the format the tree is kept in.
	bookworm) wanted="build-essential clang-14 llvm-14 libclang-rt-14-dev clang-format-14" ;;
	# The Debian 13 chroot (scripts/servers 17): clang-19 and llvm-19 for
	# its PGXS's JIT bitcode (pg_make leaves the bitcode out without them)
	# and libFuzzer.
	trixie) wanted="g++ make clang-19 llvm-19 libclang-rt-19-dev" ;;
	*)
		echo "install_packages: Debian 12 (bookworm) or 13 (trixie) expected, not '$codename'" >&2
		return 1
		;;
	esac
	# The server from Debian's packages where Debian has it for this
	# platform, with pg_cron (preloaded with pg_idem in scripts/test_suite);
	# 18 on Debian 12 is built by scripts/servers.
	case $codename/$PG_VERSION in
	bookworm/15 | trixie/17)
		wanted="$wanted postgresql-$PG_VERSION postgresql-server-dev-$PG_VERSION postgresql-$PG_VERSION-cron"
		;;
	esac
	wanted="$wanted libgtest-dev libipc-run-perl rsync $*"
	local missing="" p
	for p in $wanted; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	log "installing:$missing"
	export DEBIAN_FRONTEND=noninteractive
	# One apt at a time: scripts/test obtains servers (scripts/servers,
	# which installs too) while a suite runs.
	(
		flock -w 1800 9
		apt-get -o DPkg::Lock::Timeout=600 update -qq
		# shellcheck disable=SC2086
		apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing >/dev/null
	) 9>/tmp/pg_idem-apt.lock
}

# The packages the whole suite needs beyond install_packages' own (each
# part also asks for its own, for when it runs alone), so that
# scripts/test_suite --prepare installs them all at once, before the tests.
# PgBouncer is left to test/pgbouncer/run, which keeps its service off.
suite_packages() {
	local p="python3-psycopg python3-pika libpq-dev rabbitmq-server"
	command -v node >/dev/null || p="$p nodejs"
	command -v npm >/dev/null || p="$p npm"
	echo "$p"
}

# The directory holding PGXS's makefiles and PostgreSQL's test tools
# (src/test/regress/pg_regress, src/test/isolation, src/test/perl).
pgxs_dir() {
	local mk
	mk=$("$PG_CONFIG" --pgxs)
	echo "${mk%/src/makefiles/pgxs.mk}"
}

# make, for the PostgreSQL under test. A PGXS configured --with-llvm builds
# JIT bitcode with its clang and LLVM's tools (Debian 13's: clang-19,
# llvm-19); where they are not installed, the bitcode is left out
# (with_llvm=no), as it does not change what the tests run.
pg_make() {
	local global with_llvm=() clang binpath
	global=$(pgxs_dir)/src/Makefile.global
	if grep -Eq '^with_llvm[[:space:]]*=[[:space:]]*yes' "$global"; then
		clang=$(sed -nE 's/^CLANG[[:space:]]*=[[:space:]]*//p' "$global")
		binpath=$(sed -nE 's/^LLVM_BINPATH[[:space:]]*=[[:space:]]*//p' "$global")
		if ! command -v "$clang" >/dev/null || [ ! -x "$binpath/llvm-lto" ]; then
			with_llvm=(with_llvm=no)
		fi
	fi
	make PG_CONFIG="$PG_CONFIG" "${with_llvm[@]}" "$@"
}

build_and_install() {
	log "building and installing pg_idem for $("$PG_CONFIG" --version) ($PG_BIN)"
	pg_make -s && pg_make -s install
}

# copy_tree DEST: the source tree without .git and build products, for a
# build or a test run of its own (each PostgreSQL's objects in their tree).
copy_tree() {
	mkdir -p "$1"
	rsync -a --delete --exclude .git --exclude node_modules --exclude '*.o' --exclude '*.bc' \
		--exclude '*.so' --exclude '*.d' --exclude /.pg_config --exclude '/pg_idem--*.sql' --exclude results/ \
		--exclude output_iso/ --exclude tmp_check/ --exclude 'regression.*' \
		--exclude test/unit/run_unit_tests --exclude __pycache__ \
		"$_pg_idem_scripts/../" "$1/"
}

# True if pg_cron is installed in the PostgreSQL under test.
have_pg_cron() {
	[ -f "$("$PG_CONFIG" --sharedir)/extension/pg_cron.control" ]
}

# start_cluster DIR PORT [postgresql.conf lines...]
# Creates a cluster in DIR (owned by $RUN_AS) listening only on a Unix
# socket in DIR, and starts it.
start_cluster() {
	local dir=$1 port=$2
	shift 2
	mkdir -p "$dir"
	chown "$RUN_AS" "$dir"
	as_runner $PG_BIN/initdb -D "$dir/data" -U postgres -A trust --no-sync >/dev/null
	{
		echo "listen_addresses = ''"
		echo "port = $port"
		echo "unix_socket_directories = '$dir'"
		echo "fsync = off"
		for line in "$@"; do echo "$line"; done
	} >>"$dir/data/postgresql.conf"
	as_runner $PG_BIN/pg_ctl -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
}

stop_cluster() {
	local dir=$1
	[ -f "$dir/data/postmaster.pid" ] &&
		as_runner $PG_BIN/pg_ctl -D "$dir/data" -m fast -w stop >/dev/null
	return 0
}
