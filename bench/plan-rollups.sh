#!/usr/bin/env bash
# Fleet-scale planning on 1-minute rollups and the hourly tier (issues 30 and 40, docs/schema.md
# "Retention and rollups").
#
#   bash bench/plan-rollups.sh [plan]   `plan budget --since 30d` at WF_HOSTS simulated hosts
#   bash bench/plan-rollups.sh ingest   the collector into influxd with rollups on, for regress.py
#
# plan: a private influxd with the deployment's limits (query-timeout 60 s, max-select-point
# 100 M, deploy/ansible/roles/influxdb/defaults), the collector's retention policies, and per
# host WF_ZONES wall-meter zones written directly as the collector leaves them
# (bench/plan_rollups_gen.py): 1-minute rollups over WF_DAYS days (WF_MINUTES=full) or only the
# first and last three hours (WF_MINUTES=edges: what the hourly plan reads of the minute tier;
# 10,000 hosts × 30 days of minutes is not writable here), and with WF_TIERS=minute+hourly (the
# default; `minute` leaves it out) the hourly tier `rollup_1h` with the values the collector's
# statements compute from those minutes, plus each host's Hello in both policies; then WF_RUNS
# timed runs of `wattflip-collector plan budget --since 30d --group-by rack --resolution R` for
# each R of WF_RESOLUTIONS ("auto"; `rollup` is the 1-minute plan, `hourly` the hourly one). Prints
# per fleet: hosts, seconds per run (median), and the plan's resolution line. WF_CHECK=1 (with
# WF_MINUTES=full) checks that the hourly plan's groups equal the minute plan's. Env: WF_HOSTS
# ("100 1000"), WF_ZONES (1), WF_DAYS (30), WF_RUNS (3), WF_RACK_HOSTS (40 hosts per rack).
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
  local hosts=$1 db="bench_plan_$1" minutes=${WF_MINUTES:-full} tiers=${WF_TIERS:-minute+hourly}
  q "CREATE DATABASE \"$db\""
  q "CREATE RETENTION POLICY \"raw\" ON \"$db\" DURATION 7d REPLICATION 1 DEFAULT"
  q "CREATE RETENTION POLICY \"rollup_1m\" ON \"$db\" DURATION 400d REPLICATION 1"
  [ "$tiers" = minute ] || q "CREATE RETENTION POLICY \"rollup_1h\" ON \"$db\" DURATION 400d REPLICATION 1"
  local t0; t0=$(date +%s)
  python3 "$(dirname "${BASH_SOURCE[0]}")/plan_rollups_gen.py" "$IPORT" "$db" "$hosts" "${WF_ZONES:-1}" "${WF_DAYS:-30}" "${WF_RACK_HOSTS:-40}" "$minutes" "$tiers"
  echo "hosts=$hosts minutes=$minutes tiers=$tiers written_in_s=$(( $(date +%s) - t0 ))"
  local res
  for res in ${WF_RESOLUTIONS:-auto}; do
    local times=() out
    for _ in $(seq "${WF_RUNS:-3}"); do
      local s e
      s=$(date +%s.%N)
      out=$("$T/$P/wattflip-collector" --influx-url "http://127.0.0.1:$IPORT" --influx-db "$db" plan budget --since 30d --group-by rack --budget-w 1e9 --resolution "$res" 2>&1) \
        || { echo "plan budget --resolution $res failed: $out" >&2; exit 1; }
      e=$(date +%s.%N)
      times+=("$(python3 -c "print(f'{$e - $s:.3f}')")")
    done
    echo "hosts=$hosts resolution=$res plan_budget_30d_s=$(python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "${times[@]}") runs=[${times[*]}]"
    echo "hosts=$hosts $(echo "$out" | grep '^resolution:')"
  done
  # The hourly tier as written here gives the minute tier's answer (needs WF_MINUTES=full).
  if [ -n "${WF_CHECK:-}" ]; then
    local a b
    a=$("$T/$P/wattflip-collector" --influx-url "http://127.0.0.1:$IPORT" --influx-db "$db" plan budget --since 30d --group-by rack --budget-w 1e9 --resolution rollup --json)
    b=$("$T/$P/wattflip-collector" --influx-url "http://127.0.0.1:$IPORT" --influx-db "$db" plan budget --since 30d --group-by rack --budget-w 1e9 --resolution hourly --json)
    python3 -c 'import json,sys; a,b=(json.loads(x) for x in sys.argv[1:3]); assert b["resolution"].startswith("hourly tier"), b["resolution"]; assert a["groups"]==b["groups"], "hourly and minute plans differ"; print("check: the hourly plan equals the minute plan,", len(a["groups"]), "groups")' "$a" "$b"
    # And the written hours themselves: the collector's statements without INTO, on the minutes.
    python3 - "$IPORT" "$db" <<'PY'
import json, sys, time, urllib.parse, urllib.request
port, db = sys.argv[1:3]
def q(s):
    u = f"http://127.0.0.1:{port}/query?db={db}&epoch=s&q=" + urllib.parse.quote(s)
    return {(tuple(sorted(x.get("tags", {}).items())), r[0]): r[1] for x in json.load(urllib.request.urlopen(u))["results"][0].get("series", []) for r in x["values"]}
end = int(time.time()) // 3600 * 3600 * 10**9
inner = "SELECT sum(\"watts\") AS \"w\" FROM \"rollup_1m\".\"power\" WHERE \"rate\" != 'full' AND \"budget\" != '' AND time < %d GROUP BY time(1m), %s fill(none)"
for table, by in [("group_power_rack", "\"rack\""), ("host_power", "\"host\", \"budget\"")]:
    want = q(f"SELECT max(\"w\") FROM ({inner % (end, by)}) WHERE time < {end} AND time > now() - 400d GROUP BY time(1h), {by} fill(none)")
    got = q(f"SELECT \"peak_watts\" FROM \"rollup_1h\".\"{table}\" WHERE time < {end} GROUP BY {by}")
    assert want == got and got, f"{table}: {len(want)} hours computed, {len(got)} written, {sum(want.get(k) != v for k, v in got.items())} differ"
    print(f"check: {table} as written equals the statement's {len(got)} hourly peaks")
PY
  fi
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
