#!/usr/bin/env bash
# Builds the Debian packages of wattflip-agent and wattflip-collector for glibc 2.28, in two
# versions from the same binaries (a second build of the package to upgrade to):
#   1. the tools (tools.sh: cargo-zigbuild + ziglang, cargo-deb 3.x, the bullseye root);
#   2. one build, `cargo zigbuild --profile PROFILE --target x86_64-unknown-linux-gnu.2.28`, in
#      a target dir in the tool cache (outside the repository, so a fresh clone rebuilds only
#      what changed; flock: one build at a time), then `objdump -T`: fails if any symbol needs a
#      glibc above 2.28;
#   3. `cargo deb --profile PROFILE --no-build` (its `target/release/` asset paths then mean the
#      profile's folder) twice per package: <version>-1 and <version>-2.
# PROFILE (WATTFLIP_PACKAGE_PROFILE) is `package-test` by default: the tests check packaging,
# glibc and install/upgrade/purge, not the optimiser, so they skip the shipped profile's fat-LTO
# links (Cargo.toml, docs/benchmarks.md "Build profiles"); WATTFLIP_PACKAGE_PROFILE=dist builds
# the shipped packages (README "Install on a fleet").
# Last lines: `bindir=<the binaries' folder>`, `bullseye=<root>` and the folder holding v1/ and
# v2/ with the four .deb files.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
triple=x86_64-unknown-linux-gnu
glibc=2.28
profile=${WATTFLIP_PACKAGE_PROFILE:-package-test}
die() {
  echo "tests/package/build.sh: $*" >&2
  exit 1
}
tools=$(bash "$repo/tests/package/tools.sh") || die "the tools are missing (above)"
zigbin=$(sed -n 's/^zigbuild=//p' <<<"$tools")
cargo_deb=$(sed -n 's/^cargo_deb=//p' <<<"$tools")
bullseye=$(sed -n 's/^bullseye=//p' <<<"$tools")
command -v objdump >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq binutils >/dev/null \
  || die "objdump is missing: apt-get install binutils"

cache=${XDG_CACHE_HOME:-$HOME/.cache}/wattflip-tools
export CARGO_TARGET_DIR=$cache/package-target
out=${WATTFLIP_PACKAGE_OUT:-$repo/target/debian-packages}
mkdir -p "$CARGO_TARGET_DIR"
exec 9>"$CARGO_TARGET_DIR.lock"
flock -w 1800 9 || die "waited 30 min for $CARGO_TARGET_DIR.lock"
t0=$(date +%s)
(cd "$repo" && PATH=$zigbin:$PATH nice -n 5 cargo zigbuild --profile "$profile" --locked --quiet --target "$triple.$glibc" \
  -p wattflip-agent -p wattflip-collector) >&2 || die "cargo zigbuild failed (above)"
echo "build ($profile): $(($(date +%s) - t0))s" >&2
bindir=$CARGO_TARGET_DIR/$triple/$profile
for b in wattflip-agent wattflip-collector; do
  [ -x "$bindir/$b" ] || die "no $bindir/$b after the build"
  versions=$(objdump -T "$bindir/$b" | grep -oE 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV)
  above=$(awk -v max="$glibc" '{ split($0, a, "."); split(max, m, ".");
    if (a[1] > m[1] || (a[1] == m[1] && a[2] + 0 > m[2] + 0)) print "GLIBC_" $0 }' <<<"$versions")
  [ -z "$above" ] || die "$b needs $(echo "$above" | tr '\n' ' ')(above GLIBC_$glibc): objdump -T $bindir/$b"
  echo "$b: highest glibc symbol version GLIBC_$(tail -n 1 <<<"$versions") (<= $glibc)" >&2
done

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -n 1)
rm -rf "$out"
for v in 1 2; do
  mkdir -p "$out/v$v"
  for p in wattflip-agent wattflip-collector; do
    (cd "$repo" && "$cargo_deb" -p "$p" --profile "$profile" --no-build --fast --target "$triple" --deb-version "$version-$v" --output "$out/v$v/" >/dev/null) \
      || die "cargo deb -p $p --deb-version $version-$v failed"
  done
done
echo "bindir=$bindir"
echo "bullseye=$bullseye"
echo "$out"
