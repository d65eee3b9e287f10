#!/usr/bin/env bash
# Side-by-side check of the wattflip uFLIP engine against fio on byte-identical IO sequences (spec
# docs/uflip-method.md §10), judged in both directions. For each pattern, PAIRS alternating pairs run on the
# same file: the pattern's iolog v2 is generated first (no IO), then wattflip and fio run it, taking
# turns going first. fio replays with read_iolog + replay_no_stall=1, direct=1, ioengine=psync,
# iodepth=1 (+ sync=dsync for writes), i.e. the same syscalls and flags as the engine.
#
# Both sides are accounted the same way (docs/uflip-engine.md, "Side by side with fio"): every IO's
# start and latency is recorded (the engine's --trace-dir CSV, fio's write_lat_log), the first
# WF_SKIP IOs of each process are dropped on both sides (fio's start-up, the engine's first IOs),
# and IOPS = IOs / (last completion - first start) over what is left, latency statistics over the
# same IOs. Before each side the file's dirty state is flushed (sync -f) and the disk left idle for
# WF_SETTLE seconds, so neither side inherits the other's writeback. fio's own figures (IOPS over
# its whole runtime) are printed too, as "fio as reported".
#
# Verdict per pattern: "met" when the IOPS ratio and the mean-latency ratio (wattflip/fio) both
# lie within 0.97-1.03; "engine faster"/"engine slower" otherwise. The ratio is the geometric mean
# of the per-pair ratios over as many engine-first as fio-first pairs (PAIRS is made even): this
# machine favours one position of a pair by a few per cent, a multiplicative order effect k that
# alternating order cancels only when the two orders are balanced ((r*k)(r/k) = r^2), while the
# median of an odd number of pairs lands on one order's side (0.936 IOPS with equal median IOPS
# in the first 9-pair run). The order effect itself is printed per pattern ("order").
#
# Env: WF_DIR (default /var/tmp/wattflip-vs-fio; must be disk-backed), WF_SIZE (bytes, 1 GiB),
# WF_PAIRS (10; an odd number is rounded up), WF_SKIP (16), WF_SETTLE (0.5), WF_ONLY (a pattern name regex, all by default),
# WF_DEVICE=loop (both tools on a loop block device over the same pre-filled image instead of the
# file, so no filesystem metadata enters either side: see docs/uflip-engine.md), WF_TRACE=1 (count, per side, the block requests each tool issues by type, the time spent in
# pread/pwrite and the time each IO thread spends between two of them, i.e. the tool's own work per
# IO, with bpftrace; needs root), CARGO_TARGET_DIR (where cargo builds).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${WF_DIR:-/var/tmp/wattflip-vs-fio}
SIZE=${WF_SIZE:-1073741824}
PAIRS=${WF_PAIRS:-10}
PAIRS=$(( (PAIRS + 1) / 2 * 2 ))
SKIP=${WF_SKIP:-16}
SETTLE=${WF_SETTLE:-0.5}
ONLY=${WF_ONLY:-.}
TRACE=${WF_TRACE:-0}
DEVICE=${WF_DEVICE:-file}
IMAGE="$DIR/probe.img"
FILE=$IMAGE

if ! command -v fio >/dev/null 2>&1; then
    echo "fio not found; installing it with apt-get" >&2
    apt-get install -y fio >&2
fi
if [ "$TRACE" = 1 ] && ! command -v bpftrace >/dev/null 2>&1; then
    echo "bpftrace not found; installing it with apt-get (WF_TRACE=1)" >&2
    apt-get install -y bpftrace >&2
fi
command -v python3 >/dev/null 2>&1 || { echo "python3 is needed to parse JSON" >&2; exit 1; }

(cd "$ROOT" && cargo build --profile dist -q -p wattflip-uflip --example one_pattern)
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/dist/examples/one_pattern"
[ -x "$BIN" ] || { echo "example binary not found at $BIN" >&2; exit 1; }

mkdir -p "$DIR"
RES="$DIR/results.jsonl"
: > "$RES"

CONSENT=()
if [ "$DEVICE" = loop ]; then
    # The engine creates and fills the image with pseudo-random data (no holes: reads of a sparse
    # file would never reach the disk), then both tools write the loop device over it with direct IO.
    "$BIN" --file "$IMAGE" --size "$SIZE" --pattern SR --io-size 1048576 --io-count 1 > /dev/null
    FILE=$(losetup --direct-io=on --find --show "$IMAGE")
    trap 'losetup -d "$FILE"' EXIT
    CONSENT=(--consent "loop:$IMAGE")
    echo "both tools on $FILE (loop, direct IO) over $IMAGE"
fi

