#!/usr/bin/env bash
# What the collector does with more cores, measured by CPU time rather than only by wall-clock
# throughput: the null-sink run of collector-null.sh with the collector pinned to its first N
# cores and the load generator to the others (WF_CORES), then both on every core. For each: acknowledged samples/s, the CPU seconds
# the collector and the load generator used (from /proc/PID/stat), the cores the collector kept
# busy, and its CPU time per sample. A collector held back by a lock would stay near one busy core,
# or pay more CPU per sample on two; one that scales keeps its cost per sample and takes what the
# load generator leaves. "expected if linear" is 2 / (collector + loadgen CPU per sample): the
# throughput two cores give when nothing but CPU limits either side.
# Env: WF_AGENTS (4), WF_BATCH (1000), WF_SECONDS (15), WF_ROUNDS (3), WF_CORES ("1 2 4 8"),
# CARGO_TARGET_DIR.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
AGENTS=${WF_AGENTS:-4}; BATCH=${WF_BATCH:-1000}; SECONDS_=${WF_SECONDS:-15}; ROUNDS=${WF_ROUNDS:-3}
command -v taskset >/dev/null || { echo "bench/cores.sh: taskset is missing: apt-get install -y util-linux" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "bench/cores.sh: needs at least 2 cores (nproc = $(nproc))" >&2; exit 2; }
# utime + stime of a process and its threads, in clock ticks.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
tls_section > "$DIR/tls.toml"
one() { # $1: collector cpus, $2: loadgen cpus
  local port; port=$(free_port)
  printf 'listen = "127.0.0.1:%s"\nsink = "null"\n%s\n[limits]\nagent_points_per_second = 1e12\nagent_burst_points = 1e12\nmax_message_bytes = 67108864\n' \
    "$port" "$(cat "$DIR/tls.toml")" > "$DIR/collector.toml"
  RUST_LOG=warn taskset -c "$1" "${WF_COLLECTOR_BIN:-$T/$P/wattflip-collector}" --config "$DIR/collector.toml" 2>"$DIR/collector.log" &
  local cpid=$!; PIDS+=("$cpid"); sleep 1
  local c0; c0=$(ticks "$cpid")
  taskset -c "$2" "$T/$P/wattflip-loadgen" agents --url "https://127.0.0.1:$port" --pki "$DIR/pki" \
    --agents "$AGENTS" --batch "$BATCH" --seconds "$SECONDS_" > "$DIR/out" 2>/dev/null &
  local lpid=$!
  local l=0
  while kill -0 "$lpid" 2>/dev/null; do l=$(ticks "$lpid" 2>/dev/null || echo "$l"); sleep 0.2; done
  wait "$lpid"
  local c1; c1=$(ticks "$cpid")
  kill "$cpid"; wait "$cpid" 2>/dev/null || true
  python3 - "$(cat "$DIR/out")" "$((c1 - c0))" "$l" "$HZ" "$1" <<'PY'
import re, sys
out, ctick, ltick, hz, cpus = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
n = int(re.search(r"acked_samples=(\d+)", out).group(1)); secs = float(re.search(r"seconds=([\d.]+)", out).group(1))
c, l = ctick / hz, ltick / hz
print(f"collector on cpus {cpus:4}: {n/secs/1e6:5.2f} M samples/s | collector {c/secs:4.2f} cores busy, {1e6*c/n:5.3f} us CPU/sample | loadgen {l/secs:4.2f} cores, {1e6*l/n:5.3f} us/sample | expected if linear on 2 cores: {2/((c+l)/n)/1e6:5.2f} M/s")
PY
}
# The collector on its first N cores and the load generator pinned to all the others, for each N
# in WF_CORES (1 2 4 8): the scaling per collector core with the load generator never competing
# for the collector's cores. An N that leaves no core for the load generator is reported as not
# measurable on this host (never as a figure). The last run per round shares every core between
# both (the two-core comparison of issue 25).
NPROC=$(nproc)
for r in $(seq "$ROUNDS"); do
  echo "round $r"
  for n in ${WF_CORES:-1 2 4 8}; do
    if [ "$n" -lt "$NPROC" ]; then
      one "$(seq -s, 0 $((n - 1)))" "$(seq -s, "$n" $((NPROC - 1)))"
    else
      echo "collector on $n core(s), load generator on other cores: not available on this host ($NPROC cores)"
    fi
  done
  one "$(seq -s, 0 $((NPROC - 1)))" "$(seq -s, 0 $((NPROC - 1)))"
done
