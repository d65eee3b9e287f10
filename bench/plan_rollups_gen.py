#!/usr/bin/env python3
"""Writes the stored tiers `plan budget` reads for bench/plan-rollups.sh, as the collector leaves
them (docs/schema.md, "Retention and rollups"): 1-minute rollups of WF_ZONES wall-meter zones per
host, and the hourly tier (`rollup_1h`: per-series `power`, `host_power`, `group_power_rack` and the
coverage points `wattflip_rollup_1h`) with the values the collector's SELECT … INTO statements
compute from those minutes (collector/src/rollup/hourly.rs). Each host's Hello goes to both raw
and rollup_1m.

usage: plan_rollups_gen.py PORT DB HOSTS ZONES DAYS RACK_HOSTS MINUTES TIERS
  MINUTES: full (every minute of the window) or edges (only the first and last three hours,
           the parts the hourly plan reads from the minute tier)
  TIERS:   minute or minute+hourly

A minute's mean of zone z of host h is w = 200 + (7h + m) % 50 (m: minute since the epoch), its
points' peak w + 5 and low w - 5, 60 points: so any 60 consecutive minutes hold every residue and
an hour's peaks are closed forms, checked against the minute tier by `WF_CHECK=1`.
"""
import sys
import time
import urllib.request

port, db, hosts, zones, days, per_rack, minutes_mode, tiers = sys.argv[1:9]
hosts, zones, days, per_rack = int(hosts), int(zones), int(days), int(per_rack)
hourly = tiers == "minute+hourly"
NS = 1_000_000_000
now_min = int(time.time()) // 60
first = now_min - days * 1440 + 1
first_hour, last_hour = first // 60, now_min // 60
buf = {}


def post(rp, line, flush=False):
    lines = buf.setdefault(rp, [])
    if line:
        lines.append(line)
    if lines and (flush or len(lines) >= 50000):
        req = urllib.request.Request(f"http://127.0.0.1:{port}/write?db={db}&rp={rp}&precision=s", data="".join(lines).encode())
        urllib.request.urlopen(req, timeout=600).read()
        lines.clear()


def w(h, m):
    return 200 + (7 * h + m) % 50


def wanted(m):
    return minutes_mode == "full" or m < (first_hour + 3) * 60 or m >= (last_hour - 3) * 60


def hour_minutes(hr):
    return range(max(hr * 60, first), min(hr * 60 + 60, now_min + 1))


for h in range(hosts):
    rack = f"r{h // per_rack:03}"
    hello = f"agent,host=h{h:05},rack={rack},session=run version=\"bench\",protocol_version=1i {now_min * 60 - 120}\n"
    post("raw", hello)
    post("rollup_1m", hello)
    for z in range(zones):
        key = f"power,budget=wall,host=h{h:05},method=measured,rack={rack},scope=wall,source=ipmi,zone=dcmi{z}"
        for m in range(first, now_min + 1):
            if wanted(m):
                x = w(h, m)
                post("rollup_1m", f"{key} watts={x},peak_watts={x + 5},low_watts={x - 5},count=60i,watts_sum={x * 60} {m * 60}\n")
        if not hourly:
            continue
        for hr in range(first_hour, last_hour + 1):
            ms = hour_minutes(hr)
            if len(ms) == 60:
                # Every residue once, those of the hour's first ten minutes twice.
                total = 60 * 200 + 1225 + sum((7 * h + hr * 60 + j) % 50 for j in range(10))
                peak, low = 249, 200
            else:
                xs = [w(h, m) for m in ms]
                total, peak, low = sum(xs), max(xs), min(xs)
            n = 60 * len(ms)
            post("rollup_1h", f"{key} watts={total * 60 / n},peak_minute_watts={peak},peak_watts={peak + 5},low_watts={low - 5},"
                 f"count={n}i,watts_sum={total * 60} {hr * 3600}\n")
    if hourly:
        for hr in range(first_hour, last_hour + 1):
            ms = hour_minutes(hr)
            peak = zones * (249 if len(ms) == 60 else max(w(h, m) for m in ms))
            post("rollup_1h", f"host_power,budget=wall,host=h{h:05} peak_watts={peak},minutes={len(ms)}i {hr * 3600}\n")

if hourly:
    for r in range((hosts + per_rack - 1) // per_rack):
        members = range(r * per_rack, min((r + 1) * per_rack, hosts))
        # The rack's sum per minute depends on the minute's residue mod 50 only.
        by_residue = [zones * sum(w(h, k) for h in members) for k in range(50)]
        for hr in range(first_hour, last_hour + 1):
            ms = hour_minutes(hr)
            peak = max(by_residue) if len(ms) == 60 else max(by_residue[m % 50] for m in ms)
            post("rollup_1h", f"group_power_rack,rack=r{r:03} peak_watts={peak},minutes={len(ms)}i {hr * 3600}\n")
    for table in ["power", "host_power", "group_power_rack"]:
        post("rollup_1h", f"wattflip_rollup_1h,table={table} since_ns={first_hour * 3600 * NS}i {now_min * 60}\n")
for rp in list(buf):
    post(rp, None, flush=True)
