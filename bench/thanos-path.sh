#!/usr/bin/env bash
# The collector → Thanos path beside the collector → InfluxDB path (issue 29), same load generator,
# same data, one after the other:
# 1. Thanos: three `thanos receive` in one hashring with replication factor 3 (tests/thanos/build.sh
#    builds the binary once), the collector's OTLP sink (`[otlp] required = true`: a batch is
#    acknowledged only once a quorum of 2 receivers stored it) posting to one of them; loadgen
#    agents for WF_SECONDS; acknowledged samples/s and ack latency; then what the receivers'
#    TSDBs appended (÷ 3 replicas), which must not be below what was acknowledged;
# 2. InfluxDB: a private influxd 1.x, the collector's InfluxDB sink, the same agents and data.
# The data is `loadgen agents --ms-series`: a Prometheus TSDB keeps one sample per series and
# millisecond, so each sample is its own series and each batch at least 1 ms after the previous
# (the default ns-spaced batches would collide there). Env: WF_AGENTS (4), WF_BATCH (1000),
# WF_SECONDS (20), CARGO_TARGET_DIR. Release builds.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
AGENTS=${WF_AGENTS:-4}; BATCH=${WF_BATCH:-1000}; SECONDS_=${WF_SECONDS:-20}
THANOS=$(bash "$ROOT/tests/thanos/build.sh" | tail -n 1)
LIMITS=$'[limits]\nagent_points_per_second = 1e12\nagent_burst_points = 1e12\nmax_message_bytes = 67108864'
TLS=$(tls_section)

# Receiver i: ports RHTTP[i], RGRPC[i], RWRITE[i]; one hashring file for all.
RHTTP=(); RGRPC=(); RWRITE=(); ENDPOINTS=()
for i in 0 1 2; do
  RHTTP+=("$(free_port)"); RGRPC+=("$(free_port)"); RWRITE+=("$(free_port)")
  ENDPOINTS+=("{\"address\": \"127.0.0.1:${RGRPC[$i]}\"}")
done
(IFS=,; echo "[{\"hashring\": \"default\", \"endpoints\": [${ENDPOINTS[*]}]}]") > "$DIR/hashrings.json"
for i in 0 1 2; do
  # Flags as in tests/harness/thanos.rs (see its comments: capnproto port, retention 0d).
  "$THANOS" receive --http-address="127.0.0.1:${RHTTP[$i]}" --grpc-address="127.0.0.1:${RGRPC[$i]}" \
    --remote-write.address="127.0.0.1:${RWRITE[$i]}" --receive.capnproto-address="127.0.0.1:$(free_port)" \
    --tsdb.path="$DIR/receive-$i" --tsdb.retention=0d --label="replica=\"r$i\"" \
    --receive.hashrings-file="$DIR/hashrings.json" --receive.local-endpoint="127.0.0.1:${RGRPC[$i]}" \
    --receive.replication-factor=3 --tsdb.out-of-order.time-window=1h 2>"$DIR/receive-$i.log" &
  PIDS+=("$!")
done
for i in 0 1 2; do
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:${RHTTP[$i]}/-/ready" >/dev/null && break; sleep 0.2; done
  curl -sf "http://127.0.0.1:${RHTTP[$i]}/-/ready" >/dev/null || { echo "thanos receive r$i not ready:"; tail -20 "$DIR/receive-$i.log"; exit 1; }
done
appended() { # samples the three receivers' TSDBs appended, summed
  for i in 0 1 2; do curl -sf "http://127.0.0.1:${RHTTP[$i]}/metrics"; done |
    awk '/^prometheus_tsdb_head_samples_appended_total\{.*type="float"/ {s += $2} END {printf "%.0f", s}'
}

# run_path NAME SINK_CONFIG: a collector with SINK_CONFIG under the load generator; sets RUN.
run_path() {
  local port; port=$(free_port)
  start_collector "listen = \"127.0.0.1:$port\"
$2
$TLS
$LIMITS"
  RUN=$("$T/$P/wattflip-loadgen" agents --url "https://127.0.0.1:$port" --pki "$DIR/pki" --agents "$AGENTS" \
    --batch "$BATCH" --seconds "$SECONDS_" --ms-series)
  echo "$1: $RUN"
  peak_rss
  kill "$CPID"; wait "$CPID" 2>/dev/null || true
}

run_path "thanos (OTLP, 3 receivers, replication 3)" "sink = \"null\"
[otlp]
url = \"http://127.0.0.1:${RWRITE[0]}/api/v1/otlp\"
required = true"
ACKED=$(echo "$RUN" | sed -n 's/.*acked_samples=\([0-9]*\).*/\1/p')
STORED=$(appended)
echo "thanos: receivers appended $STORED samples = $((STORED / 3)) per replica; acknowledged $ACKED"
if [ "$((STORED / 3))" -lt "$ACKED" ]; then
  echo "thanos: FAIL: fewer samples stored per replica than acknowledged" >&2
  exit 1
fi

start_influxd
run_path "influxdb 1.x (line protocol)" "[influx]
url = \"http://127.0.0.1:$IPORT\"
database = \"bench_thanos_path\""
