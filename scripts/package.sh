#!/usr/bin/env bash
# make package: build dist/tilectl_<version>_<arch>.deb with nfpm (a Go
# packager, pinned in tools/go.mod, so building needs neither dpkg nor
# root): /usr/bin/tilectl, a man page per command, completions for bash,
# zsh and fish where each shell looks for them, the systemd service and
# timer of packaging/systemd (the README shows them as they are) and the
# example /etc/tilectl/config.yaml. packaging/nfpm.yaml lists the contents.
# The package creates the tilectl user; it enables no unit.
#
#   VERSION   version to stamp (default: git describe); a leading v is
#             dropped and anything that is not a Debian version made one
#   COMMIT    commit to stamp (default: git rev-parse --short HEAD)
#   GOARCH    target architecture (default: this machine's)
#   DIST      output directory (default: dist)
#   TILECTL_BIN  package this tilectl binary instead of building one (the
#             tests pass the one they built; its architecture must be GOARCH's)
#
# It prints the path of the .deb on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || true)}
DIST=${DIST:-dist}
goarch=${GOARCH:-$($GO env GOARCH)}
hostarch=$($GO env GOHOSTARCH)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

case $goarch in
amd64 | arm64 | riscv64 | ppc64le | s390x) debarch=$goarch ;;
386) debarch=i386 ;;
arm) debarch=armhf ;;
*) echo "package: no Debian architecture for GOARCH=$goarch" >&2; exit 2 ;;
esac

# A Debian upstream version starts with a digit and has no '-' (that would
# start a revision): v1.4.0-3-gabc1234 -> 1.4.0+3.gabc1234, abc1234 -> 0.0.0+gitabc1234.
debversion=${VERSION#v}
if [[ ! $debversion =~ ^[0-9] ]]; then debversion=0.0.0+git$debversion; fi
if [[ $debversion == *-* ]]; then debversion=${debversion/-/+}; fi
debversion=${debversion//-/.}
debversion=${debversion//[^A-Za-z0-9.+~]/.}

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/man" "$stage/completions"

# Built static (CGO_ENABLED=0), so the package depends on no library.
if [ -n "${TILECTL_BIN:-}" ]; then
	install -m 0755 "$TILECTL_BIN" "$stage/tilectl"
else
	ldflags="-s -w -X main.version=$VERSION -X main.commit=$COMMIT"
	CGO_ENABLED=0 GOOS=linux GOARCH=$goarch $GO build -trimpath -ldflags "$ldflags" -o "$stage/tilectl" ./cmd/tilectl
fi
gen=$stage/tilectl # generates the completions
if [ "$goarch" != "$hostarch" ]; then
	gen=$stage/tilectl-host
	CGO_ENABLED=0 $GO build -o "$gen" ./cmd/tilectl
fi

$GO run ./cmd/mangen -version "$VERSION" "$stage/man.src" 2>/dev/null
for page in "$stage"/man.src/*.1; do
	gzip -9n <"$page" >"$stage/man/$(basename "$page").gz"
done
"$gen" completion bash >"$stage/completions/tilectl.bash"
"$gen" completion zsh >"$stage/completions/_tilectl"
"$gen" completion fish >"$stage/completions/tilectl.fish"
gzip -9n <README.md >"$stage/README.md.gz"

# Same inputs, same bytes: nfpm dates every file SOURCE_DATE_EPOCH.
mkdir -p "$DIST"
# nfpm expands variables in the package's fields but not in file paths.
sed "s|\${STAGE}|$stage|g" packaging/nfpm.yaml >"$stage/nfpm.yaml"
GOARCH=$goarch DEB_VERSION=$debversion \
	$GO tool -modfile=tools/go.mod nfpm package --config "$stage/nfpm.yaml" --packager deb --target "$DIST" >&2
deb=$DIST/tilectl_${debversion}_${debarch}.deb
if [ ! -f "$deb" ]; then
	echo "package: nfpm did not write $deb" >&2
	exit 1
fi
echo "$deb"
