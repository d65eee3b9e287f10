#!/usr/bin/env python3
"""Statistics for bench/vs-fio.sh, computed the same way for both tools from per-IO records.

  vs_fio_pair.py NAME PATTERN PAIR FIRST SKIP LOGDIR   -> one JSON line for the pair
  vs_fio_pair.py --summary RESULTS.jsonl PAIRS SKIP    -> the table and verdicts

Per-IO records: the engine's trace CSV (process,index,offset,len,mode,start_utc_ns,latency_ns) and
fio's latency logs (fio_lat.N.log: time_ms since the Unix epoch at completion, latency_ns, ddir, bs,
offset). The first SKIP IOs of each process are dropped on both sides; IOPS = IOs / (last
completion - first start) over the rest; latency statistics over the same IOs.
"""
import glob
import json
import math
import os
import statistics
import sys


def pct(sorted_vals, q):
    # Nearest-rank percentile, the same rule for both tools.
    if not sorted_vals:
        return 0.0
    k = max(0, min(len(sorted_vals) - 1, int(round(q / 100.0 * len(sorted_vals) + 0.5)) - 1))
    return sorted_vals[k]


def stats(ios):
    """ios: list of (start_ns, latency_ns) -> dict."""
    if not ios:
        raise SystemExit("no IO records left after skipping; lower WF_SKIP")
    first = min(s for s, _ in ios)
    last = max(s + l for s, l in ios)
    lat_us = sorted(l / 1000.0 for _, l in ios)
    span = (last - first) / 1e9
    return {
        "ios": len(ios),
        "iops": len(ios) / span if span > 0 else 0.0,
        "mean": statistics.fmean(lat_us),
        "p50": pct(lat_us, 50),
        "p99": pct(lat_us, 99),
    }


def engine_ios(logdir, skip):
    files = glob.glob(os.path.join(logdir, "wf-trace", "*.csv"))
    if not files:
        raise SystemExit(f"{logdir}/wf-trace: no engine trace written")
    ios = []
    total = 0
    for f in files:
        with open(f) as fh:
            next(fh)
            for line in fh:
                p, i, _off, _len, _mode, start, lat = line.rstrip("\n").split(",")
                total += 1
                if int(i) >= skip:
                    ios.append((int(start), int(lat)))
    return ios, total


def fio_ios(logdir, skip):
    files = sorted(glob.glob(os.path.join(logdir, "fio_lat.*.log")))
    if not files:
        raise SystemExit(f"{logdir}: fio wrote no latency log (fio_lat.N.log)")
    ios = []
    total = 0
    for f in files:
        with open(f) as fh:
            for n, line in enumerate(fh):
                fields = [x.strip() for x in line.split(",")]
                t_ms, lat_ns = int(fields[0]), int(fields[1])
                total += 1
                if n >= skip:
                    # Completion at millisecond resolution; start = completion - latency.
                    ios.append((t_ms * 1_000_000 - lat_ns, lat_ns))
    return ios, total


def bt_counts(path):
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path):
        line = line.strip()
        if line.startswith("@rq["):
            # The same rwbs can print on several lines (the key is a char[8] copied whole): sum them.
            k, v = line[4:].split("]:")
            key = "rq_" + k.strip()
            out[key] = out.get(key, 0) + int(v)
        elif line.startswith("@sys_ns:"):
            out["sys_ns"] = int(line.split(":")[1])
        elif line.startswith("@sys_n:"):
            out["sys_n"] = int(line.split(":")[1])
        elif line.startswith("@gap_ns:"):
            out["gap_ns"] = int(line.split(":")[1])
        elif line.startswith("@gap_n:"):
            out["gap_n"] = int(line.split(":")[1])
    return out


