#!/usr/bin/env bash
# Runs every fuzz target for a fixed number of executions from its checked-in corpus and prints
# one line per target (executions, seconds, corpus size, crashes). A crash fails the script and
# leaves the input under tests/fuzz/artifacts/TARGET/ (reproduce: cargo fuzz run --fuzz-dir
# tests/fuzz TARGET ARTIFACT). Usage: bash tests/fuzz/run.sh [RUNS] (default 20000 per target).
#
# Sanitizer: none by default. Every crate of the workspace denies `unsafe`, so AddressSanitizer
# would only watch the C parts of dependencies at a quarter of the speed; WF_FUZZ_SANITIZER=address
# turns it on. New inputs found go to a temporary folder, not into the checked-in corpus.
#
# Build: cargo-fuzz's release build (debug assertions, overflow checks, line tables) at the
# opt-level of tests/fuzz/Cargo.toml, into a target dir in the tool cache (WF_FUZZ_TARGET_DIR,
# default ${XDG_CACHE_HOME:-~/.cache}/wattflip-tools/fuzz-target) like the package build's, so a
# fresh clone rebuilds only the workspace's own crates. A lock holds it for the whole run: another
# checkout's build would replace the binaries between this build and its runs.
set -euo pipefail
cd "$(dirname "$0")"
runs=${1:-${WF_FUZZ_RUNS:-20000}}
sanitizer=${WF_FUZZ_SANITIZER:-none}
target_dir=${WF_FUZZ_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wattflip-tools/fuzz-target}

# A debug build without debuginfo: cargo-fuzz only starts cargo and libFuzzer, so its own speed
# does not matter, and the install takes 65 CPU-seconds instead of 115 (docs/benchmarks.md, stop 50).
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "tests/fuzz/run.sh: installing cargo-fuzz" >&2
  CARGO_PROFILE_DEV_DEBUG=0 cargo install cargo-fuzz --locked --version 0.13.2 --debug --quiet ||
    { echo "tests/fuzz/run.sh: cargo install cargo-fuzz 0.13.2 failed (crates.io must be reachable)" >&2; exit 1; }
fi
# cargo-fuzz passes -Z flags; on a stable toolchain they need RUSTC_BOOTSTRAP (docs/fuzzing.md).
rustc --version | grep -q nightly || export RUSTC_BOOTSTRAP=1

mkdir -p "$target_dir"
exec 9>"$target_dir.lock"
flock -w 1800 9 || { echo "tests/fuzz/run.sh: waited 30 min for $target_dir.lock" >&2; exit 1; }
opts=(--fuzz-dir . -s "$sanitizer" --codegen-units 16 --target-dir "$target_dir")
t0=$SECONDS
cargo fuzz build "${opts[@]}"
echo "tests/fuzz/run.sh: build $((SECONDS - t0))s ($target_dir)" >&2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%-16s %10s %8s %10s %7s %8s\n' target executions seconds execs/s corpus crashes
for t in $(cargo fuzz list --fuzz-dir .); do
  mkdir -p "$work/$t"
  log="$work/$t.log"
  if ! cargo fuzz run "${opts[@]}" "$t" "$work/$t" "corpus/$t" -- \
      -runs="$runs" -seed=1 -max_len=16384 -timeout=10 -rss_limit_mb=2048 >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "tests/fuzz/run.sh: $t FAILED: crash input in tests/fuzz/artifacts/$t/" >&2
    exit 1
  fi
  # libFuzzer ends with "Done N runs in S second(s)".
  read -r done_runs secs < <(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 \2/p' "$log" | tail -n 1)
  found=$(find "$work/$t" "corpus/$t" -type f | wc -l)
  printf '%-16s %10s %8s %10s %7s %8s\n' "$t" "$done_runs" "$secs" "$((done_runs / (secs > 0 ? secs : 1)))" "$found" 0
done
