#!/usr/bin/env bash
# Make sure the programs the tests drive are installed: pgbouncer (the
# scale-out tests start it in front of the test Postgres), the shells and
# the bash-completion package (the completion tests press TAB in them),
# and dpkg (the package test inspects, installs and purges the .deb). Installs the missing
# Debian packages when possible (root with apt-get); otherwise fails
# loudly. It never lets the tests skip.
set -euo pipefail

log() { echo "test-packages.sh: $*" >&2; }

# have PACKAGE: is what the tests need of it on this machine?
have() {
	case "$1" in
	pgbouncer) command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || [ -x /usr/local/sbin/pgbouncer ] ;;
	bash-completion) [ -f /usr/share/bash-completion/bash_completion ] ;;
	dpkg) command -v dpkg-deb >/dev/null 2>&1 && command -v dpkg-query >/dev/null 2>&1 ;;
	*) command -v "$1" >/dev/null 2>&1 ;;
	esac
}

missing=()
for p in pgbouncer bash-completion zsh fish dpkg; do
	have "$p" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
	log "installing the Debian packages the tests need: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
		apt-get update >&2 && apt-get install -y --no-install-recommends "${missing[@]}" >&2
	fi
	# pgbouncer's package starts a system service on port 6432; the tests
	# start their own on a free port and need none.
	if command -v systemctl >/dev/null 2>&1; then systemctl disable --now pgbouncer >/dev/null 2>&1 || true; fi
	if command -v service >/dev/null 2>&1; then service pgbouncer stop >/dev/null 2>&1 || true; fi
	still=()
	for p in "${missing[@]}"; do have "$p" || still+=("$p"); done
	if [ ${#still[@]} -eq 0 ]; then exit 0; fi
	missing=("${still[@]}")
fi
log "tilectl's tests need these Debian packages and they are not installed: apt-get install ${missing[*]} (as root)"
exit 1
