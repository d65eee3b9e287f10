#!/usr/bin/env bash
# End to end into a real influxd (Debian's 1.6.7 package, private instance on a free loopback
# port) against writing the same points directly with line protocol over HTTP, side by side:
# 1. loadgen agents → collector (mutual TLS) → influxd for WF_SECONDS; acknowledged samples/s;
# 2. `loadgen direct` posts as many points straight to influxd (gzip, 5000 lines per request,
#    like the collector's writer); points/s. The ratio is printed.
# Repeated WF_PAIRS times (3), each pair into fresh databases; prints each pair's ratio and the
# median, since on a shared 2-core machine one pair varies by ±20 %.
# Env: WF_AGENTS (4), WF_BATCH (1000), WF_SECONDS (20), WF_PAIRS (3), CARGO_TARGET_DIR.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
AGENTS=${WF_AGENTS:-4}; BATCH=${WF_BATCH:-1000}; SECONDS_=${WF_SECONDS:-20}; PAIRS=${WF_PAIRS:-3}
PORT=$(free_port)
start_influxd
RATIOS=()
for pair in $(seq "$PAIRS"); do
start_collector "listen = \"127.0.0.1:$PORT\"
[influx]
url = \"http://127.0.0.1:$IPORT\"
database = \"bench_e2e_$pair\"
$(tls_section)
[limits]
agent_points_per_second = 1e12
agent_burst_points = 1e12"
E2E=$("$T/$P/wattflip-loadgen" agents --url "https://127.0.0.1:$PORT" --pki "$DIR/pki" --agents "$AGENTS" --batch "$BATCH" --seconds "$SECONDS_")
echo "pair $pair: $E2E"
kill "$CPID"; wait "$CPID" 2>/dev/null || true
N=$(echo "$E2E" | sed -n 's/.*acked_samples=\([0-9]*\).*/\1/p')
curl -sf -XPOST "http://127.0.0.1:$IPORT/query" --data-urlencode "q=CREATE DATABASE bench_direct_$pair" >/dev/null
DIRECT=$("$T/$P/wattflip-loadgen" direct --influx-url "http://127.0.0.1:$IPORT" --db "bench_direct_$pair" --points "$N")
echo "pair $pair: $DIRECT"
RATIOS+=("$(python3 - "$E2E" "$DIRECT" <<'PY'
import re, sys
e = float(re.search(r"samples_per_s=(\d+)", sys.argv[1]).group(1))
d = float(re.search(r"points_per_s=(\d+)", sys.argv[2]).group(1))
print(f"{100*e/d:.1f}")
PY
)")
echo "pair $pair: end-to-end / direct = ${RATIOS[-1]} %"
done
python3 -c 'import statistics, sys; r = [float(x) for x in sys.argv[1:]]; print(f"end-to-end / direct, median of {len(r)} pairs = {statistics.median(r):.1f} % (pairs: {r})")' "${RATIOS[@]}"
