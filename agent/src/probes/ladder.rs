//! The load ladder (SPECpower-style graduated load for storage): active idle, then a random read
//! and a random write pattern rate-limited to 10, 20 … 100 % of the device's measured maximum IOPS,
//! each level held long enough for stable power, with power recorded throughout. uFLIP has no rate
//! limit, but its Pause micro-benchmark has PauseIO, a busy-wait after every IO: at queue depth 1,
//! a pause of 1/rate − mean latency gives the target rate. Each level becomes a `probe_run` with
//! `bench = load_ladder`, `varying = load_pct`, its energy and the active-idle power, from which
//! the collector computes energy proportionality (EP, dynamic range, gaps).

use super::{convert, open_target, EnergyOptions, ProbeCmdError};
use std::path::PathBuf;
use std::time::Duration;
use wattflip_energy::UnixNanos;
use wattflip_proto::v1;
use wattflip_uflip::{self as uflip, Baseline, Bench, NullObserver, PlanOptions, ProbeReport, RunResult};

#[derive(Debug, Clone)]
pub struct LadderArgs {
    pub target: PathBuf,
    pub size: u64,
    pub destroy_consent: Vec<String>,
    pub patterns: Vec<Baseline>,
    pub io_size: u64,
    /// Load levels in percent of the measured maximum IOPS.
    pub levels: Vec<u32>,
    pub hold: Duration,
    pub seed: u64,
}

/// One measured level.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LevelResult {
    pub pattern: String,
    pub load_pct: u32,
    pub target_iops: f64,
    pub pause_io_us: u64,
    pub iops: f64,
    pub mean_us: f64,
    pub watts: Option<f64>,
}

pub struct Ladder {
    pub runs: Vec<v1::ProbeRun>,
    pub levels: Vec<LevelResult>,
    pub idle_w: Option<f64>,
    pub max_iops: Vec<(String, f64)>,
    pub energy_note: String,
}

fn run_pattern(target: &uflip::Target, a: &LadderArgs, b: Baseline, pause_us: u64, count: u64) -> Result<(ProbeReport, RunResult), ProbeCmdError> {
    let mut o = PlanOptions::small(target.size);
    o.benches = vec![Bench::Pause];
    o.repetitions = 1;
    o.seed = a.seed;
    o.io_size = a.io_size;
    o.values.pause_io_us = vec![pause_us];
    o.counts.io_count[b.index()] = count.max(16);
    o.counts.ignore_io[b.index()] = 0;
    o.pause_between_runs = Duration::ZERO;
    let mut plan = uflip::plan(&o);
    plan.runs.retain(|r| r.pattern == b.as_str());
    for (i, r) in plan.runs.iter_mut().enumerate() {
        r.index = i;
    }
    let report = uflip::run(target, &plan, &mut NullObserver)?;
    let run = report.runs.first().cloned().ok_or_else(|| {
        ProbeCmdError::Output { path: a.target.clone(), source: std::io::Error::other(format!("the Pause plan has no {} run", b.as_str())) }
    })?;
    Ok((report, run))
}

