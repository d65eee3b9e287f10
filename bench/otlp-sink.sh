#!/usr/bin/env bash
# The OTLP sink's throughput beside the InfluxDB sink's, in the same collector run (issue 28 item
# 5): loadgen agents → collector (mutual TLS) → a private influxd AND a private Prometheus
# (`--web.enable-otlp-receiver`, built by tests/prometheus/build.sh), with the OTLP sink required
# so the Acks, and so the agents' pace, wait for both stores. Over the run, from the collector's
# own counters (/metrics): InfluxDB lines written/s and OTLP data points sent/s, and the samples/s
# the agents got acknowledged. Then the same load with InfluxDB alone, for the cost of the second
# sink. Figures go in docs/benchmarks.md (the lead measures; this script only prints).
# Both runs use `loadgen agents --ms-series` (every sample its own series, batches >= 1 ms apart):
# Prometheus keeps one sample per series and millisecond and refuses the rest (400), which the
# default load (8 series, 1 ns apart) would mostly be.
# Env: WF_AGENTS (4), WF_BATCH (1000), WF_SECONDS (20), CARGO_TARGET_DIR.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
AGENTS=${WF_AGENTS:-4}; BATCH=${WF_BATCH:-1000}; SECONDS_=${WF_SECONDS:-20}
PROM=$(bash "$ROOT/tests/prometheus/build.sh" | tail -n 1)
PPORT=$(free_port); MPORT=$(free_port); PORT=$(free_port)
start_influxd
printf 'global:\n  scrape_interval: 1h\n' > "$DIR/prometheus.yml"
"$PROM" --config.file="$DIR/prometheus.yml" --storage.tsdb.path="$DIR/prom" --web.listen-address="127.0.0.1:$PPORT" \
  --web.enable-otlp-receiver --log.level=warn 2>"$DIR/prometheus.log" & PIDS+=("$!")
for _ in $(seq 150); do curl -sf "http://127.0.0.1:$PPORT/-/ready" >/dev/null && break; sleep 0.2; done
# counter NAME: its value on the collector's metrics page.
counter() { curl -sf "http://127.0.0.1:$MPORT/metrics" | awk -v n="$1" '$1 == n {print $2}'; }
run() { # run DB OTLP_TABLE: one collector, one loadgen run; prints loadgen's line and the counters' rates
  start_collector "listen = \"127.0.0.1:$PORT\"
$(tls_section)
[influx]
url = \"http://127.0.0.1:$IPORT\"
database = \"$1\"
[limits]
agent_points_per_second = 1e12
agent_burst_points = 1e12
[metrics]
listen = \"127.0.0.1:$MPORT\"
$2"
  local l0 o0 t0 out l1 o1 t1 refused
  l0=$(counter wattflip_collector_lines_written_total); o0=$(counter wattflip_collector_otlp_points_sent_total); t0=$(date +%s.%N)
  out=$("$T/$P/wattflip-loadgen" agents --url "https://127.0.0.1:$PORT" --pki "$DIR/pki" --agents "$AGENTS" --batch "$BATCH" --seconds "$SECONDS_" --ms-series)
  l1=$(counter wattflip_collector_lines_written_total); o1=$(counter wattflip_collector_otlp_points_sent_total); t1=$(date +%s.%N)
  refused=$(counter 'wattflip_collector_otlp_points_dead_lettered_total{reason="refused"}')
  kill "$CPID"; wait "$CPID" 2>/dev/null || true
  python3 - "$out" "$l0" "$l1" "$o0" "$o1" "$t0" "$t1" "${refused:-0}" <<'PY'
import re, sys
out, l0, l1, o0, o1, t0, t1, refused = sys.argv[1], *map(lambda x: float(x or 0), sys.argv[2:])
acked = re.search(r"samples_per_s=(\d+)", out)
s = t1 - t0
print(f"  agents: {out}")
print(f"  acknowledged samples/s: {acked.group(1) if acked else 'n/a'}; InfluxDB sink: {(l1 - l0) / s:.0f} lines/s; OTLP sink: {(o1 - o0) / s:.0f} data points/s (over {s:.1f} s)")
if refused:
    print(f"  OTLP points the receiver refused (400, counted, not in the rate above): {refused:.0f}")
PY
  grep -m 1 "OTLP receiver refused" "$DIR/collector.log" >&2 || true
}
echo "InfluxDB + OTLP (required) to Prometheus $("$PROM" --version 2>/dev/null | head -n 1):"
run bench_otlp_both "[otlp]
url = \"http://127.0.0.1:$PPORT/api/v1/otlp/v1/metrics\"
required = true"
echo "InfluxDB alone, same load:"
run bench_otlp_influx_only ""

