# Shared by scripts/demo, scripts/test and bench/: packages, build, and a
# throwaway PostgreSQL 15 cluster owned by an unprivileged user.
# Source it; it defines functions and sets nothing else.

# PG_IDEM_PG_BIN: another PostgreSQL 15 installation (a copy made with
# `make install DESTDIR=...`, as test/tap/run takes it), for a run that must
# not replace the machine's installed pg_idem.
PG_BIN=${PG_IDEM_PG_BIN:-/usr/lib/postgresql/15/bin}
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

# Installs the Debian packages named, plus what every script needs.
install_packages() {
	local wanted="postgresql-15 postgresql-server-dev-15 build-essential clang-14 llvm-14 \
		libgtest-dev libipc-run-perl rsync $*"
	local missing=""
	for p in $wanted; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	log "installing:$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

build_and_install() {
	log "building and installing pg_idem"
	make -s PG_CONFIG=$PG_CONFIG
	make -s PG_CONFIG=$PG_CONFIG install
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