def pair(argv):
    name, pat, pair_no, first, skip, logdir = argv
    skip = int(skip)
    wf_ios, wf_total = engine_ios(logdir, skip)
    f_ios, f_total = fio_ios(logdir, skip)
    if wf_total != f_total:
        raise SystemExit(f"{name} pair {pair_no}: engine issued {wf_total} IOs, fio {f_total}")
    fj = json.load(open(os.path.join(logdir, "fio.json")))["jobs"][0]
    side = fj["write"] if pat in ("SW", "RW") else fj["read"]
    row = {"name": name, "pair": int(pair_no), "first": first, "ios": wf_total}
    for k, v in stats(wf_ios).items():
        row["wf_" + k] = v
    for k, v in stats(f_ios).items():
        row["fio_" + k] = v
    row["fio_reported_iops"] = side["iops"]
    row["wf_bt"] = bt_counts(os.path.join(logdir, "bt-wf.txt"))
    row["fio_bt"] = bt_counts(os.path.join(logdir, "bt-fio.txt"))
    print(json.dumps(row))


def balanced(rs, a, b):
    """The ratio a/b balanced over pair order and robust to a disturbed pair: the mean of the
    median log-ratio of the engine-first pairs and that of the fio-first pairs (a multiplicative
    order effect k gives r*k and r/k, which the mean of logs cancels; a pair hit by someone else's
    IO burst is an outlier the medians ignore). Also the order effect k (how much faster the first
    runner was, 1 = none) and the spread: the interquartile range of the order-corrected per-pair
    ratios, relative (0.06 = the 0.97-1.03 band's width)."""
    by_order = {o: [math.log(r[a] / r[b]) for r in rs if r[b] > 0 and r[a] > 0 and r["first"] == o] for o in ("wattflip", "fio")}
    if not by_order["wattflip"] or not by_order["fio"]:
        return float("nan"), float("nan"), float("nan")
    m_wf, m_fio = statistics.median(by_order["wattflip"]), statistics.median(by_order["fio"])
    log_r, log_k = (m_wf + m_fio) / 2, (m_wf - m_fio) / 2
    corrected = sorted([v - log_k for v in by_order["wattflip"]] + [v + log_k for v in by_order["fio"]])
    q = statistics.quantiles(corrected, n=4) if len(corrected) >= 2 else [log_r, log_r, log_r]
    return math.exp(log_r), math.exp(log_k), math.exp(q[2]) - math.exp(q[0])


