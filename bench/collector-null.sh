#!/usr/bin/env bash
# Collector alone: the real collector binary with `sink = "null"` (lines are encoded, then
# discarded and acknowledged at once) under simulated agents from wattflip-loadgen, over mutual
# TLS (WF_TLS=0 for plaintext loopback). Prints acknowledged samples per second.
# Env: WF_AGENTS (4), WF_BATCH (samples per batch, 1000), WF_SECONDS (15), WF_TLS (1),
# CARGO_TARGET_DIR (where cargo builds). Release builds.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
T=${CARGO_TARGET_DIR:-$ROOT/target}
AGENTS=${WF_AGENTS:-4}; BATCH=${WF_BATCH:-1000}; SECONDS_=${WF_SECONDS:-15}; TLS=${WF_TLS:-1}
cargo build --quiet --release --manifest-path "$ROOT/Cargo.toml" -p wattflip-collector -p wattflip-loadgen
DIR=$(mktemp -d); trap 'kill $CPID 2>/dev/null || true; rm -rf "$DIR"' EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
if [ "$TLS" = 1 ]; then
  "$T/release/wattflip-loadgen" pki "$DIR/pki" >/dev/null
  TLSCFG="[tls]
ca_file = \"$DIR/pki/ca.pem\"
cert_file = \"$DIR/pki/collector.pem\"
key_file = \"$DIR/pki/collector.key\""
  URL="https://127.0.0.1:$PORT"; PKIARG=(--pki "$DIR/pki")
else
  TLSCFG="[tls]
insecure_plaintext_loopback_only = true"
  URL="http://127.0.0.1:$PORT"; PKIARG=()
fi
cat > "$DIR/collector.toml" <<CFG
listen = "127.0.0.1:$PORT"
sink = "null"
$TLSCFG
[limits]
agent_points_per_second = 1e12
agent_burst_points = 1e12
max_message_bytes = 67108864
CFG
RUST_LOG=warn "$T/release/wattflip-collector" --config "$DIR/collector.toml" 2>"$DIR/collector.log" & CPID=$!
sleep 1
"$T/release/wattflip-loadgen" agents --url "$URL" "${PKIARG[@]}" --agents "$AGENTS" --batch "$BATCH" --seconds "$SECONDS_"
echo "collector peak RSS: $(grep VmHWM /proc/$CPID/status | awk '{print $2, $3}')"
