#!/usr/bin/env bash
# make demo: tilectl's story on the checked-in tiles, step by step.
# Each step prints the command it runs. Extend it by adding steps at the end.
#
# Database: $TILECTL_DATABASE_URL if set; otherwise the database "tilectl" on
# the server scripts/pg.sh finds (created if missing), or on a throwaway
# cluster that is deleted when the demo ends. Cache: demo-run/cache.
set -euo pipefail
cd "$(dirname "$0")/.."

bold='' plain=''
if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; fi
step() {
	printf '\n%s$ tilectl %s%s\n' "$bold" "$*" "$plain"
	bin/tilectl "$@"
}

if [ -z "${TILECTL_DATABASE_URL:-}" ]; then
	eval "$(scripts/pg.sh)"
	trap 'scripts/pg.sh stop "$TILECTL_PG_THROWAWAY"' EXIT
	admin=$TILECTL_TEST_DATABASE_URL
	# Same server, database "tilectl".
	base=${admin%%\?*}
	export TILECTL_DATABASE_URL="${base%/*}/tilectl${admin#"$base"}"
	if ! psql "$admin" -tAc "SELECT 1 FROM pg_database WHERE datname = 'tilectl'" | grep -q 1; then
		echo "creating database tilectl"
		psql "$admin" -qc "CREATE DATABASE tilectl"
	fi
fi
export TILECTL_CACHE_DIR=${TILECTL_CACHE_DIR:-$PWD/demo-run/cache}
mkdir -p demo-run

step version
step migrate up
step migrate version
step tiles import --flight demo-1 testdata/tiles
step tiles import --flight demo-1 testdata/tiles   # again: nothing changes
step status
