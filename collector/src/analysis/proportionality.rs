//! Energy proportionality of a storage device from a load ladder (issue: fleet analyses). A
//! ladder is a set of `probe_run`s with `bench = load_ladder`, one per load level u ∈ (0, 1] of
//! one pattern, each carrying its energy and duration (mean power P(u) = energy / duration) and
//! the active-idle power P(0) measured before it (`idle_baseline_w`). Formulas (docs/analyses.md):
//!
//! - normalised power p(u) = P(u) / P(1), with P(1) the peak (100 %) level;
//! - dynamic range DR = 1 − P(0) / P(1);
//! - EP (Ryckbosch et al.) = 2 − 2·∫₀¹ p(u) du, trapezoids over the measured levels (1 for a
//!   perfectly proportional device, 0 for one whose power does not depend on load);
//! - linear deviation LD = mean over the intermediate levels of p(u) − [p(0) + (1 − p(0))·u];
//! - proportionality gap PG(u) = p(u) − u per level;
//! - efficiency at peak: IOPS/W for random patterns, MiB/s/W for sequential ones (SNIA Emerald);
//! - ready-idle GB/W (SNIA Emerald) = capacity in GB (10⁹ B) / P(0), from the capacity of the
//!   ladder's device in the agent's inventory (all namespaces of its NVMe controller, whose power
//!   it shares), only when the energy is the drive's own: a host's idle says nothing of a drive.
//!
//! Each of `idle_w`, `peak_w`, `dynamic_range`, `ep` and the efficiency at peak carries the
//! half-width of its 95 % interval (`*_u95`, issue 37), propagated from the runs' `energy_u95_j`
//! and the idle's `idle_u95_w` ([`propagate`]); absent when a power it depends on has none.
//!
//! A new metric is a field computed in [`analyze`] and written in [`points`].

use std::collections::BTreeMap;
use wattflip_proto::lineproto::Point;
use wattflip_proto::schema::HostTags;
use wattflip_proto::v1;

pub const MEASUREMENT: &str = "energy_proportionality";
/// One point per level of a ladder: the curve a dashboard draws against the ideal line.
pub const LEVEL_MEASUREMENT: &str = "energy_proportionality_level";

/// One load level of a ladder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Level {
    /// Load as a fraction of the device's measured maximum, 0 < u ≤ 1.
    pub u: f64,
    pub watts: f64,
    /// Half-width of a 95 % interval on `watts`: the run's `energy_u95_j` over its duration;
    /// `None` when the run has none (unknown, not exact).
    pub watts_u95: Option<f64>,
    pub iops: f64,
    pub mib_per_s: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Proportionality {
    pub idle_w: f64,
    pub peak_w: f64,
    pub dynamic_range: f64,
    pub ep: f64,
    pub linear_deviation: f64,
    /// (u, p(u) − u) per level, u = 0 included.
    pub gaps: Vec<(f64, f64)>,
    pub iops_per_w: f64,
    pub mib_per_s_per_w: f64,
    pub u95: Uncertainty,
}

/// Half-widths of 95 % intervals on a ladder's figures; each `None` when a power it depends on
/// has none (the idle for `idle_w`, the peak for `peak_w` and the efficiencies, both for
/// `dynamic_range`, every level for `ep`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Uncertainty {
    pub idle_w: Option<f64>,
    pub peak_w: Option<f64>,
    pub dynamic_range: Option<f64>,
    pub ep: Option<f64>,
    pub iops_per_w: Option<f64>,
    pub mib_per_s_per_w: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LadderError {
    #[error("the ladder has no 100 % level, so there is no peak power to normalise by")]
    NoPeak,
    #[error("peak power {0} W is not positive")]
    BadPeak(f64),
}