# name pattern io_size io_count parallel. Counts make each run last ~0.5 s or more on an idle disk
# here, so fio's millisecond log timestamps cost at most ~0.2 % of the span.
PATTERNS=(
    "4KiB-RR-QD1 RR 4096 8000 1"
    "16KiB-RR-QD1 RR 16384 6000 1"
    "32KiB-SR-QD1 SR 32768 6000 1"
    "64KiB-SR-QD1 SR 65536 5000 1"
    "4KiB-RW-QD1 RW 4096 3000 1"
    "8KiB-RW-QD1 RW 8192 3000 1"
    "128KiB-SW-QD1 SW 131072 2000 1"
    "4KiB-RR-PAR4 RR 4096 3000 4"
    "4KiB-RR-PAR8 RR 4096 2000 8"
)

# Block IO (bios) submitted by the tool's own threads (block_bio_queue runs in the submitter's context; block_rq_issue often runs in a kworker), by type (rwbs: WS = sync write, WSM = sync
# metadata write, FF = flush, ...), and the time spent inside pread/pwrite: the evidence that shows
# whether both tools cost the device the same.
BT_PROG='BEGIN { printf("ready\n"); }
tracepoint:block:block_bio_queue /comm == "fio" || comm == "one_pattern" || strncmp(comm, "uflip-io", 8) == 0/ { @rq[args->rwbs] = count(); }
tracepoint:syscalls:sys_enter_pwrite64, tracepoint:syscalls:sys_enter_pread64 /comm == "fio" || comm == "one_pattern" || strncmp(comm, "uflip-io", 8) == 0/ { @t[tid] = nsecs; if (@x[tid] > 0) { @gap_ns = sum(nsecs - @x[tid]); @gap_n = count(); } }
tracepoint:syscalls:sys_exit_pwrite64, tracepoint:syscalls:sys_exit_pread64 /@t[tid]/ { @sys_ns = sum(nsecs - @t[tid]); @sys_n = count(); delete(@t[tid]); @x[tid] = nsecs; }
END { clear(@t); clear(@x); }'

traced() { # out-file command... : runs the command, with bpftrace counting around it when WF_TRACE=1
    local out=$1
    shift
    if [ "$TRACE" != 1 ]; then
        : > "$out"
        "$@"
        return
    fi
    bpftrace -e "$BT_PROG" > "$out" 2>/dev/null &
    local bp=$! i
    # Start the tool once every probe is attached: BEGIN fires after the attach, while "Attaching
    # N probes" is printed before it (a SIGTERM during the attach left bpftrace hanging for good).
    for i in $(seq 300); do
        grep -q '^ready' "$out" 2>/dev/null && break
        sleep 0.1
    done
    grep -q '^ready' "$out" || { echo "bpftrace did not attach within 30 s (WF_TRACE=1)" >&2; kill -KILL "$bp"; exit 1; }
    "$@"
    # SIGTERM, not SIGINT: a background job of a non-interactive shell starts with SIGINT ignored.
    # Its maps are printed on exit; one that has not exited after 10 s is killed (counts lost).
    kill -TERM "$bp"
    for i in $(seq 100); do
        kill -0 "$bp" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$bp" 2>/dev/null && echo "bpftrace did not exit on SIGTERM; killed (this pair's counts are lost)" >&2
    wait "$bp" || true
}

settle() {
    sync -f "$IMAGE" 2>/dev/null || sync
    sleep "$SETTLE"
}

run_fio() { # logdir pattern parallel -> fio JSON on stdout, per-IO latency logs in logdir/fio_lat.N.log
    local logdir=$1 pat=$2 par=$3 job="$1/job.fio"
    {
        echo "[global]"
        echo "ioengine=psync"
        echo "direct=1"
        echo "iodepth=1"
        echo "replay_no_stall=1"
        echo "group_reporting=1"
        echo "write_lat_log=$logdir/fio"
        echo "log_offset=1"
        case $pat in SW | RW) echo "sync=dsync" ;; esac
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
    read -r name pat bs count par <<< "$spec"
    [[ $name =~ $ONLY ]] || continue
    for pair in $(seq 1 "$PAIRS"); do
        logdir="$DIR/log-$name-$pair"
        rm -rf "$logdir"
        args=(--file "$FILE" --size "$SIZE" "${CONSENT[@]}" --pattern "$pat" --io-size "$bs" --io-count "$count" --parallel "$par" --seed "$pair" --iolog-dir "$logdir")
        "$BIN" "${args[@]}" --iolog-only 1 > /dev/null
        run_wf() { settle; traced "$logdir/bt-wf.txt" "$BIN" "${args[@]}" --trace-dir "$logdir/wf-trace" | tail -1 > "$logdir/wf.json"; }
        run_f() { settle; traced "$logdir/bt-fio.txt" run_fio "$logdir" "$pat" "$par" > "$logdir/fio.json"; }
        if [ $((pair % 2)) -eq 1 ]; then
            first=wattflip
            run_wf
            run_f
        else
            first=fio
            run_f
            run_wf
        fi
        python3 "$ROOT/bench/vs_fio_pair.py" "$name" "$pat" "$pair" "$first" "$SKIP" "$logdir" >> "$RES"
    done
done

python3 "$ROOT/bench/vs_fio_pair.py" --summary "$RES" "$PAIRS" "$SKIP"
