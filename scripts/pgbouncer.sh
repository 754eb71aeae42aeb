#!/usr/bin/env bash
# Make sure the pgbouncer binary is installed: the scale-out tests start it
# (transaction pooling, free port, unprivileged user) in front of the test
# Postgres. Installs the Debian package when missing and possible (root with
# apt-get); otherwise fails loudly. It never lets the tests skip.
set -euo pipefail

log() { echo "pgbouncer.sh: $*" >&2; }

have() {
	command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || [ -x /usr/local/sbin/pgbouncer ]
}

if have; then exit 0; fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
	log "pgbouncer is missing: installing the Debian package"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y --no-install-recommends pgbouncer >&2; then
		apt-get update >&2 && apt-get install -y --no-install-recommends pgbouncer >&2
	fi
	# The package starts a system service on port 6432; the tests start
	# their own on a free port and need none.
	if command -v systemctl >/dev/null 2>&1; then systemctl disable --now pgbouncer >/dev/null 2>&1 || true; fi
	if command -v service >/dev/null 2>&1; then service pgbouncer stop >/dev/null 2>&1 || true; fi
	if have; then exit 0; fi
fi
log "tilectl's tests need pgbouncer and it is not installed: apt-get install pgbouncer (as root)"
exit 1
