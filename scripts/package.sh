#!/usr/bin/env bash
# make package: build dist/tilectl_<version>_<arch>.deb with dpkg-deb from a
# staged tree: /usr/bin/tilectl, a man page per command, completions for
# bash, zsh and fish where each shell looks for them, and the systemd
# service and timer of packaging/systemd (the README shows them as they
# are). The package creates the tilectl user; it enables no unit.
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

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
install -d "$root/DEBIAN" "$root/usr/bin" "$root/usr/share/man/man1" \
	"$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
	"$root/usr/share/fish/vendor_completions.d" "$root/usr/lib/systemd/system" \
	"$root/usr/lib/sysusers.d" "$root/usr/lib/tmpfiles.d" "$root/usr/share/doc/tilectl"

# Built static (CGO_ENABLED=0), so the package depends on no library.
if [ -n "${TILECTL_BIN:-}" ]; then
	install -m 0755 "$TILECTL_BIN" "$root/usr/bin/tilectl"
else
	ldflags="-s -w -X main.version=$VERSION -X main.commit=$COMMIT"
	CGO_ENABLED=0 GOOS=linux GOARCH=$goarch $GO build -trimpath -ldflags "$ldflags" -o "$root/usr/bin/tilectl" ./cmd/tilectl
fi
gen=$root/usr/bin/tilectl # generates the completions
if [ "$goarch" != "$hostarch" ]; then
	gen=$work/tilectl-host
	CGO_ENABLED=0 $GO build -o "$gen" ./cmd/tilectl
fi

$GO run ./cmd/mangen -version "$VERSION" "$work/man" 2>/dev/null
for page in "$work"/man/*.1; do
	gzip -9n <"$page" >"$root/usr/share/man/man1/$(basename "$page").gz"
done
"$gen" completion bash >"$root/usr/share/bash-completion/completions/tilectl"
"$gen" completion zsh >"$root/usr/share/zsh/vendor-completions/_tilectl"
"$gen" completion fish >"$root/usr/share/fish/vendor_completions.d/tilectl.fish"

install -m 0644 packaging/systemd/tilectl-upload.service packaging/systemd/tilectl-upload.timer "$root/usr/lib/systemd/system/"
install -m 0644 packaging/deb/sysusers.conf "$root/usr/lib/sysusers.d/tilectl.conf"
install -m 0644 packaging/deb/tmpfiles.conf "$root/usr/lib/tmpfiles.d/tilectl.conf"
install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$root/DEBIAN/"
gzip -9n <README.md >"$root/usr/share/doc/tilectl/README.md.gz"

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: tilectl
Version: $debversion
Architecture: $debarch
Maintainer: tilectl maintainers <tilectl@localhost>
Installed-Size: $size
Section: utils
Priority: optional
Recommends: bash-completion
Suggests: postgresql
Homepage: https://github.com/tilectl/tilectl
Description: upload drone map tiles to a satellite provider, exactly once
 tilectl imports a flight's map tiles into a local cache and uploads them to
 a satellite provider over an unreliable link, so that each tile arrives
 exactly once. It keeps its journal in PostgreSQL. The package ships the
 tilectl-upload service and timer (not enabled), man pages and shell
 completions.
CONTROL

# Same inputs, same bytes: files dated SOURCE_DATE_EPOCH, owned by root.
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
mkdir -p "$DIST"
deb=$DIST/tilectl_${debversion}_${debarch}.deb
dpkg-deb --root-owner-group -Zgzip --build "$root" "$deb" >/dev/null
echo "$deb"