/// SNIA Emerald ready-idle efficiency: GB (10⁹ bytes) of capacity per watt of idle power; `None`
/// without a positive idle power or a capacity (a zero would claim an infinitely bad drive).
pub fn ready_idle_gb_per_w(capacity_bytes: u64, idle_w: f64) -> Option<f64> {
    (capacity_bytes > 0 && idle_w > 0.0 && idle_w.is_finite()).then(|| capacity_bytes as f64 / 1e9 / idle_w)
}

/// Capacity of the drive behind block device `device` in the agent's inventory: the sum over
/// the namespaces of its NVMe controller (one controller, one power draw), else the device's own.
pub fn drive_capacity_bytes(inventory: &v1::Inventory, device: &str) -> Option<u64> {
    let d = inventory.storage_devices.iter().find(|d| d.name == device)?;
    // A namespace whose capacity is unknown makes the controller's total unknown, not smaller.
    let total = if d.controller.is_empty() {
        d.capacity_bytes
    } else {
        inventory.storage_devices.iter().filter(|o| o.controller == d.controller).map(|o| o.capacity_bytes).sum()
    };
    total.filter(|t| *t > 0)
}

/// Computes the metrics from the active-idle power `idle_w` (with its 95 % half-width
/// `idle_u95`, `None` when unknown) and the measured levels.
pub fn analyze(idle_w: f64, idle_u95: Option<f64>, levels: &[Level]) -> Result<Proportionality, LadderError> {
    let mut lv: Vec<Level> = levels.iter().copied().filter(|l| l.u > 0.0 && l.u <= 1.0).collect();
    lv.sort_by(|a, b| a.u.total_cmp(&b.u));
    let peak = lv.last().filter(|l| (l.u - 1.0).abs() < 1e-9).copied().ok_or(LadderError::NoPeak)?;
    if peak.watts <= 0.0 {
        return Err(LadderError::BadPeak(peak.watts));
    }
    let p = |w: f64| w / peak.watts;
    let mut pts: Vec<(f64, f64)> = vec![(0.0, p(idle_w))];
    pts.extend(lv.iter().map(|l| (l.u, p(l.watts))));
    let integral: f64 = pts.windows(2).map(|w| (w[1].0 - w[0].0) * (w[0].1 + w[1].1) / 2.0).sum();
    let p0 = pts[0].1;
    let inner: Vec<f64> = pts[1..pts.len() - 1].iter().map(|&(u, pu)| pu - (p0 + (1.0 - p0) * u)).collect();
    let linear_deviation = if inner.is_empty() { 0.0 } else { inner.iter().sum::<f64>() / inner.len() as f64 };
    let mut powers = vec![Level { u: 0.0, watts: idle_w, watts_u95: idle_u95, iops: 0.0, mib_per_s: 0.0 }];
    powers.extend(lv.iter().copied());
    Ok(Proportionality {
        idle_w,
        peak_w: peak.watts,
        dynamic_range: 1.0 - idle_w / peak.watts,
        ep: 2.0 - 2.0 * integral,
        linear_deviation,
        gaps: pts.iter().map(|&(u, pu)| (u, pu - u)).collect(),
        iops_per_w: peak.iops / peak.watts,
        mib_per_s_per_w: peak.mib_per_s / peak.watts,
        u95: propagate(&powers, integral),
    })
}

