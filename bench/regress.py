"""Alternating pairs of the baseline and current builds (bench/regress.sh): runs each benchmark
with the baseline first in odd pairs and second in even ones, parses its figures, and prints the
medians and the ratio per figure (above 1 is better). Add a benchmark as a function returning
{figure: value} and an entry in BENCHES with each figure's direction."""

import argparse
import os
import re
import statistics
import subprocess
import sys


def run(cmd, env=None):
    out = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr[-2000:]}")
    return out.stdout + out.stderr


def grab(pattern, text, what):
    m = re.search(pattern, text)
    if not m:
        raise RuntimeError(f"no {what} in the output:\n{text[-2000:]}")
    return float(m.group(1))


def collector(bindir, root):
    secs = os.environ.get("WF_COLLECTOR_SECONDS", "10")
    text = run(["bash", f"{root}/bench/collector-null.sh"], {"WF_NO_BUILD": "1", "WF_SECONDS": secs, "WF_COLLECTOR_BIN": f"{bindir}/wattflip-collector"})
    return {
        "collector samples/s": grab(r"samples_per_s=(\d+)", text, "samples_per_s"),
        "collector ack p99 ms": grab(r"p99=([\d.]+)", text, "ack p99"),
        "collector peak RSS kB": grab(r"peak RSS: (\d+) kB", text, "peak RSS"),
    }


def rollups(bindir, root):
    """The collector into a real influxd with raw retention and rollups on (a build without them
    runs without: the ratio is then what the rollups cost at ingest), bench/plan-rollups.sh."""
    secs = os.environ.get("WF_ROLLUP_SECONDS", "10")
    text = run(["bash", f"{root}/bench/plan-rollups.sh", "ingest"], {"WF_NO_BUILD": "1", "WF_SECONDS": secs, "WF_COLLECTOR_BIN": f"{bindir}/wattflip-collector"})
    n = grab(r"acked_samples=(\d+)", text, "acked_samples")
    return {
        "influx samples/s": grab(r"samples_per_s=(\d+)", text, "samples_per_s"),
        "influxd CPU us/sample": 1e6 * grab(r"influxd_cpu_s=([\d.]+)", text, "influxd CPU") / max(n, 1),
        "collector CPU us/sample": 1e6 * grab(r"collector_cpu_s=([\d.]+)", text, "collector CPU") / max(n, 1),
    }


def sampler(bindir, _root):
    secs = os.environ.get("WF_SAMPLER_SECONDS", "5")
    text = run([f"{bindir}/examples/sampler_bench", secs, "8", "1000"])
    # "sampler      CPU 2.50 % of one core"; older builds print one "CPU 0.120 s = 2.40 % of one core".
    pattern = r"(?m)^sampler\s+CPU ([\d.]+) %" if re.search(r"(?m)^sampler\s+CPU", text) else r"= ([\d.]+) % of one core"
    return {"sampler CPU % of a core": grab(pattern, text, "sampler CPU")}


def trace(bindir, _root):
    n = os.environ.get("WF_TRACE_SAMPLES", str(32 << 20))
    mb = os.environ.get("WF_TRACE_CSV_MB", "64")
    text = run([f"{bindir}/examples/trace_bench", "--samples", n, "--csv-mb", mb, "--reps", "2"])
    return {
        "trace f32 M samples/s": grab(r"f32 from file :\s+([\d.]+) M samples/s", text, "f32 rate"),
        "trace CSV MB/s": grab(r"CSV from file :\s+([\d.]+) MB/s", text, "CSV rate"),
    }


# name, function, binary it needs, and per figure: True when higher is better.
BENCHES = [
    ("collector", collector, "wattflip-collector", {"collector samples/s": True, "collector ack p99 ms": False, "collector peak RSS kB": False}),
    ("rollups", rollups, "wattflip-collector", {"influx samples/s": True, "influxd CPU us/sample": False, "collector CPU us/sample": False}),
    ("sampler", sampler, "examples/sampler_bench", {"sampler CPU % of a core": False}),
    ("trace", trace, "examples/trace_bench", {"trace f32 M samples/s": True, "trace CSV MB/s": True}),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--cur", required=True)
    ap.add_argument("--root", required=True)
    a = ap.parse_args()
    pairs = int(os.environ.get("WF_PAIRS", "3"))
    only = os.environ.get("WF_ONLY")
    rows = []
    flagged = 0
    for name, fn, binary, figures in BENCHES:
        if only and only != name:
            continue
        if not os.path.exists(f"{a.base}/{binary}"):
            print(f"regress: {name}: the baseline has no {binary}; skipped", flush=True)
            continue
        got = {"base": {f: [] for f in figures}, "cur": {f: [] for f in figures}}
        try:
            for i in range(pairs):
                order = [("base", a.base), ("cur", a.cur)] if i % 2 == 0 else [("cur", a.cur), ("base", a.base)]
                for side, bindir in order:
                    figs = fn(bindir, a.root)
                    for f, v in figs.items():
                        got[side][f].append(v)
                    print(f"regress: {name} pair {i + 1}/{pairs} {side}: " + ", ".join(f"{f} {v:g}" for f, v in figs.items()), flush=True)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"regress: {name} failed, its rows are left out: {e}", flush=True)
            flagged += 1
            continue
        for f, higher in figures.items():
            b, c = statistics.median(got["base"][f]), statistics.median(got["cur"][f])
            # Pair by pair, then the median of the ratios: a pair shares the machine's state.
            ratios = [(cv / bv if higher else bv / cv) if (bv and cv) else float("nan") for bv, cv in zip(got["base"][f], got["cur"][f])]
            r = statistics.median(ratios)
            flag = "  << below 0.9" if r < 0.9 else ""
            flagged += r < 0.9
            rows.append((f, b, c, r, min(ratios), max(ratios), flag))
    print()
    print(f"{'figure':<26} {'baseline':>12} {'current':>12} {'ratio':>7} {'min':>7} {'max':>7}   (ratio > 1: current better; medians of {pairs} alternating pairs)")
    for f, b, c, r, lo, hi, flag in rows:
        print(f"{f:<26} {b:>12.1f} {c:>12.1f} {r:>7.3f} {lo:>7.3f} {hi:>7.3f}{flag}")
    sys.exit(3 if flagged else 0)


if __name__ == "__main__":
    main()
