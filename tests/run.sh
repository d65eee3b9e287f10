#!/usr/bin/env bash
# Runs every test of the workspace. Installs what the tests need when it is missing (Debian
# packages), then `cargo test`; the end-to-end tests start their own private influxd on free
# loopback ports with temp data dirs and stop it afterwards.
#
# Each stage's wall time is printed at the end (also when a stage fails). On a fresh machine the
# slow stages are the tool builds and the package build; they run in the background where that
# pays: the three Go tools build while apt installs (CPU against network and disk), and the
# Debian package build (the test's package-test profile, no LTO, niced; tests/package/build.sh)
# while the format check and the workspace build (with clippy's lints) run. Nothing runs alongside `cargo test`: the e2e
# tests time 1 ms power sampling. The fuzz targets build into the tool cache, like the packages.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p target/run-logs

# Stage bookkeeping: "name|seconds|how" lines, printed by print_stage_times.
STAGES=()
current_stage=""
stage() { # stage NAME CMD...: runs CMD in the foreground and records its wall time
  local name=$1 t0=$SECONDS
  shift
  current_stage=$name
  "$@"
  STAGES+=("$name|$((SECONDS - t0))|")
  current_stage=""
}
declare -A BG_PID=()
bg_start() { # bg_start NAME CMD...: runs CMD in the background, output in target/run-logs/NAME.log
  local name=$1
  shift
  local log="target/run-logs/${name// /-}.log"
  (
    t0=$SECONDS
    rc=0
    "$@" >"$log" 2>&1 || rc=$?
    echo "$((SECONDS - t0)) $rc" >"$log.done"
    exit "$rc"
  ) &
  BG_PID[$name]=$!
}
bg_wait() { # bg_wait NAME: waits for a background stage; fails with its log when it failed
  local name=$1 log="target/run-logs/${1// /-}.log" secs rc
  current_stage="$name (waiting)"
  wait "${BG_PID[$name]}" || true
  read -r secs rc <"$log.done" || { secs=0 rc=1; }
  STAGES+=("$name|$secs|background")
  current_stage=""
  if [ "$rc" != 0 ]; then
    echo "tests/run.sh: $name failed (exit $rc); its output ($log):" >&2
    cat "$log" >&2
    exit "$rc"
  fi
}
print_stage_times() {
  local total=$((SECONDS - run_t0)) line name secs how
  echo "tests/run.sh: stage times (wall; background stages overlap the foreground ones):"
  for line in "${STAGES[@]}"; do
    IFS='|' read -r name secs how <<<"$line"
    printf '  %-28s %5ds  %3dm%02ds %s\n' "$name" "$secs" $((secs / 60)) $((secs % 60)) "${how:+($how)}"
  done
  [ -z "$current_stage" ] || printf '  %-28s failed\n' "$current_stage"
  printf '  %-28s %5ds  %3dm%02ds\n' "total" "$total" $((total / 60)) $((total % 60))
}
run_t0=$SECONDS
stage_times_printed=0
trap '[ "$stage_times_printed" = 1 ] || print_stage_times >&2' EXIT