/// First-order propagation of the level powers' half-widths into the figures: each figure's
/// partial derivative in each power P_k times that power's half-width, the terms combined in
/// quadrature (the levels' non-gain errors, edges, noise, resolution, are independent).
/// `levels`: the idle at u = 0 first, then the levels by load, the peak (u = 1) last; `integral`
/// the trapezoid ∫p over them.
///
/// The gain: every level of a ladder is read by one source, whose accuracy class (a gain error)
/// is common to all of them. A common gain scales every P_k and cancels in the ratios EP and DR
/// (both are homogeneous of degree 0 in the powers: Σ P_k·∂f/∂P_k = 0), so only the non-gain part
/// of each half-width should propagate into them. A run's `energy_u95_j` (and the idle's
/// `idle_u95_w`) does not separate its gain part, so it is propagated whole, as if each level's
/// gain were its own: an upper bound on EP's and DR's half-widths, never an under-statement
/// (docs/energy-method.md §9.2). `idle_w`, `peak_w` and the efficiencies at peak do carry the
/// gain: their half-widths are the powers' own.
fn propagate(levels: &[Level], integral: f64) -> Uncertainty {
    let n = levels.len() - 1;
    let (idle, peak) = (&levels[0], &levels[n]);
    let pn = peak.watts;
    // Trapezoid weights: ∫p = Σ w_k·P_k / P_n, each segment giving half its width to each end.
    let mut w = vec![0.0; levels.len()];
    for (k, pair) in levels.windows(2).enumerate() {
        let half = (pair[1].u - pair[0].u) / 2.0;
        w[k] += half;
        w[k + 1] += half;
    }
    // EP = 2 − 2·∫p: ∂EP/∂P_k = −2·w_k/P_n below the peak, ∂EP/∂P_n = −2·(w_n − ∫p)/P_n.
    let ep = levels
        .iter()
        .zip(&w)
        .enumerate()
        .map(|(k, (l, wk))| {
            let dk = if k == n { wk - integral } else { *wk };
            l.watts_u95.map(|u| (2.0 * dk / pn * u).powi(2))
        })
        .sum::<Option<f64>>()
        .map(f64::sqrt);
    // DR = 1 − P_0/P_n: ∂DR/∂P_0 = −1/P_n, ∂DR/∂P_n = P_0/P_n².
    let dynamic_range = idle.watts_u95.zip(peak.watts_u95).map(|(u0, un)| ((u0 / pn).powi(2) + (idle.watts * un / (pn * pn)).powi(2)).sqrt());
    // X/P_n for a peak rate X (its IO count and duration are exact against the power's error).
    let per_w = |x: f64| peak.watts_u95.map(|un| x * un / (pn * pn));
    Uncertainty { idle_w: idle.watts_u95, peak_w: peak.watts_u95, dynamic_range, ep, iops_per_w: per_w(peak.iops), mib_per_s_per_w: per_w(peak.mib_per_s) }
}

