#!/usr/bin/env bash
# Find or start a PostgreSQL server for tilectl's tests and demo.
#
#   eval "$(scripts/pg.sh)"        # prints ONE line: export TILECTL_TEST_DATABASE_URL=... TILECTL_PG_THROWAWAY=...
#   scripts/pg.sh stop "$TILECTL_PG_THROWAWAY"   # stops and deletes a throwaway cluster ("" does nothing)
#   scripts/pg.sh drop-templates "$TILECTL_TEST_DATABASE_URL"   # drops the tests' template databases
#
# Order: $TILECTL_TEST_DATABASE_URL, then $TILECTL_DATABASE_URL, then a server
# answering on 127.0.0.1:5432, then a throwaway cluster (initdb + pg_ctl on a
# free port, trust auth, under a temp dir; as an unprivileged user when run as
# root). PG_FORCE_THROWAWAY=1 skips straight to the throwaway cluster.
# Diagnostics go to stderr; stdout is only the export line.
set -euo pipefail

log() { echo "pg.sh: $*" >&2; }

PG_USER_NAME=tilectl-pg

find_bin() {
	local name=$1 d
	if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
	for d in /usr/local/bin /usr/local/pgsql/bin $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
		if [ -x "$d/$name" ]; then echo "$d/$name"; return 0; fi
	done
	return 1
}

# as_pg runs a command as the cluster's owner: ourselves, or tilectl-pg when
# we are root (initdb refuses to run as root).
as_pg() {
	if [ "$(id -u)" -ne 0 ]; then "$@"; return; fi
	if command -v runuser >/dev/null 2>&1; then
		runuser -u "$PG_USER_NAME" -- "$@"
	else
		su -s /bin/sh "$PG_USER_NAME" -c "$(printf '%q ' "$@")"
	fi
}

stop_cluster() {
	local dir=${1:-}
	[ -n "$dir" ] || return 0
	if [ ! -f "$dir/.tilectl-throwaway" ]; then
		log "refusing to delete $dir: not a throwaway cluster made by pg.sh"
		return 1
	fi
	local pg_ctl
	pg_ctl=$(find_bin pg_ctl) || true
	if [ -n "$pg_ctl" ] && [ -f "$dir/data/postmaster.pid" ]; then
		as_pg "$pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || log "pg_ctl stop failed; deleting anyway"
	fi
	rm -rf "$dir"
	log "stopped and deleted throwaway cluster $dir"
}

free_port() {
	local p
	for p in 55432 55433 55434 55435 55436 55437 55438 55439; do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
	done
	return 1
}

start_throwaway() {
	local initdb pg_ctl port dir
	initdb=$(find_bin initdb) && pg_ctl=$(find_bin pg_ctl) || return 1
	port=$(free_port) || { log "no free port in 55432-55439"; return 1; }
	if [ "$(id -u)" -eq 0 ] && ! id "$PG_USER_NAME" >/dev/null 2>&1; then
		useradd --system --no-create-home --shell /usr/sbin/nologin "$PG_USER_NAME" >&2 ||
			{ log "could not create user $PG_USER_NAME"; return 1; }
	fi
	dir=$(mktemp -d "${TMPDIR:-/tmp}/tilectl-pg.XXXXXX")
	touch "$dir/.tilectl-throwaway"
	if [ "$(id -u)" -eq 0 ]; then chown -R "$PG_USER_NAME" "$dir"; fi
	if ! as_pg "$initdb" -D "$dir/data" -U postgres --auth=trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1; then
		log "initdb failed:"; cat "$dir/initdb.log" >&2; rm -rf "$dir"; return 1
	fi
	if ! as_pg "$pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
		-o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >&2; then
		log "pg_ctl start failed:"; cat "$dir/server.log" >&2; rm -rf "$dir"; return 1
	fi
	log "started throwaway cluster in $dir on port $port"
	echo "export TILECTL_TEST_DATABASE_URL='postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable' TILECTL_PG_THROWAWAY='$dir'"
}

# drop_templates drops the migrated template databases internal/pgtest
# keeps while tests run (tilectl_tmpl_<schema hash>), so `make test` leaves
# no database behind on a server it did not start. Each test's own
# database is dropped by the test itself.
drop_templates() {
	local url=${1:-} psql dbs db
	# PG_TEMPLATE_PATTERN (a LIKE pattern) lets a test drop only its own.
	local pattern='tilectl\_tmpl\_%'
	if [ -n "${PG_TEMPLATE_PATTERN:-}" ]; then pattern=$PG_TEMPLATE_PATTERN; fi
	[ -n "$url" ] || return 0
	if ! psql=$(find_bin psql); then
		log "psql not found: cannot drop the test template databases on $url"
		return 0
	fi
	dbs=$("$psql" -X -A -t -d "$url" -c "SELECT datname FROM pg_database WHERE datname LIKE '$pattern'") ||
		{ log "could not list the test template databases"; return 0; }
	for db in $dbs; do
		"$psql" -X -q -d "$url" -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null ||
			log "could not drop test template database $db"
	done
}

main() {
	if [ "${1:-}" = stop ]; then
		stop_cluster "${2:-}"
		return
	fi
	if [ "${1:-}" = drop-templates ]; then
		drop_templates "${2:-}"
		return
	fi
	if [ "${PG_FORCE_THROWAWAY:-}" != 1 ]; then
		local url=${TILECTL_TEST_DATABASE_URL:-${TILECTL_DATABASE_URL:-}}
		if [ -n "$url" ]; then
			echo "export TILECTL_TEST_DATABASE_URL='$url' TILECTL_PG_THROWAWAY=''"
			return
		fi
		local isready
		if isready=$(find_bin pg_isready) && "$isready" -q -h 127.0.0.1 -p 5432 -t 3; then
			echo "export TILECTL_TEST_DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' TILECTL_PG_THROWAWAY=''"
			return
		fi
	fi
	if start_throwaway; then
		return
	fi
	# One line, on stderr (stdout is eval'd). Non-zero everywhere, CI=true
	# included: tests that need Postgres fail, they never skip.
	echo "tilectl needs PostgreSQL: apt-get install postgresql (or set TILECTL_TEST_DATABASE_URL)" >&2
	exit 1
}

main "$@"
