#!/usr/bin/env bash
# The past against the present: builds a baseline revision into its own target directory and runs
# the collector (null sink, mutual TLS, 4 agents), collector-into-influxd with rollups
# (bench/plan-rollups.sh ingest: the baseline without them when it predates them, so the ratio is
# their cost at ingest), sampler and trace-import benchmarks of both
# builds in alternating pairs, then prints each figure's median per build and the ratio, oriented
# so that above 1 is better (throughput: current / baseline; CPU, latency, memory: baseline /
# current). A ratio below 0.9 is flagged and the script exits 3.
#
#   bash bench/regress.sh [REV]
#
# REV: a commit or tag; default the newest tag, else the baseline recorded in docs/benchmarks.md
# ("Regression baseline: `SHA`"). Both collectors run under the current build's load generator, so
# only the collector differs. Env: WF_PAIRS (3), WF_COLLECTOR_SECONDS (10), WF_SAMPLER_SECONDS (5),
# WF_TRACE_SAMPLES (33554432), WF_TRACE_CSV_MB (64), WF_ROLLUP_SECONDS (10),
# WF_ONLY (collector|rollups|sampler|trace: one only).
# Baseline builds are cached in target/regress/SHA (delete it to rebuild).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REV=${1:-}
if [ -z "$REV" ]; then
  REV=$(git -C "$ROOT" describe --tags --abbrev=0 2>/dev/null \
    || sed -n 's/^Regression baseline: `\([0-9a-f]\{7,40\}\)`.*/\1/p' "$ROOT/docs/benchmarks.md" | tail -1)
fi
[ -n "$REV" ] || { echo "regress.sh: no REV given, no tag, and no 'Regression baseline:' line in docs/benchmarks.md" >&2; exit 2; }
SHA=$(git -C "$ROOT" rev-parse --verify --quiet "$REV^{commit}") || { echo "regress.sh: $REV is not a commit of this repository" >&2; exit 2; }
BASE=$ROOT/target/regress/$SHA
CUR=${CARGO_TARGET_DIR:-$ROOT/target}
BINS=(-p wattflip-collector -p wattflip-loadgen -p wattflip-agent -p wattflip-energy --bin wattflip-collector --bin wattflip-loadgen --example sampler_bench --example trace_bench)

echo "regress: baseline $REV ($SHA), current $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD || echo '+changes')"
if [ ! -f "$BASE/src/Cargo.toml" ]; then
  mkdir -p "$BASE/src"
  git -C "$ROOT" archive "$SHA" | tar -x -C "$BASE/src"
fi
echo "regress: building the baseline in $BASE (cached after the first time)"
# The baseline may lack the load generator or an example: build what it has, one target at a time.
# Both builds use the shipped profile, dist (Cargo.toml); a baseline from before dist existed
# shipped its release profile, so it builds with that one.
BPROF=release
grep -q '^\[profile\.dist\]' "$BASE/src/Cargo.toml" && BPROF=dist
for t in "--bin wattflip-collector" "--example sampler_bench" "--example trace_bench"; do
  # shellcheck disable=SC2086
  CARGO_TARGET_DIR=$BASE/target cargo build --quiet --profile "$BPROF" --manifest-path "$BASE/src/Cargo.toml" $t 2>"$BASE/build.log" \
    || echo "regress: the baseline has no ${t#--* } (see $BASE/build.log); that benchmark is skipped"
done
echo "regress: building the current tree"
cargo build --quiet --profile dist --manifest-path "$ROOT/Cargo.toml" "${BINS[@]}"
exec python3 "$ROOT/bench/regress.py" --base "$BASE/target/$BPROF" --cur "$CUR/dist" --root "$ROOT"
