#!/usr/bin/env bash
# Many simulated agents at a fleet-like rate against the collector with a null sink, over mutual
# TLS: each agent sends WF_HZ batches per second of WF_BATCH samples (8 channels at 10 Hz = one
# batch of 8 samples at 10 Hz). Prints p50/p99 acknowledgement latency and the collector's peak
# RSS. Env: WF_AGENTS (1000), WF_HZ (10), WF_BATCH (8), WF_SECONDS (60), CARGO_TARGET_DIR.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
T=${CARGO_TARGET_DIR:-$ROOT/target}
AGENTS=${WF_AGENTS:-1000}; HZ=${WF_HZ:-10}; BATCH=${WF_BATCH:-8}; SECONDS_=${WF_SECONDS:-60}
cargo build --quiet --release --manifest-path "$ROOT/Cargo.toml" -p wattflip-collector -p wattflip-loadgen
DIR=$(mktemp -d); trap 'kill $CPID 2>/dev/null || true; rm -rf "$DIR"' EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$T/release/wattflip-loadgen" pki "$DIR/pki" >/dev/null
cat > "$DIR/collector.toml" <<CFG
listen = "127.0.0.1:$PORT"
sink = "null"
[tls]
ca_file = "$DIR/pki/ca.pem"
cert_file = "$DIR/pki/collector.pem"
key_file = "$DIR/pki/collector.key"
CFG
RUST_LOG=warn "$T/release/wattflip-collector" --config "$DIR/collector.toml" 2>"$DIR/collector.log" & CPID=$!
sleep 1
ulimit -n 65536 2>/dev/null || true
"$T/release/wattflip-loadgen" agents --url "https://127.0.0.1:$PORT" --pki "$DIR/pki" --agents "$AGENTS" --batch "$BATCH" --rate-hz "$HZ" --seconds "$SECONDS_"
echo "collector peak RSS: $(grep VmHWM /proc/$CPID/status | awk '{print $2, $3}')"
