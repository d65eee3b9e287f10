#!/usr/bin/env bash
# Runs every test of the workspace. Installs what the tests need when it is missing (Debian
# packages), then `cargo test`; the end-to-end tests start their own private influxd on free
# loopback ports with temp data dirs and stop it afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/prometheus/build.sh >/dev/null # Prometheus for the OTLP tests (issue 28): built once per version, cached outside the repo
bash tests/thanos/build.sh >/dev/null # Thanos for tests/e2e/thanos_store (issue 29): built once per version, cached outside the repo

packages=()
command -v influxd >/dev/null 2>&1 || packages+=(influxdb)
command -v setpriv >/dev/null 2>&1 || packages+=(util-linux)
command -v losetup >/dev/null 2>&1 || packages+=(mount)
command -v mkfs.ext4 >/dev/null 2>&1 || packages+=(e2fsprogs)
# Drive-safety tests (agent/uflip/tests/loopdev.rs, issue 16): a partition table (sfdisk), a
# LUKS header (cryptsetup), signatures and partitions (blkid, partx, findmnt: util-linux), and a
# loop device over a FUSE file whose daemon is paused to stall IO (bindfs on fuse3).
command -v sfdisk >/dev/null 2>&1 || packages+=(fdisk)
command -v cryptsetup >/dev/null 2>&1 || packages+=(cryptsetup-bin)
{ command -v blkid && command -v partx && command -v findmnt; } >/dev/null 2>&1 || packages+=(util-linux)
command -v bindfs >/dev/null 2>&1 || packages+=(bindfs)
command -v fusermount3 >/dev/null 2>&1 || packages+=(fuse3)
# The browser test renders the HTML reports in headless Chromium.
command -v chromium >/dev/null 2>&1 || packages+=(chromium)
# The fleet test (tests/e2e/fleet.rs) boots QEMU guests built from this machine's own kernel,
# busybox, nvme-cli and smartctl; WATTFLIP_SKIP_FLEET=1 leaves it out (counted as ignored) and
# skips these installs.
if [ "${WATTFLIP_SKIP_FLEET:-}" != 1 ]; then
  command -v qemu-system-x86_64 >/dev/null 2>&1 || packages+=(qemu-system-x86)
  compgen -G '/boot/vmlinuz-*' >/dev/null && compgen -G '/lib/modules/*/kernel' >/dev/null || packages+=(linux-image-amd64)
  # Only a static busybox runs in the guest without libraries.
  { [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; } || packages+=(busybox-static)
  command -v nvme >/dev/null 2>&1 || [ -x /usr/sbin/nvme ] || packages+=(nvme-cli)
  command -v smartctl >/dev/null 2>&1 || [ -x /usr/sbin/smartctl ] || packages+=(smartmontools)
fi
if ((${#packages[@]})); then
  echo "tests/run.sh: installing ${packages[*]}"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  # The package's own service is not wanted: the tests start private servers.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi

# Outside builds first, so a missing tool fails before the long cargo build (each prints its
# binary's path; the test scripts below call them again and get the cached result).
bash tests/dashboards-check/build.sh >/dev/null
bash tests/package/build.sh >/dev/null

# A one-off build gains nothing from incremental caches (they double the target dir); say how
# much disk there is, because a full disk shows up much later as an obscure linker error.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi
mkdir -p target
free_kib=$(df -Pk target | awk 'NR == 2 {print $4}')
echo "tests/run.sh: $((free_kib / 1024 / 1024)) GiB free for $(pwd)/target (a clean run needs about 4 GiB)"
if [ "$free_kib" -lt $((3 * 1024 * 1024)) ]; then
  echo "tests/run.sh: warning: less than 3 GiB free; the build may fail with 'No space left on device'" >&2
fi

# Lint gates first: formatting, then clippy on every target with warnings as errors (the workspace
# denies unwrap()/expect() outside tests: Cargo.toml [workspace.lints.clippy], clippy.toml).
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings

cargo build --workspace --bins --locked
cargo test --workspace --locked "$@" 2>&1 | tee target/test-output.log
# The fleet test is #[ignore]d in a plain `cargo test` (three QEMU guests, minutes); it runs here,
# as its own binary after the timing-sensitive e2e tests, unless WATTFLIP_SKIP_FLEET=1.
fleet_ran=0
if [ "${WATTFLIP_SKIP_FLEET:-}" != 1 ]; then
  cargo test -p wattflip-e2e --test fleet --locked -- --ignored 2>&1 | tee -a target/test-output.log
  fleet_ran=1
fi

# Every fuzz target for a fixed number of executions from its checked-in corpus (cargo-fuzz is
# installed by the script when missing; WF_FUZZ_RUNS sets the count, 0 skips). Figures: docs/fuzzing.md.
fuzz_targets=0
if [ "${WF_FUZZ_RUNS:-20000}" != 0 ]; then
  bash tests/fuzz/run.sh "${WF_FUZZ_RUNS:-20000}" | tee target/fuzz-output.log
  fuzz_targets=$(($(wc -l < target/fuzz-output.log) - 1))
fi

# The Ansible deployment, really run over SSH against namespace hosts on this machine (root).
bash tests/ansible/run.sh
# Every dashboard strict-parsed by Grafana's schema types, every InfluxQL query by InfluxDB's parser.
bash tests/dashboards-check/run.sh
# The Debian packages (glibc 2.28) installed, upgraded with an NVMe guard state file, and purged in Debian 11.
bash tests/package/run.sh

# One closing line for everything: the cargo tests (set -e and pipefail stopped us on a failure)
# plus the fuzz targets, the Ansible real run, the dashboards check and the package test; ignored tests (each with its reason in
# target/test-output.log) are counted, never hidden among the passed ones.
passed=$(grep -E '^test result:' target/test-output.log | awk -v extra=$((fuzz_targets + 3)) '{s += $4} END {print s + extra}')
ignored=$(grep -E '^test result:' target/test-output.log | awk -v ran=$fleet_ran '{s += $8} END {print s - ran}')
# The plain closing line CI reads: "N passed, N failed" with ", N skipped" (ignored tests) after it.
echo "tests: ${passed} passed, 0 failed, ${ignored} skipped"
