#!/usr/bin/env bash
# The packaging tools, each installed once into a cache outside the repository keyed by version
# and guarded by flock (two callers wait for one install): cargo-zigbuild and ziglang from PyPI
# (links for an old glibc; musl targets are not obtainable here), cargo-deb 3.x from crates.io,
# and a Debian 11 (bullseye) root from debootstrap. Prints three lines on success:
#   zigbuild=<venv bin dir>  cargo_deb=<cargo-deb binary>  bullseye=<root dir>
# and says what failed and what to install otherwise.
set -euo pipefail
cache=${XDG_CACHE_HOME:-$HOME/.cache}/wattflip-tools
zig_pins=(cargo-zigbuild==0.24.1 ziglang==0.17.1)
cargo_deb_version=3.8.0
mirror=${WATTFLIP_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$cache"
die() {
  echo "tests/package/tools.sh: $*" >&2
  exit 1
}
locked() { # name command...: runs the command holding $cache/name.lock
  local name=$1
  shift
  (
    flock -w 1200 8 || die "waited 20 min for $cache/$name.lock"
    "$@"
  ) 8>"$cache/$name.lock"
}

venv=$cache/zigbuild-${zig_pins[0]#*==}-zig-${zig_pins[1]#*==}
install_zig() {
  [ -x "$venv/bin/cargo-zigbuild" ] && [ -x "$venv/bin/python-zig" ] && return 0
  rm -rf "$venv"
  python3 -m venv "$venv" || die "python3 -m venv failed: install python3-venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "${zig_pins[@]}" \
    || die "pip install ${zig_pins[*]} failed (PyPI must be reachable)"
}
locked zigbuild install_zig

cargo_deb=$cache/cargo-deb-$cargo_deb_version/bin/cargo-deb
# cargo-deb's dev profile (--debug) keeps its compressors at opt-level 2; without debuginfo it
# installs in half the CPU of its release build (99 s against 198 s) and writes byte-identical
# packages in the same time (docs/benchmarks.md, stop 50).
install_cargo_deb() {
  [ -x "$cargo_deb" ] && return 0
  CARGO_PROFILE_DEV_DEBUG=0 cargo install --quiet --locked --debug cargo-deb --version "$cargo_deb_version" --root "$cache/cargo-deb-$cargo_deb_version" \
    || die "cargo install cargo-deb $cargo_deb_version failed (crates.io must be reachable)"
}
locked cargo-deb install_cargo_deb

root=$cache/bullseye-root
install_root() {
  [ -f "$root/.wattflip-complete" ] && return 0
  command -v debootstrap >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
    || die "debootstrap is missing and apt-get install debootstrap failed"
  rm -rf "$root.tmp"
  debootstrap --variant=minbase bullseye "$root.tmp" "$mirror" >"$cache/bullseye-root.log" 2>&1 \
    || die "debootstrap bullseye failed (log: $cache/bullseye-root.log); is $mirror reachable?"
  touch "$root.tmp/.wattflip-complete"
  rm -rf "$root"
  mv "$root.tmp" "$root"
}
locked bullseye-root install_root

echo "zigbuild=$venv/bin"
echo "cargo_deb=$cargo_deb"
echo "bullseye=$root"