/// Finds the ladders in a batch (grouped by device, experiment and probe) and returns their
/// `energy_proportionality` points. Ladders without energy (no power source) produce nothing.
/// `inventory` is the agent's (its Hello): the capacity for ready-idle GB/W.
pub fn points(batch: &[v1::ProbeRun], tags: &HostTags, inventory: &v1::Inventory) -> Vec<Point> {
    let mut groups: BTreeMap<(String, String, String), Vec<&v1::ProbeRun>> = BTreeMap::new();
    for r in batch.iter().filter(|r| r.bench == "load_ladder") {
        let probe = r.run_id.split('-').next().unwrap_or("").to_string();
        groups.entry((r.device.clone(), r.experiment.clone(), probe)).or_default().push(r);
    }
    let mut out = Vec::new();
    for ((device, experiment, _), runs) in groups {
        // The idle baseline and its half-width from the same run.
        let idle = runs.iter().find_map(|r| r.idle_baseline_w.map(|w| (w, r.idle_u95_w)));
        let levels = levels_of(&runs);
        let (Some((idle, idle_u95)), Some(first)) = (idle, runs.first()) else { continue };
        let Ok(m) = analyze(idle, idle_u95, &levels) else { continue };
        let pattern = first.pattern.clone();
        // The ladder's MIX is uFLIP's RR-RW Mix: random IO, so IOPS/W like RR and RW.
        let random = pattern.starts_with('R') || pattern == "MIX";
        // `device` when the energy is the drive's own (rail, drive); `host` for platform scopes.
        let scope = match first.parameters.get("energy_scope").map(String::as_str) {
            Some("drive" | "rail") | None => "device",
            Some(_) => "host",
        };
        let base = |measurement: &str, t: i64| {
            let mut p = Point::new(measurement, t).tag("host", tags.host.clone());
            for (k, v) in &tags.labels {
                p = p.tag(k.clone(), v.clone());
            }
            p.tag("device", device.clone())
                .tag("model", first.model.clone())
                .tag("pattern", pattern.clone())
                .tag("workload", pattern.clone())
                .tag("scope", scope)
        };
        let t0 = runs.iter().map(|r| r.start_ns).min().unwrap_or(first.start_ns);
        let mut p = base(MEASUREMENT, t0)
            .tag("experiment", experiment.clone())
            .string("energy_source", first.energy_source.clone())
            .float("idle_w", m.idle_w)
            .float("peak_w", m.peak_w)
            .float("dynamic_range", m.dynamic_range)
            .float("ep", m.ep)
            .float("linear_deviation", m.linear_deviation)
            .int("levels", levels.len() as i64);
        for (u, gap) in &m.gaps {
            p = p.float(format!("gap_{:03}", (u * 100.0).round() as i64), *gap);
        }
        p = if random { p.float("iops_per_w", m.iops_per_w) } else { p.float("mib_per_s_per_w", m.mib_per_s_per_w) };
        p = with_u95(p, &m.u95, random);
        if scope == "device" {
            if let Some(cap) = drive_capacity_bytes(inventory, &device) {
                if let Some(gbw) = ready_idle_gb_per_w(cap, m.idle_w) {
                    p = p.uint("capacity_bytes", cap).float("ready_idle_gb_per_w", gbw);
                }
            }
        }
        // The curve, u = 0 (active idle) included, each level 1 µs apart after the ladder start.
        let mut curve = vec![(0.0, m.idle_w, m.u95.idle_w)];
        curve.extend(levels.iter().map(|l| (l.u, l.watts, l.watts_u95)));
        curve.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (i, (u, w, w_u95)) in curve.iter().enumerate() {
            let level = (u * 100.0).round() as i64;
            let mut lp = base(LEVEL_MEASUREMENT, t0 + i as i64 * 1000)
                .tag("level", format!("{level:03}"))
                .float("load_pct", u * 100.0)
                .float("watts", *w)
                .float("normalised_power", w / m.peak_w)
                .float("gap", w / m.peak_w - u);
            if let Some(w_u95) = w_u95 {
                lp = lp.float("watts_u95", *w_u95);
            }
            out.push(lp);
        }
        out.push(p);
    }
    out
}

/// The levels of a ladder's runs: mean power = energy / duration of each run with an energy and a
/// positive duration, and its half-width the energy's over the same duration.
fn levels_of(runs: &[&v1::ProbeRun]) -> Vec<Level> {
    runs.iter()
        .filter_map(|r| {
            let secs = (r.end_ns - r.start_ns) as f64 / 1e9;
            let e = r.energy_j?;
            (secs > 0.0).then(|| Level {
                u: r.value / 100.0,
                watts: e / secs,
                watts_u95: r.energy_u95_j.map(|u| u / secs),
                iops: r.iops,
                mib_per_s: r.mib_per_s,
            })
        })
        .collect()
}