def summary(argv):
    path, pairs, skip = argv
    rows = [json.loads(l) for l in open(path)]
    names = []
    for r in rows:
        if r["name"] not in names:
            names.append(r["name"])
    med = statistics.median
    print(f"pairs per pattern: {pairs}; first {skip} IOs of each process skipped on both sides; "
          f"IOPS and means: medians; x = per-pair ratios wattflip/fio, the mean of the median log-ratio of each "
          f"order; order = the first runner's advantage in IOPS (1.000 = none); spread = IQR of the IOPS "
          f"ratios after the order correction (the band 0.97-1.03 is 0.06 wide)")
    print(f"{'pattern':<15} {'wf IOPS':>9} {'fio IOPS':>9} {'IOPS x':>7} {'wf mean':>8} {'fio mean':>8} "
          f"{'mean x':>7} {'p50 x':>6} {'p99 x':>6} {'x fio-rep':>9} {'order':>6} {'spread':>6}  verdict")
    verdicts = []
    for n in names:
        rs = [r for r in rows if r["name"] == n]
        g = lambda k: med(r[k] for r in rs)
        x = lambda a, b: balanced(rs, a, b)[0]
        (iops_x, order, spread), mean_x = balanced(rs, "wf_iops", "fio_iops"), x("wf_mean", "fio_mean")
        if 0.97 <= iops_x <= 1.03 and 0.97 <= mean_x <= 1.03:
            v = "met"
        elif iops_x > 1.03 or mean_x < 0.97:
            v = "engine faster"
        else:
            v = "engine slower"
        if spread > 0.06:
            # Pairs disagree by more than the band is wide: this run cannot resolve 3 %.
            v += " (noisy)"
        verdicts.append(v)
        print(f"{n:<15} {g('wf_iops'):>9.0f} {g('fio_iops'):>9.0f} {iops_x:>7.3f} {g('wf_mean'):>8.1f} "
              f"{g('fio_mean'):>8.1f} {mean_x:>7.3f} {x('wf_p50', 'fio_p50'):>6.3f} "
              f"{x('wf_p99', 'fio_p99'):>6.3f} {x('wf_iops', 'fio_reported_iops'):>9.3f} {order:>6.3f} {spread:>6.3f}  {v}")
    traced = [r for r in rows if r.get("wf_bt")]
    if traced:
        print("\nblock requests issued per 1,000 IOs by each tool (median over pairs), mean time inside pread/pwrite "
              "and mean time an IO thread spends between two of them (the tool's own work per IO), in µs:")
        kinds = sorted({k for r in traced for side in ("wf_bt", "fio_bt") for k in r[side] if k.startswith("rq_")})
        print(f"{'pattern':<15} {'tool':<8} " + " ".join(f"{k[3:]:>6}" for k in kinds) + f" {'in syscall':>10} {'between':>8}")
        for n in names:
            rs = [r for r in traced if r["name"] == n]
            for tool, side in (("wattflip", "wf_bt"), ("fio", "fio_bt")):
                cells = [med(r[side].get(k, 0) * 1000.0 / r["ios"] for r in rs) for k in kinds]
                sys_us = med(r[side].get("sys_ns", 0) / max(1, r[side].get("sys_n", 1)) / 1000.0 for r in rs)
                gap_us = med(r[side].get("gap_ns", 0) / max(1, r[side].get("gap_n", 1)) / 1000.0 for r in rs)
                print(f"{n:<15} {tool:<8} " + " ".join(f"{c:>6.0f}" for c in cells) + f" {sys_us:>10.1f} {gap_us:>8.2f}")
        # The IOPS ratio split into its two sources, per pair then balanced like the verdict:
        # - device: fio's time inside the syscall over the engine's. Both issue the same requests
        #   (the table above), so this is the device and host serving the same IOs differently
        #   from one run to the next: neither tool's doing.
        # - own work: (S + fio's gap) / (S + the engine's gap) at a common S (the pair's mean
        #   time in the syscall): what each tool's own work between IOs costs. Above 1, fio spends
        #   more time of its own per IO: the difference comes from fio's side.
        for r in traced:
            w, f = r["wf_bt"], r["fio_bt"]
            sw, sf = w.get("sys_ns", 0) / max(1, w.get("sys_n", 1)), f.get("sys_ns", 0) / max(1, f.get("sys_n", 1))
            gw, gf = w.get("gap_ns", 0) / max(1, w.get("gap_n", 1)), f.get("gap_ns", 0) / max(1, f.get("gap_n", 1))
            common = (sw + sf) / 2
            r["device_x"], r["own_x"] = (sf / sw if sw > 0 else 0.0), ((common + gf) / (common + gw) if common + gw > 0 else 0.0)
            r["one"] = 1.0
        print("\nthe IOPS ratio wattflip/fio split by source: x = device x own work (balanced over pair order like the verdict)")
        print(f"{'pattern':<15} {'IOPS x':>7} {'device x':>8} {'own x':>6}  larger own work per IO")
        for n in names:
            rs = [r for r in traced if r["name"] == n]
            iops_x, dev_x, own_x = balanced(rs, "wf_iops", "fio_iops")[0], balanced(rs, "device_x", "one")[0], balanced(rs, "own_x", "one")[0]
            side = "fio" if own_x > 1.0 else "wattflip"
            print(f"{n:<15} {iops_x:>7.3f} {dev_x:>8.3f} {own_x:>6.3f}  {side}")
    met = verdicts.count("met")
    noisy = sum(v.endswith("(noisy)") for v in verdicts)
    print(f"\nverdict: {met} of {len(verdicts)} patterns met (IOPS and mean-latency ratios within 0.97-1.03); "
          f"{noisy} too noisy to resolve the band (spread > 0.06: rerun on a quieter machine)")


if __name__ == "__main__":
    if sys.argv[1] == "--summary":
        summary(sys.argv[2:])
    else:
        pair(sys.argv[1:])
