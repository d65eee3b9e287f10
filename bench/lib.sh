# Shared by the bench/*.sh scripts: release build, a temp dir cleaned on exit, free ports, a test
# PKI and the collector started from a config. Source it; set WF_EXTRA_CLEANUP for more to kill.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
T=${CARGO_TARGET_DIR:-$ROOT/target}
# WF_PROFILE: the cargo profile the benchmarks build and run (default dist, the shipped build:
# fat LTO, one codegen unit; Cargo.toml). release gives the newcomer's faster-to-build profile.
P=${WF_PROFILE:-dist}
[ -n "${WF_NO_BUILD:-}" ] || cargo build --quiet --profile "$P" --manifest-path "$ROOT/Cargo.toml" -p wattflip-collector -p wattflip-loadgen
DIR=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; sleep 1; rm -rf "$DIR"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# The [tls] section of a collector using the PKI that `loadgen pki` writes to $DIR/pki.
tls_section() {
  "$T/$P/wattflip-loadgen" pki "$DIR/pki" >/dev/null
  printf '[tls]\nca_file = "%s"\ncert_file = "%s"\nkey_file = "%s"\n' "$DIR/pki/ca.pem" "$DIR/pki/collector.pem" "$DIR/pki/collector.key"
}
# start_collector CONFIG_TEXT: writes it, starts the release collector, sets CPID. WF_COLLECTOR_BIN
# runs another build of the collector (bench/regress.sh: the baseline) under the same load generator.
start_collector() {
  printf '%s\n' "$1" > "$DIR/collector.toml"
  RUST_LOG=warn "${WF_COLLECTOR_BIN:-$T/$P/wattflip-collector}" --config "$DIR/collector.toml" 2>"$DIR/collector.log" &
  CPID=$!; PIDS+=("$CPID"); sleep 1
}
peak_rss() { echo "collector peak RSS: $(grep VmHWM "/proc/$CPID/status" | awk '{print $2, $3}')"; }
# start_influxd [EXTRA_CONFIG]: a private influxd on free loopback ports with its data in $DIR;
# sets IPORT and IPID. EXTRA_CONFIG is appended (e.g. a [coordinator] section with limits).
start_influxd() {
  IPORT=$(free_port); local rport; rport=$(free_port)
  cat > "$DIR/influxdb.conf" <<CFG
reporting-disabled = true
bind-address = "127.0.0.1:$rport"
[meta]
  dir = "$DIR/meta"
[data]
  dir = "$DIR/data"
  wal-dir = "$DIR/wal"
  query-log-enabled = false
[monitor]
  store-enabled = false
[http]
  bind-address = "127.0.0.1:$IPORT"
  log-enabled = false
[logging]
  level = "warn"
${1:-}
CFG
  influxd -config "$DIR/influxdb.conf" 2>"$DIR/influxd.log" & IPID=$!; PIDS+=("$IPID")
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$IPORT/ping" && return 0; sleep 0.2; done
  echo "influxd did not start; its log:" >&2; cat "$DIR/influxd.log" >&2; exit 1
}
