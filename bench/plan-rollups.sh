#!/usr/bin/env bash
# Fleet-scale planning on 1-minute rollups (issue 30, docs/schema.md "Retention and rollups").
#
#   bash bench/plan-rollups.sh [plan]   `plan budget --since 30d` at WF_HOSTS simulated hosts
#   bash bench/plan-rollups.sh ingest   the collector into influxd with rollups on, for regress.py
#
# plan: a private influxd with the deployment's limits (query-timeout 60 s, max-select-point
# 100 M, deploy/ansible/roles/influxdb/defaults), the collector's retention policies, and per
# host WF_ZONES wall-meter zones of 1-minute rollups over WF_DAYS days written directly (as the
# collector's SELECT … INTO leaves them: watts, peak_watts, low_watts, count, watts_sum) plus
# each host's Hello in both policies; then WF_RUNS timed runs of `wattflip-collector plan budget
# --since 30d --group-by rack`. Prints per fleet: hosts, rollup points, seconds per run (median),
# and the plan's resolution line. Env: WF_HOSTS ("100 1000"), WF_ZONES (1), WF_DAYS (30),
# WF_RUNS (3), WF_RACK_HOSTS (40 hosts per rack).
#
# ingest: influxd + collector (mutual TLS) with `raw_retention = "7d"` and a 2 s settle when the
# collector build knows the key (else without: a baseline before rollups), WF_AGENTS loadgen
# agents for WF_SECONDS; prints acknowledged samples/s, influxd's and the collector's CPU seconds
# over the run plus the settle that follows, and the rollup points written. bench/regress.py runs
# it for both builds, so the ratio shows what the rollups cost at ingest.
set -euo pipefail
MODE=${1:-plan}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
command -v influxd >/dev/null || { echo "plan-rollups.sh: influxd not found: apt-get install -y influxdb" >&2; exit 2; }

q() { curl -sf -XPOST "http://127.0.0.1:$IPORT/query" --data-urlencode "q=$1" >/dev/null; }
cpu_s() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat"; }

plan_bench() {
  local hosts=$1 db="bench_plan_$1"
  q "CREATE DATABASE \"$db\""
  q "CREATE RETENTION POLICY \"raw\" ON \"$db\" DURATION 7d REPLICATION 1 DEFAULT"
  q "CREATE RETENTION POLICY \"rollup_1m\" ON \"$db\" DURATION 400d REPLICATION 1"
  local t0; t0=$(date +%s)
  python3 - "$IPORT" "$db" "$hosts" "${WF_ZONES:-1}" "${WF_DAYS:-30}" "${WF_RACK_HOSTS:-40}" <<'PY'
import sys, time, urllib.request
port, db, hosts, zones, days, per_rack = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
now_min = int(time.time()) // 60
first = now_min - days * 1440 + 1

def post(rp, lines):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/write?db={db}&rp={rp}&precision=s", data="".join(lines).encode())
    urllib.request.urlopen(req, timeout=600).read()

for h in range(hosts):
    hello = f"agent,host=h{h:05},rack=r{h // per_rack:03},session=run version=\"bench\",protocol_version=1i {now_min * 60 - 120}\n"
    post("raw", [hello]); post("rollup_1m", [hello])
    for z in range(zones):
        key = f"power,budget=wall,host=h{h:05},method=measured,rack=r{h // per_rack:03},scope=wall,source=ipmi,zone=dcmi{z}"
        lines = []
        for m in range(first, now_min + 1):
            w = 200.0 + (h * 7 + m) % 50
            lines.append(f"{key} watts={w},peak_watts={w + 5},low_watts={w - 5},count=60i,watts_sum={w * 60} {m * 60}\n")
            if len(lines) == 50000:
                post("rollup_1m", lines); lines = []
        if lines:
            post("rollup_1m", lines)
PY
  local points=$((hosts * ${WF_ZONES:-1} * ${WF_DAYS:-30} * 1440))
  echo "hosts=$hosts rollup_points=$points written_in_s=$(( $(date +%s) - t0 ))"
  local times=() out
  for _ in $(seq "${WF_RUNS:-3}"); do
    local s e
    s=$(date +%s.%N)
    out=$("$T/$P/wattflip-collector" --influx-url "http://127.0.0.1:$IPORT" --influx-db "$db" plan budget --since 30d --group-by rack --budget-w 1e9 2>&1) \
      || { echo "plan budget failed: $out" >&2; exit 1; }
    e=$(date +%s.%N)
    times+=("$(python3 -c "print(f'{$e - $s:.3f}')")")
  done
  echo "hosts=$hosts plan_budget_30d_s=$(python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "${times[@]}") runs=[${times[*]}]"
  echo "hosts=$hosts $(echo "$out" | grep '^resolution:')"
}

ingest_bench() {
  local port db=bench_ingest retention=""
  port=$(free_port)
  # A build before rollups refuses the key (unknown keys are errors): it runs without them.
  printf '[influx]\nraw_retention = "7d"\n' > "$DIR/probe.toml"
  if "${WF_COLLECTOR_BIN:-$T/$P/wattflip-collector}" --config "$DIR/probe.toml" --insecure-loopback check-config >/dev/null 2>&1; then
    retention=$'raw_retention = "7d"\nrollup_settle = "2s"'
  fi
  start_collector "listen = \"127.0.0.1:$port\"
[influx]
url = \"http://127.0.0.1:$IPORT\"
database = \"$db\"
$retention
$(tls_section)
[limits]
agent_points_per_second = 1e12
agent_burst_points = 1e12"
  local c0 i0 out c1 i1 rolled
  c0=$(cpu_s "$CPID"); i0=$(cpu_s "$IPID")
  out=$("$T/$P/wattflip-loadgen" agents --url "https://127.0.0.1:$port" --pki "$DIR/pki" --agents "${WF_AGENTS:-4}" --batch "${WF_BATCH:-1000}" --seconds "${WF_SECONDS:-10}")
  # The settle delay and the recompute it triggers belong to the cost.
  sleep 4
  c1=$(cpu_s "$CPID"); i1=$(cpu_s "$IPID")
  rolled=$(curl -sf "http://127.0.0.1:$IPORT/query?db=$db" --data-urlencode 'q=SELECT sum("count") FROM "rollup_1m"."temperature"' | python3 -c 'import json,sys; v=json.load(sys.stdin); print((v["results"][0].get("series") or [{"values":[[0,0]]}])[0]["values"][0][1])' 2>/dev/null || echo 0)
  echo "$out"
  echo "rollups=$([ -n "$retention" ] && echo on || echo off) collector_cpu_s=$(python3 -c "print(f'{$c1 - $c0:.2f}')") influxd_cpu_s=$(python3 -c "print(f'{$i1 - $i0:.2f}')") rolled_up_samples=$rolled"
}

start_influxd $'[coordinator]\n  query-timeout = "60s"\n  max-select-point = 100000000'
case "$MODE" in
  plan) for n in ${WF_HOSTS:-100 1000}; do plan_bench "$n"; done ;;
  ingest) ingest_bench ;;
  *) echo "plan-rollups.sh: mode $MODE: plan or ingest" >&2; exit 2 ;;
esac