/// Runs the ladder on `a.target`, recording power from the host's sources (`e`).
pub fn run(a: &LadderArgs, e: &EnergyOptions) -> Result<Ladder, ProbeCmdError> {
    let target = open_target(&a.target, a.size, &a.destroy_consent)?;
    let found = crate::sensors::discover_all(&e.sysfs_root, &e.kinds);
    let recorder = (!found.power.is_empty()).then(|| crate::energy::live::Recorder::start(found.power, e.period));
    let clock = crate::runtime::Clock::new();
    let idle_from = clock.utc_now();
    std::thread::sleep(a.hold);
    let idle_to = clock.utc_now();
    let mut done: Vec<(ProbeReport, RunResult, u32, f64, u64)> = Vec::new();
    let mut max_iops = Vec::new();
    for &b in &a.patterns {
        // Maximum at queue depth 1, no pauses: the 100 % reference.
        let (_, cal) = run_pattern(&target, a, b, 0, 512)?;
        let max = cal.iops.max(1.0);
        max_iops.push((b.as_str().to_string(), max));
        for &pct in &a.levels {
            let rate = max * f64::from(pct) / 100.0;
            let pause_us = ((1e6 / rate) - cal.mean_us).max(0.0) as u64;
            let count = (rate * a.hold.as_secs_f64()).ceil() as u64;
            let (report, r) = run_pattern(&target, a, b, pause_us, count)?;
            done.push((report, r, pct, rate, pause_us));
        }
    }
    std::thread::sleep(e.tail.min(a.hold));
    let zones = recorder.map(|r| r.stop()).unwrap_or_default();
    let zone = crate::energy::live::pick(&zones, e.zone.as_deref());
    let series = zone.and_then(|z| z.series());
    let energy_note = match (&zone, &series) {
        (Some(_), Some(_)) => String::new(),
        _ => "no power source recorded: levels have no power, and no proportionality can be computed".to_string(),
    };
    let idle_w = series.as_ref().and_then(|s| {
        wattflip_energy::Baseline::from_window(s, UnixNanos(idle_from), UnixNanos(idle_to), 3).ok().map(|b| b.median.0)
    });
    let mut runs = Vec::new();
    let mut levels = Vec::new();
    for (report, r, pct, rate, pause_us) in &done {
        let device = convert::device_tag(report);
        let Some(mut p) = convert::probe_run(report, r, &device, None) else { continue };
        let (start, end) = (i64::try_from(r.start_ns).unwrap_or(i64::MAX), i64::try_from(r.end_ns).unwrap_or(i64::MAX));
        let secs = (end - start) as f64 / 1e9;
        // Mean of the readings inside the level: the recorder's grid is uniform, and a level is
        // long, so the mean reading is the level's power without partial-interval edge errors.
        let level_w = series.as_ref().and_then(|s| {
            let ps = s.powers_between(UnixNanos(start), UnixNanos(end));
            (!ps.is_empty()).then(|| ps.iter().map(|w| w.0).sum::<f64>() / ps.len() as f64)
        });
        let energy = level_w.map(|w| w * secs);
        p.run_id = format!("{}-{}", done[0].0.started_ns, runs.len());
        p.bench = "load_ladder".into();
        p.experiment = format!("load_ladder/{}", r.pattern);
        p.varying = "load_pct".into();
        p.value = f64::from(*pct);
        p.parameters.insert("target_iops".into(), format!("{rate:.1}"));
        if let Some(z) = zone {
            // Tells the collector whether the energy is the drive's own or the whole platform's.
            p.parameters.insert("energy_scope".into(), z.scope.clone());
        }
        p.energy_j = energy;
        p.idle_baseline_w = idle_w;
        p.energy_source = zone.map(|z| z.label()).unwrap_or_default();
        levels.push(LevelResult {
            pattern: r.pattern.clone(),
            load_pct: *pct,
            target_iops: *rate,
            pause_io_us: *pause_us,
            iops: r.iops,
            mean_us: r.mean_us,
            watts: level_w,
        });
        runs.push(p);
    }
    Ok(Ladder { runs, levels, idle_w, max_iops, energy_note })
}

/// The ladder as a table.
pub fn table(l: &Ladder) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for (p, m) in &l.max_iops {
        let _ = writeln!(s, "{p}: maximum {m:.0} IOPS at queue depth 1");
    }
    match l.idle_w {
        Some(w) => {
            let _ = writeln!(s, "active idle: {w:.3} W");
        }
        None => {
            let _ = writeln!(s, "active idle: not measured ({})", l.energy_note);
        }
    }
    let _ = writeln!(s, "{:<8} {:>6} {:>12} {:>10} {:>10} {:>10} {:>9}", "pattern", "load", "target IOPS", "pause µs", "IOPS", "mean µs", "W");
    for v in &l.levels {
        let w = v.watts.map(|w| format!("{w:.3}")).unwrap_or_else(|| "-".into());
        let _ = writeln!(s, "{:<8} {:>5}% {:>12.0} {:>10} {:>10.0} {:>10.1} {:>9}", v.pattern, v.load_pct, v.target_iops, v.pause_io_us, v.iops, v.mean_us, w);
    }
    s
}