# Prometheus (OTLP tests, issue 28), Thanos (tests/e2e/thanos_store, issue 29) and the dashboards
# checker: Go builds, once per version, cached outside the repo; they need no Debian package.
bg_start "Prometheus build" bash tests/prometheus/build.sh
bg_start "Thanos build" bash tests/thanos/build.sh
bg_start "dashboards-check build" bash tests/dashboards-check/build.sh

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
apt_install() {
  echo "tests/run.sh: installing ${packages[*]}"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  # The package's own service is not wanted: the tests start private servers.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
}
if ((${#packages[@]})); then stage "apt install" apt_install; else STAGES+=("apt install|0|nothing missing"); fi

# The tools must exist before the long cargo build (each script prints its binary's path; the
# test scripts below call them again and get the cached result).
bg_wait "Prometheus build"
bg_wait "Thanos build"
bg_wait "dashboards-check build"
# The package build's tools (tools.sh) may apt-get install too: it starts after the apt stage.
bg_start "package build" bash tests/package/build.sh

# A one-off build gains nothing from incremental caches (they double the target dir); say how
# much disk there is, because a full disk shows up much later as an obscure linker error.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi
mkdir -p target
free_kib=$(df -Pk target | awk 'NR == 2 {print $4}')
echo "tests/run.sh: $((free_kib / 1024 / 1024)) GiB free for $(pwd)/target (a clean run needs about 4 GiB)"
if [ "$free_kib" -lt $((3 * 1024 * 1024)) ]; then
  echo "tests/run.sh: warning: less than 3 GiB free; the build may fail with 'No space left on device'" >&2
fi

# Formatting first. Then the lints while building: the workspace's own crates are compiled by
# clippy-driver (a rustc that also runs clippy's lints) with warnings as errors, so one build does
# what `cargo clippy --workspace --all-targets --locked -- -D warnings` (what a developer runs)
# and `cargo build` did apart; the clippy stage's check build of every dependency is gone (stop 51,
# docs/benchmarks.md). `--all-targets` builds what clippy checked and what `cargo test` needs (libs,
# bins, tests, examples, each in test mode too), so `cargo test` compiles nothing. The workspace
# denies unwrap()/expect() outside tests: Cargo.toml [workspace.lints.clippy], clippy.toml.
stage "fmt" cargo fmt --all --check
clippy_driver="$(rustc --print sysroot)/bin/clippy-driver"
[ -x "$clippy_driver" ] || { echo "tests/run.sh: $clippy_driver is missing: rustup component add clippy" >&2; exit 1; }
# Exactly the variables `cargo clippy` sets (rust-clippy src/main.rs): RUSTC_WORKSPACE_WRAPPER
# (cargo's, documented) wraps only workspace members, and CLIPPY_ARGS carries the lint flags
# (clippy's own, each followed by __CLIPPY_HACKERY__). Not RUSTFLAGS=-Dwarnings: that changes every
# dependency's fingerprint, and a developer's plain `cargo build` afterwards would rebuild them
# all. Every cargo command on this target dir below uses the same values, or it would rebuild
# the workspace crates (the wrapper is in their fingerprints); the e2e tests' own `cargo build`
# of the binaries inherits them from `cargo test`.
lint_cargo() { RUSTC_WORKSPACE_WRAPPER=$clippy_driver CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__" cargo "$@"; }
# Every later cargo command also selects the whole workspace with its tests, because cargo unifies
# dependency features over the packages and targets of one command: the harness's `-p
# wattflip-agent --bin …` and `-p wattflip-collector --bin …` and the fleet stage's `-p
# wattflip-e2e` compiled 52, 23 and 42 crates again with other features, 433 CPU-seconds (stop 52,
# docs/benchmarks.md). The e2e harness repeats this build for its binaries (tests/harness/bins.rs).
build_args=(--workspace --all-targets --locked)
export WATTFLIP_E2E_CARGO_BUILD_ARGS="${build_args[*]}"
stage "build + clippy" lint_cargo build "${build_args[@]}"
# The package build must be done before the timing-sensitive tests start.
bg_wait "package build"
cargo_tests() { lint_cargo test --workspace --locked "$@" 2>&1 | tee target/test-output.log; }
stage "cargo test" cargo_tests "$@"
# The fleet test is #[ignore]d in a plain `cargo test` (three QEMU guests, minutes); it runs here,
# as its own binary after the timing-sensitive e2e tests, unless WATTFLIP_SKIP_FLEET=1.
fleet_ran=0
fleet_test() { lint_cargo test --workspace --test fleet --locked -- --ignored 2>&1 | tee -a target/test-output.log; }
if [ "${WATTFLIP_SKIP_FLEET:-}" != 1 ]; then
  stage "fleet" fleet_test
  fleet_ran=1
fi

# Every fuzz target for a fixed number of executions from its checked-in corpus (cargo-fuzz is
# installed by the script when missing; WF_FUZZ_RUNS sets the count, 0 skips). Figures: docs/fuzzing.md.
# It runs in the background, at nice 10, beside the Ansible stage and the dashboards check: those
# keep about one core of two busy (the Ansible stage: 594 CPU-s in 651 s of wall), and their
# waits are generous (an agent has 5 s for a batch), while the fuzz build and runs count
# executions, not time (libFuzzer's 10 s limit is per input, and an input takes milliseconds).
# Not beside the fleet test, whose guests' timing is part of what it checks.
fuzz_targets=0
fuzz() { nice -n 10 bash tests/fuzz/run.sh "${WF_FUZZ_RUNS:-20000}" | tee target/fuzz-output.log; }
if [ "${WF_FUZZ_RUNS:-20000}" != 0 ]; then bg_start "fuzz" fuzz; fi

# The Ansible deployment, really run over SSH against namespace hosts on this machine (root).
stage "ansible" bash tests/ansible/run.sh
# Every dashboard strict-parsed by Grafana's schema types, every InfluxQL query by InfluxDB's parser.
stage "dashboards-check" bash tests/dashboards-check/run.sh
if [ "${WF_FUZZ_RUNS:-20000}" != 0 ]; then
  bg_wait "fuzz"
  cat target/fuzz-output.log
  fuzz_targets=$(($(wc -l < target/fuzz-output.log) - 1))
fi
# The Debian packages (glibc 2.28) installed, upgraded with an NVMe guard state file, and purged in Debian 11.
stage "package test" bash tests/package/run.sh

# One closing line for everything: the cargo tests (set -e and pipefail stopped us on a failure)
# plus the fuzz targets, the Ansible real run, the dashboards check and the package test; ignored tests (each with its reason in
# target/test-output.log) are counted, never hidden among the passed ones.
passed=$(grep -E '^test result:' target/test-output.log | awk -v extra=$((fuzz_targets + 3)) '{s += $4} END {print s + extra}')
ignored=$(grep -E '^test result:' target/test-output.log | awk -v ran=$fleet_ran '{s += $8} END {print s - ran}')
print_stage_times
stage_times_printed=1
# The plain closing line CI reads: "N passed, N failed" with ", N skipped" (ignored tests) after it.
echo "tests: ${passed} passed, 0 failed, ${ignored} skipped"
