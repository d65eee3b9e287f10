#!/usr/bin/env bash
# Collector alone: the real collector binary with `sink = "null"` (lines are encoded, then
# discarded and acknowledged at once) under simulated agents from wattflip-loadgen, over mutual
# TLS (WF_TLS=0 for plaintext loopback). Prints acknowledged samples per second.
# Env: WF_AGENTS (4), WF_BATCH (samples per batch, 1000), WF_SECONDS (15), WF_TLS (1),
# CARGO_TARGET_DIR (where cargo builds). Release builds.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
AGENTS=${WF_AGENTS:-4}; BATCH=${WF_BATCH:-1000}; SECONDS_=${WF_SECONDS:-15}; TLS=${WF_TLS:-1}
PORT=$(free_port)
if [ "$TLS" = 1 ]; then
  TLSCFG=$(tls_section); URL="https://127.0.0.1:$PORT"; PKIARG=(--pki "$DIR/pki")
else
  TLSCFG=$'[tls]\ninsecure_plaintext_loopback_only = true'; URL="http://127.0.0.1:$PORT"; PKIARG=()
fi
start_collector "listen = \"127.0.0.1:$PORT\"
sink = \"null\"
$TLSCFG
[limits]
agent_points_per_second = 1e12
agent_burst_points = 1e12
max_message_bytes = 67108864"
"$T/$P/wattflip-loadgen" agents --url "$URL" "${PKIARG[@]}" --agents "$AGENTS" --batch "$BATCH" --seconds "$SECONDS_"
peak_rss