/// Adds the known half-widths to a ladder's point, the efficiency's beside the efficiency written
/// (`iops_per_w` for a random pattern, else `mib_per_s_per_w`); an unknown one is absent, never 0.
fn with_u95(mut p: Point, u: &Uncertainty, random: bool) -> Point {
    let efficiency = if random { ("iops_per_w_u95", u.iops_per_w) } else { ("mib_per_s_per_w_u95", u.mib_per_s_per_w) };
    let fields = [("idle_w_u95", u.idle_w), ("peak_w_u95", u.peak_w), ("dynamic_range_u95", u.dynamic_range), ("ep_u95", u.ep), efficiency];
    for (name, v) in fields {
        if let Some(v) = v {
            p = p.float(name, v);
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ladder(watts: &[(f64, f64)]) -> Vec<Level> {
        watts.iter().map(|&(u, w)| Level { u, watts: w, watts_u95: None, iops: 1000.0 * u, mib_per_s: 4.0 * u }).collect()
    }

    #[test]
    fn ideal_constant_and_typical_devices() {
        // Ideal: P(u) = 10·u, idle 0 → EP 1, DR 1, no gaps.
        let m = analyze(0.0, None, &ladder(&[(0.5, 5.0), (1.0, 10.0)])).unwrap();
        assert_eq!((m.ep, m.dynamic_range, m.linear_deviation), (1.0, 1.0, 0.0));
        // Constant 6 W: EP 0, DR 0.
        let m = analyze(6.0, None, &ladder(&[(0.25, 6.0), (0.5, 6.0), (1.0, 6.0)])).unwrap();
        assert_eq!((m.ep, m.dynamic_range), (0.0, 0.0));
        // Idle 2 W, peak 4 W, linear in between: ∫p = (0.5 + 1)/2 = 0.75 → EP 0.5, DR 0.5.
        let m = analyze(2.0, None, &ladder(&[(0.5, 3.0), (1.0, 4.0)])).unwrap();
        assert_eq!((m.ep, m.dynamic_range, m.linear_deviation), (0.5, 0.5, 0.0));
        assert_eq!(m.gaps, vec![(0.0, 0.5), (0.5, 0.25), (1.0, 0.0)]);
        assert_eq!(m.iops_per_w, 250.0);
        // Concave (power rises early): above the line by 0.125 at u = 0.5.
        let m = analyze(2.0, None, &ladder(&[(0.5, 3.5), (1.0, 4.0)])).unwrap();
        assert_eq!(m.linear_deviation, 0.125);
        assert_eq!(m.ep, 2.0 - 2.0 * (0.5 * (0.5 + 0.875) / 2.0 + 0.5 * (0.875 + 1.0) / 2.0));
    }

    #[test]
    fn ready_idle_gb_per_w_from_the_inventory_capacity() {
        let dev = |name: &str, ctrl: &str, cap: u64| v1::StorageDevice {
            name: name.into(),
            controller: ctrl.into(),
            capacity_bytes: Some(cap),
            ..Default::default()
        };
        let inv = v1::Inventory {
            storage_devices: vec![
                dev("nvme0n1", "nvme0", 1_500_000_000_000),
                dev("nvme0n2", "nvme0", 500_000_000_000),
                dev("nvme1n1", "nvme1", 960_000_000_000),
                dev("sda", "", 4_000_000_000_000),
                dev("loop0", "", 0),
            ],
            ..Default::default()
        };
        assert_eq!(drive_capacity_bytes(&inv, "nvme0n2"), Some(2_000_000_000_000));
        assert_eq!(drive_capacity_bytes(&inv, "sda"), Some(4_000_000_000_000));
        assert_eq!(drive_capacity_bytes(&inv, "loop0"), None);
        assert_eq!(drive_capacity_bytes(&inv, "file:s.dat"), None);
        // 2 TB at 2.5 W idle: 800 GB/W; 960 GB at 3.75 W: 256 GB/W.
        assert_eq!(ready_idle_gb_per_w(2_000_000_000_000, 2.5), Some(800.0));
        assert_eq!(ready_idle_gb_per_w(960_000_000_000, 3.75), Some(256.0));
        assert_eq!((ready_idle_gb_per_w(960_000_000_000, 0.0), ready_idle_gb_per_w(0, 2.0)), (None, None));

        // Written on the ladder's point with its capacity; absent for a host-scope energy source.
        let run = |pct: f64, t: i64, w: f64, scope: Option<&str>| v1::ProbeRun {
            run_id: "7-0".into(),
            device: "nvme1n1".into(),
            model: "M".into(),
            bench: "load_ladder".into(),
            experiment: "load_ladder/RR".into(),
            pattern: "RR".into(),
            value: pct,
            start_ns: t,
            end_ns: t + 1_000_000_000,
            energy_j: Some(w),
            idle_baseline_w: Some(3.75),
            parameters: scope.map(|s| [("energy_scope".to_string(), s.to_string())].into()).unwrap_or_default(),
            ..Default::default()
        };
        let tags = HostTags { host: "a1".into(), labels: BTreeMap::new() };
        let line = |scope: Option<&str>| {
            let pts = points(&[run(50.0, 0, 4.0, scope), run(100.0, 2_000_000_000, 6.0, scope)], &tags, &inv);
            let p = pts.iter().find(|p| p.measurement == MEASUREMENT).expect("a proportionality point");
            let mut s = String::new();
            p.write_line(&mut s).unwrap();
            s
        };
        let dev_line = line(None);
        assert!(dev_line.contains("capacity_bytes=960000000000i,ready_idle_gb_per_w=256"), "{dev_line}");
        let host_line = line(Some("package"));
        assert!(!host_line.contains("ready_idle_gb_per_w") && !host_line.contains("capacity_bytes"), "{host_line}");
    }

    #[test]
    fn a_ladder_needs_its_peak() {
        assert_eq!(analyze(1.0, None, &ladder(&[(0.5, 3.0)])), Err(LadderError::NoPeak));
        assert_eq!(analyze(1.0, None, &ladder(&[(1.0, 0.0)])), Err(LadderError::BadPeak(0.0)));
    }

    /// A ladder whose levels carry half-widths: (u, P, u95 of P).
    fn ladder_u95(watts: &[(f64, f64, f64)]) -> Vec<Level> {
        watts.iter().map(|&(u, w, u95)| Level { u, watts: w, watts_u95: Some(u95), iops: 1000.0 * u, mib_per_s: 4.0 * u }).collect()
    }

    #[test]
    fn half_widths_of_ep_and_dr_by_hand() {
        // Idle 2 ± 0.25 W, 50 % at 3 ± 0.1875 W, 100 % at 4 ± 0.375 W (dyadic: exact in binary).
        // Trapezoid weights over u = 0, 0.5, 1: w = (0.25, 0.5, 0.25); ∫p = (0.25·2 + 0.5·3 +
        // 0.25·4)/4 = 0.75. EP = 2 − 2·Σw·P/P₁₀₀:
        //   ∂EP/∂P₀ = −2·0.25/4 = −0.125, ∂EP/∂P₅₀ = −2·0.5/4 = −0.25,
        //   ∂EP/∂P₁₀₀ = −2·(0.25 − 0.75)/4 = +0.25;
        //   terms 0.125·0.25 = 2/64, 0.25·0.1875 = 3/64, 0.25·0.375 = 6/64 → √(4 + 9 + 36)/64 = 7/64.
        // DR = 1 − P₀/P₁₀₀: ∂/∂P₀ = −1/4, ∂/∂P₁₀₀ = 2/16; terms 0.25/4 = 4/64, 2·0.375/16 = 3/64
        //   → 5/64. IOPS/W = 1000/P₁₀₀: 1000·0.375/16 = 23.4375; MiB/s/W 4·0.375/16 = 0.09375.
        let m = analyze(2.0, Some(0.25), &ladder_u95(&[(0.5, 3.0, 0.1875), (1.0, 4.0, 0.375)])).unwrap();
        let want = Uncertainty {
            idle_w: Some(0.25),
            peak_w: Some(0.375),
            dynamic_range: Some(5.0 / 64.0),
            ep: Some(7.0 / 64.0),
            iops_per_w: Some(23.4375),
            mib_per_s_per_w: Some(0.09375),
        };
        assert_eq!(m.u95, want);

        // Uneven levels, given out of order: u = 0, 0.25, 0.5, 1 at 2, 2.5, 3, 4 W. Weights
        // (0.125, 0.25, 0.375, 0.25), ∫p = (0.25 + 0.625 + 1.125 + 1)/4 = 0.75; ∂EP/∂P =
        // (−0.0625, −0.125, −0.1875, +0.25). Half-widths (0.25, 0.125, 0.25, 0.3125) give terms
        // (1, 1, 3, 5)/64 → √36/64 = 6/64.
        let lv = ladder_u95(&[(1.0, 4.0, 0.3125), (0.25, 2.5, 0.125), (0.5, 3.0, 0.25)]);
        let m = analyze(2.0, Some(0.25), &lv).unwrap();
        assert_eq!(m.ep, 0.5);
        assert_eq!(m.u95.ep, Some(6.0 / 64.0));
    }

    #[test]
    fn a_power_without_half_width_leaves_its_figures_unknown() {
        let mut lv = ladder_u95(&[(0.5, 3.0, 0.1875), (1.0, 4.0, 0.375)]);
        // No idle half-width: idle, DR and EP unknown; the peak's own still known.
        let u = analyze(2.0, None, &lv).unwrap().u95;
        assert_eq!((u.idle_w, u.dynamic_range, u.ep, u.peak_w), (None, None, None, Some(0.375)));
        // A middle level without one: EP unknown, DR (idle and peak only) known.
        lv[0].watts_u95 = None;
        let u = analyze(2.0, Some(0.25), &lv).unwrap().u95;
        assert_eq!((u.ep, u.dynamic_range), (None, Some(5.0 / 64.0)));
        // No peak half-width: everything but the idle unknown.
        lv[0].watts_u95 = Some(0.1875);
        lv[1].watts_u95 = None;
        let u = analyze(2.0, Some(0.25), &lv).unwrap().u95;
        assert_eq!(u, Uncertainty { idle_w: Some(0.25), ..Uncertainty::default() });
    }

    #[test]
    fn half_widths_are_written_only_when_known() {
        // Runs of 2 s: a power's half-width is the energy's over 2 s.
        let run = |pct: f64, t: i64, w: f64, u95_w: Option<f64>| v1::ProbeRun {
            run_id: "9-0".into(),
            device: "nvme0n1".into(),
            bench: "load_ladder".into(),
            experiment: "load_ladder/RR".into(),
            pattern: "RR".into(),
            value: pct,
            iops: 10.0 * pct,
            start_ns: t,
            end_ns: t + 2_000_000_000,
            energy_j: Some(2.0 * w),
            energy_u95_j: u95_w.map(|u| 2.0 * u),
            idle_baseline_w: Some(2.0),
            idle_u95_w: Some(0.25),
            ..Default::default()
        };
        let tags = HostTags { host: "a1".into(), labels: BTreeMap::new() };
        let lines = |mid: Option<f64>| {
            let pts = points(&[run(50.0, 0, 3.0, mid), run(100.0, 3_000_000_000, 4.0, Some(0.375))], &tags, &v1::Inventory::default());
            pts.iter()
                .map(|p| {
                    let mut s = String::new();
                    p.write_line(&mut s).unwrap();
                    s
                })
                .collect::<Vec<_>>()
        };
        let all = lines(Some(0.1875));
        let ep = all.iter().find(|l| l.starts_with("energy_proportionality,")).unwrap();
        // IOPS/W = 1000/P₁₀₀: 1000·0.375/16.
        let want = "iops_per_w=250,idle_w_u95=0.25,peak_w_u95=0.375,dynamic_range_u95=0.078125,ep_u95=0.109375,iops_per_w_u95=23.4375 ";
        assert!(ep.contains(want), "{ep}");
        let level50 = all.iter().find(|l| l.contains("level=050")).unwrap();
        assert!(level50.contains(",watts_u95=0.1875 "), "{level50}");

        let some = lines(None);
        let ep = some.iter().find(|l| l.starts_with("energy_proportionality,")).unwrap();
        assert!(ep.contains("dynamic_range_u95=0.078125,iops_per_w_u95=23.4375 ") && !ep.contains("ep_u95"), "{ep}");
        let level50 = some.iter().find(|l| l.contains("level=050")).unwrap();
        assert!(!level50.contains("watts_u95"), "{level50}");
    }
}
