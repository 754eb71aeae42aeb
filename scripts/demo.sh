#!/usr/bin/env bash
# make demo: tilectl's whole story on the checked-in tiles, step by step.
# Each step prints the command it runs.
#
#   migrate -> import a flight -> status -> start the reference provider with
#   faults on (dropped connections after storing, 429/503 with Retry-After,
#   HTML 502s, cut bodies, omitted results, transient rejections) and one
#   poison tile it always rejects -> upload-pending with retries -> status
#   lists the give-up -> fdr tail shows its flight-data record.
#
# Databases: tilectl_demo and tilectl_demo_provider, recreated on every run,
# on the server scripts/pg.sh finds, or on a throwaway cluster deleted when
# the demo ends. Files: demo-run/.
set -euo pipefail
cd "$(dirname "$0")/.."

bold='' plain=''
if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; fi
step() {
	printf '\n%s$ tilectl %s%s\n' "$bold" "$*" "$plain"
	bin/tilectl "$@"
}

eval "$(scripts/pg.sh)"
provider_pid=
cleanup() {
	[ -n "$provider_pid" ] && kill "$provider_pid" 2>/dev/null && wait "$provider_pid" 2>/dev/null
	scripts/pg.sh stop "${TILECTL_PG_THROWAWAY:-}"
}
trap cleanup EXIT
admin=$TILECTL_TEST_DATABASE_URL
base=${admin%%\?*}
dburl() { echo "${base%/*}/$1${admin#"$base"}"; }
echo "make demo DROPS and recreates the databases tilectl_demo and tilectl_demo_provider on ${base%/*} (no other database is touched); files go to demo-run/"
for db in tilectl_demo tilectl_demo_provider; do
	PGOPTIONS='-c client_min_messages=warning' psql "$admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >/dev/null
done
rm -rf demo-run && mkdir -p demo-run

export TILECTL_DATABASE_URL=$(dburl tilectl_demo)
export TILECTL_CACHE_DIR=$PWD/demo-run/cache
export TILECTL_FDR_PATH=$PWD/demo-run/fdr.ring
# A throwaway secret shared by the demo's client and provider; tilectl never
# prints it.
token=demo-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
export TILECTL_PROVIDER_TOKEN=$token TILEPROVIDER_TOKEN=$token
port=$(( 20000 + RANDOM % 20000 ))
export TILECTL_PROVIDER_URL=http://127.0.0.1:$port
poison=demo-1-3-0-1

step version
step migrate up
step migrate version
step tiles import --flight demo-1 testdata/tiles
step tiles import --flight demo-1 testdata/tiles   # again: nothing changes
step status

printf '\n%s$ tileprovider --fault-rate 0.3 --reject-tiles %s ... &%s\n' "$bold" "$poison" "$plain"
bin/tileprovider --listen "127.0.0.1:$port" --database-url "$(dburl tilectl_demo_provider)" \
	--storage-dir demo-run/provider --fault-rate 0.3 --fault-seed "${SEED:-42}" \
	--transient-reject-rate 0.1 --reject-tiles "$poison" --latency 20ms \
	2>demo-run/provider.log &
provider_pid=$!
for _ in $(seq 50); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
	sleep 0.1
done
echo "reference provider on $TILECTL_PROVIDER_URL (log: demo-run/provider.log)"

# Small batches so faults hit several of them; short backoffs so the demo
# is quick. The poison tile is rejected on every attempt and is given up.
set +e
step upload-pending --flight demo-1 --batch-size 8 --backoff-base 200ms --backoff-cap 2s \
	--max-in-call-retries 6 --metrics-file demo-run/metrics.prom
code=$?
set -e
echo "(exit code $code: 0 all uploaded, 3 partial: tiles given up or still pending)"
step status
step fdr tail --kind upload.giveup
echo
echo "the run's metrics are in demo-run/metrics.prom; faults the provider injected:"
if command -v curl >/dev/null; then
	curl -sf -H "Authorization: Bearer $token" "$TILECTL_PROVIDER_URL/metrics" |
		grep '^tileprovider_faults_injected_total' || echo "(none reported)"
fi
if [ "$code" -ne 0 ] && [ "$code" -ne 3 ]; then exit "$code"; fi
