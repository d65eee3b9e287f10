#!/usr/bin/env bash
# Side-by-side check of the wattflip uFLIP engine against fio on byte-identical IO sequences (spec
# docs/ufip.md §10). For each pattern, PAIRS alternating pairs run on the same file: the pattern's
# iolog v2 is generated first (no IO), then wattflip and fio run it, taking turns going first.
# fio replays with read_iolog + replay_no_stall=1, direct=1, ioengine=psync, iodepth=1 (+ sync=dsync
# for writes), i.e. the same syscalls and flags as the engine. Printed: medians over the pairs of
# IOPS, mean/p50/p99 latency for each tool and the ratio wattflip/fio (median of per-pair ratios).
#
# Env: WF_DIR (default /var/tmp/wattflip-vs-fio; must be disk-backed), WF_SIZE (bytes, 1 GiB),
# WF_PAIRS (3), CARGO_TARGET_DIR (where cargo builds).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${WF_DIR:-/var/tmp/wattflip-vs-fio}
SIZE=${WF_SIZE:-1073741824}
PAIRS=${WF_PAIRS:-3}
FILE="$DIR/probe.img"

if ! command -v fio >/dev/null 2>&1; then
    echo "fio not found; installing it with apt-get" >&2
    apt-get install -y fio >&2
fi
command -v python3 >/dev/null 2>&1 || { echo "python3 is needed to parse JSON" >&2; exit 1; }

(cd "$ROOT" && cargo build --release -q -p wattflip-uflip --example one_pattern)
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/one_pattern"
[ -x "$BIN" ] || { echo "example binary not found at $BIN" >&2; exit 1; }

mkdir -p "$DIR"
RES="$DIR/results.jsonl"
: > "$RES"

# name pattern io_size io_count parallel
PATTERNS=(
    "4KiB-RR-QD1 RR 4096 4000 1"
    "4KiB-RW-QD1 RW 4096 1000 1"
    "32KiB-SR-QD1 SR 32768 4000 1"
    "128KiB-SW-QD1 SW 131072 1000 1"
    "4KiB-RR-PAR8 RR 4096 1000 8"
)

run_fio() { # logdir pattern parallel -> fio JSON on stdout
    local logdir=$1 pat=$2 par=$3 job="$1/job.fio"
    {
        echo "[global]"
        echo "ioengine=psync"
        echo "direct=1"
        echo "iodepth=1"
        echo "replay_no_stall=1"
        echo "group_reporting=1"
        case $pat in SW|RW) echo "sync=dsync" ;; esac
        local i=0
        for f in "$logdir"/*.iolog; do
            echo "[j$i]"
            echo "read_iolog=$f"
            i=$((i + 1))
        done
    } > "$job"
    fio --output-format=json "$job"
}

for spec in "${PATTERNS[@]}"; do
    read -r name pat bs count par <<<"$spec"
    for pair in $(seq 1 "$PAIRS"); do
        logdir="$DIR/log-$name-$pair"
        rm -rf "$logdir"
        args=(--file "$FILE" --size "$SIZE" --pattern "$pat" --io-size "$bs" --io-count "$count" --parallel "$par" --seed "$pair" --iolog-dir "$logdir")
        "$BIN" "${args[@]}" --iolog-only 1 >/dev/null
        if [ $((pair % 2)) -eq 1 ]; then
            wf=$("$BIN" "${args[@]}" | tail -1)
            fj=$(run_fio "$logdir" "$pat" "$par")
        else
            fj=$(run_fio "$logdir" "$pat" "$par")
            wf=$("$BIN" "${args[@]}" | tail -1)
        fi
        python3 - "$name" "$pat" "$pair" "$wf" "$fj" >> "$RES" <<'PY'
import json, sys
name, pat, pair, wf, fj = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]), json.loads(sys.argv[5])
job = fj["jobs"][0]
side = job["write"] if pat in ("SW", "RW") else job["read"]
pct = side["clat_ns"].get("percentile", {})
print(json.dumps({
    "name": name, "pair": pair,
    "wf_iops": wf["iops"], "wf_mean": wf["mean_us"], "wf_p50": wf["p50_us"], "wf_p99": wf["p99_us"],
    "fio_iops": side["iops"], "fio_mean": side["lat_ns"]["mean"] / 1000.0,
    "fio_p50": pct.get("50.000000", 0) / 1000.0, "fio_p99": pct.get("99.000000", 0) / 1000.0,
    "fio_ios": side["total_ios"], "wf_ios": wf["io_count"],
}))
PY
    done
done

python3 - "$RES" "$PAIRS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = []
for r in rows:
    if r["name"] not in names:
        names.append(r["name"])
med = statistics.median
print(f"pairs per pattern: {sys.argv[2]} (medians; ratio = median of per-pair wattflip/fio)")
hdr = f"{'pattern':<15} {'wf IOPS':>9} {'fio IOPS':>9} {'IOPS x':>7} {'wf mean':>8} {'fio mean':>8} {'mean x':>7} {'wf p50':>7} {'fio p50':>7} {'p50 x':>6} {'wf p99':>8} {'fio p99':>8} {'p99 x':>6}"
print(hdr)
for n in names:
    rs = [r for r in rows if r["name"] == n]
    assert all(r["fio_ios"] == r["wf_ios"] for r in rs), f"{n}: fio issued a different number of IOs"
    g = lambda k: med(r[k] for r in rs)
    x = lambda a, b: med(r[a] / r[b] for r in rs if r[b] > 0)
    print(f"{n:<15} {g('wf_iops'):>9.0f} {g('fio_iops'):>9.0f} {x('wf_iops','fio_iops'):>7.3f} "
          f"{g('wf_mean'):>8.1f} {g('fio_mean'):>8.1f} {x('wf_mean','fio_mean'):>7.3f} "
          f"{g('wf_p50'):>7.1f} {g('fio_p50'):>7.1f} {x('wf_p50','fio_p50'):>6.3f} "
          f"{g('wf_p99'):>8.1f} {g('fio_p99'):>8.1f} {x('wf_p99','fio_p99'):>6.3f}")
PY
