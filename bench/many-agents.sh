#!/usr/bin/env bash
# Many simulated agents at a fleet-like rate against the collector with a null sink, over mutual
# TLS: each agent sends WF_HZ batches per second of WF_BATCH samples (8 channels at 10 Hz = one
# batch of 8 samples at 10 Hz). Prints p50/p99 acknowledgement latency and the collector's peak
# RSS. Env: WF_AGENTS (1000), WF_HZ (10), WF_BATCH (8), WF_SECONDS (60), CARGO_TARGET_DIR,
# WF_NVME (0; N: each agent sends what an agent with N NVMe drives does, loadgen `--nvme N`:
# a composite temperature and a drive-power sample per drive and batch, event time 1 s per batch,
# so the collector's throttle detector holds its per-drive state as for a real fleet).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
AGENTS=${WF_AGENTS:-1000}; HZ=${WF_HZ:-10}; BATCH=${WF_BATCH:-8}; SECONDS_=${WF_SECONDS:-60}
PORT=$(free_port)
start_collector "listen = \"127.0.0.1:$PORT\"
sink = \"null\"
$(tls_section)"
ulimit -n 65536 2>/dev/null || true
# The collector's resident memory every WF_RSS_EVERY seconds (30): bounded means flat after the
# start-up, not growing with the samples that passed through.
( while kill -0 "$CPID" 2>/dev/null; do sleep "${WF_RSS_EVERY:-30}"; echo "collector RSS at +${SECONDS}s: $(grep VmRSS "/proc/$CPID/status" 2>/dev/null | awk '{print $2, $3}')"; done ) &
PIDS+=("$!")
"$T/$P/wattflip-loadgen" agents --url "https://127.0.0.1:$PORT" --pki "$DIR/pki" --agents "$AGENTS" --batch "$BATCH" --rate-hz "$HZ" --seconds "$SECONDS_" --nvme "${WF_NVME:-0}"
peak_rss
