#!/usr/bin/env bash
# Builds the Debian packages of Allot with dpkg-deb from a staging
# directory (docs/operations.md, "Install"):
#
#   packaging/deb/build.sh BINARY [OUT_DIR]
#
#   allot_<version>_<arch>.deb         the binary, stripped; the systemd
#                                      unit; /etc/allot (conffiles); shell
#                                      completions; man pages; the Grafana
#                                      dashboard and Prometheus rules
#   allot-dbgsym_<version>_<arch>.deb  its debug info, found by gdb through
#                                      the build id or the debug link
#
# BINARY: an `allot` built for the target, e.g. target/release/allot
# (`cargo build --release -p allot`); CI packages its debug build. OUT_DIR:
# where the .deb files go (default: the current directory). Needs dpkg-deb
# and objcopy (binutils); writes nothing but OUT_DIR and a temp dir.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
die() { echo "build.sh: $*" >&2; exit 1; }

[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: build.sh BINARY [OUT_DIR]"
bin=$1
out=${2:-.}
[ -f "$bin" ] && [ -x "$bin" ] || die "$bin: not an executable file"
for tool in dpkg-deb objcopy readelf gzip; do
  command -v "$tool" >/dev/null || die "$tool is not installed (dpkg-deb: dpkg; objcopy, readelf: binutils)"
done
readelf -h "$bin" >/dev/null 2>&1 || die "$bin: not an ELF binary"
mkdir -p "$out"
out=$(cd "$out" && pwd)

version=$("$bin" --version | awk '{print $2}')
[[ $version =~ ^[0-9][0-9A-Za-z.+~-]*$ ]] || die "$bin --version printed no version: $("$bin" --version)"
arch=$(dpkg --print-architecture)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pkg=$stage/allot
dbg=$stage/allot-dbgsym

# The binary, stripped, and its debug info apart (linked both ways).
install -d "$pkg/usr/bin"
build_id=$(readelf -n "$bin" | awk '/Build ID:/ {print $3}')
if [ -n "$build_id" ]; then
  debug_file=usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug
else
  debug_file=usr/lib/debug/usr/bin/allot.debug
fi
install -d "$dbg/$(dirname "$debug_file")"
objcopy --only-keep-debug --compress-debug-sections "$bin" "$dbg/$debug_file"
chmod 0644 "$dbg/$debug_file"
objcopy --strip-debug --strip-unneeded --add-gnu-debuglink="$dbg/$debug_file" "$bin" "$pkg/usr/bin/allot"
chmod 0755 "$pkg/usr/bin/allot"

# systemd, configuration (conffiles), secrets file (root's only).
install -D -m 0644 "$here/allot.service" "$pkg/lib/systemd/system/allot.service"
install -D -m 0644 "$here/allot.toml" "$pkg/etc/allot/allot.toml"
install -D -m 0600 "$here/allot.env" "$pkg/etc/allot/allot.env"
install -D -m 0644 "$here/allot.default" "$pkg/etc/default/allot"

# Completions and man pages, made by the binary itself.
install -d "$pkg/usr/share/bash-completion/completions" "$pkg/usr/share/zsh/vendor-completions" \
  "$pkg/usr/share/fish/vendor_completions.d" "$pkg/usr/share/man/man1"
"$pkg/usr/bin/allot" completions bash >"$pkg/usr/share/bash-completion/completions/allot"
"$pkg/usr/bin/allot" completions zsh >"$pkg/usr/share/zsh/vendor-completions/_allot"
"$pkg/usr/bin/allot" completions fish >"$pkg/usr/share/fish/vendor_completions.d/allot.fish"
"$pkg/usr/bin/allot" man --dir "$pkg/usr/share/man/man1"
gzip -9n "$pkg"/usr/share/man/man1/*.1

# Documentation, the dashboard and the alert rules.
doc=$pkg/usr/share/doc/allot
install -D -m 0644 "$root/README.md" "$doc/README.md"
install -D -m 0644 "$root/docs/operations.md" "$doc/operations.md"
install -D -m 0644 "$here/local-executor.conf" "$doc/examples/local-executor.conf"
install -D -m 0644 "$root/deploy/grafana/allot.json" "$pkg/usr/share/allot/grafana/allot.json"
install -D -m 0644 "$root/deploy/prometheus/allot-rules.yml" "$pkg/usr/share/allot/prometheus/allot-rules.yml"
license=$(awk -F'"' '/^license *=/ {print $2; exit}' "$root/Cargo.toml")
printf 'Allot\nLicense: %s\n' "${license:-see the source repository}" >"$doc/copyright"
install -D -m 0644 "$doc/copyright" "$dbg/usr/share/doc/allot-dbgsym/copyright"

# Control files.
install -d -m 0755 "$pkg/DEBIAN" "$dbg/DEBIAN"
for s in postinst prerm postrm; do install -m 0755 "$here/$s" "$pkg/DEBIAN/$s"; done
printf '/etc/allot/allot.toml\n/etc/allot/allot.env\n/etc/default/allot\n' >"$pkg/DEBIAN/conffiles"
size() { du -sk --exclude=DEBIAN "$1" | cut -f1; }
cat >"$pkg/DEBIAN/control" <<EOF
Package: allot
Version: $version
Architecture: $arch
Maintainer: Allot maintainers <allot@localhost>
Installed-Size: $(size "$pkg")
Depends: libc6, adduser
Recommends: systemd
Suggests: prometheus, sqlite3, postgresql-client
Section: admin
Priority: optional
Description: GPU-cluster scheduler with GPU-time budgets and fair share
 Allot schedules shared GPU clusters by GPU-time budgets, hierarchical fair
 share and a time-slicing contract. This package has the allot command
 (simulator, live scheduler and client), its systemd unit, a Grafana
 dashboard and Prometheus alert rules.
EOF
cat >"$dbg/DEBIAN/control" <<EOF
Package: allot-dbgsym
Version: $version
Architecture: $arch
Maintainer: Allot maintainers <allot@localhost>
Installed-Size: $(size "$dbg")
Depends: allot (= $version)
Section: debug
Priority: optional
Description: debug symbols for allot
 The debug information split from /usr/bin/allot.
EOF
[ -n "$build_id" ] && echo "Build-Ids: $build_id" >>"$dbg/DEBIAN/control"

dpkg-deb --root-owner-group -Zxz -z"${ALLOT_DEB_XZ_LEVEL:-6}" --build "$pkg" "$out/allot_${version}_${arch}.deb" >/dev/null
dpkg-deb --root-owner-group -Zxz -z"${ALLOT_DEB_XZ_LEVEL:-6}" --build "$dbg" "$out/allot-dbgsym_${version}_${arch}.deb" >/dev/null
echo "$out/allot_${version}_${arch}.deb"
echo "$out/allot-dbgsym_${version}_${arch}.deb"
