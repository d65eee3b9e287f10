//! The load ladder (SPECpower-style graduated load for storage): active idle, then a random read
//! and a random write pattern rate-limited to 10, 20 … 100 % of the device's measured maximum IOPS,
//! each level held long enough for stable power, with power recorded throughout. uFLIP has no rate
//! limit, but its Pause micro-benchmark has PauseIO, a busy-wait after every IO: at queue depth 1,
//! a pause of 1/rate − mean latency gives the target rate. Each level becomes a `probe_run` with
//! `bench = load_ladder`, `varying = load_pct`, its energy and the active-idle power, from which
//! the collector computes energy proportionality (EP, dynamic range, gaps).
//!
//! A read/write mix (`--ladder-mix 70`) climbs a third ladder on uFLIP's Mix pattern `mix/RR-RW`:
//! its integer ratio interleaves RR and RW IOs (ratio r ≥ 0: every (r+1)-th IO is RW; r < 0:
//! every (|r|+1)-th IO is RR), so the requested read share is rounded to the nearest one the
//! model can express (70 % → 2 RR : 1 RW, 66.7 % reads), and the share used is recorded.

use super::{convert, open_target, EnergyOptions, Host, ProbeCmdError};
use crate::energy::interval::energy_u95;
use crate::energy::live::ZoneSeries;
use crate::energy::{source, uncertain};
use std::path::PathBuf;
use std::time::Duration;
use wattflip_energy::{Nanos, UnixNanos};
use wattflip_proto::v1;
use wattflip_uflip::{self as uflip, Baseline, Bench, NullObserver, PlanOptions, ProbeReport, RunResult};

/// What one ladder climbs: a baseline pattern, or uFLIP's Mix of RR and RW.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    Pattern(Baseline),
    /// `mix/RR-RW` with this signed uFLIP ratio.
    Mix {
        ratio: i64,
    },
}

/// Read share (%) of uFLIP's `mix/RR-RW` with `ratio`: r ≥ 1 gives r RR per RW, r ≤ −1 one RR
/// per |r| RW (the share over a run whose IO count is a multiple of |r| + 1).
pub fn mix_read_pct(ratio: i64) -> f64 {
    let r = ratio.unsigned_abs() as f64;
    if ratio >= 0 {
        100.0 * r / (r + 1.0)
    } else {
        100.0 / (r + 1.0)
    }
}

/// The uFLIP Mix ratio whose read share is closest to `read_pct` (1 … 99), and that share.
/// Ratio 0 (all RW) is never chosen: a mix has both. Ties go to the smaller |ratio| (the shorter
/// interleaving period), positive first.
pub fn mix_ratio(read_pct: u32) -> Result<(i64, f64), String> {
    if !(1..=99).contains(&read_pct) {
        return Err(format!("--ladder-mix {read_pct}: a read percentage in 1..=99 (0 and 100 are the RW and RR ladders)"));
    }
    let want = f64::from(read_pct);
    let mut best = (1, mix_read_pct(1));
    for r in (1..=99i64).flat_map(|r| [r, -r]) {
        let got = mix_read_pct(r);
        if (got - want).abs() < (best.1 - want).abs() {
            best = (r, got);
        }
    }
    Ok(best)
}

#[derive(Debug, Clone)]
pub struct LadderArgs {
    pub target: PathBuf,
    pub size: u64,
    pub destroy_consent: Vec<String>,
    pub patterns: Vec<Baseline>,
    /// An RR/RW Mix ladder after the patterns' ones: the uFLIP ratio (see [`mix_ratio`]).
    pub mix_ratio: Option<i64>,
    pub io_size: u64,
    /// Load levels in percent of the measured maximum IOPS.
    pub levels: Vec<u32>,
    pub hold: Duration,
    pub seed: u64,
    /// Set on a signal: the ladder stops between two IOs (or in its idle window) and keeps the
    /// levels it completed ([`Ladder::interrupted`]).
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
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
    /// Stopped by `LadderArgs::stop` before its last level: `levels` are the completed ones.
    pub interrupted: bool,
}

/// The one-run plan of a level: a Pause run of the pattern, or the Mix run `mix/RR-RW` at the
/// ladder's ratio with the same PauseIO after every IO (uFLIP's Mix has no pause of its own).
pub fn level_plan(device_size: u64, a: &LadderArgs, load: Load, pause_us: u64, count: u64) -> uflip::Plan {
    let mut o = PlanOptions::small(device_size);
    o.repetitions = 1;
    o.seed = a.seed;
    o.io_size = a.io_size;
    o.pause_between_runs = Duration::ZERO;
    let keep = |r: &uflip::RunSpec| match load {
        Load::Pattern(b) => r.pattern == b.as_str(),
        Load::Mix { .. } => r.experiment == "mix/RR-RW",
    };
    match load {
        Load::Pattern(b) => {
            o.benches = vec![Bench::Pause];
            o.values.pause_io_us = vec![pause_us];
            o.counts.io_count[b.index()] = count.max(16);
            o.counts.ignore_io[b.index()] = 0;
        }
        Load::Mix { ratio } => {
            o.benches = vec![Bench::Mix];
            o.values.mix_ratios = vec![ratio];
            for b in [Baseline::RR, Baseline::RW] {
                o.counts.io_count[b.index()] = count.max(16);
                o.counts.ignore_io[b.index()] = 0;
            }
        }
    }
    let mut plan = uflip::plan(&o);
    plan.runs.retain(keep);
    for (i, r) in plan.runs.iter_mut().enumerate() {
        r.index = i;
        if let uflip::Work::Pattern(specs) = &mut r.work {
            for s in specs {
                s.pause_io_us = pause_us;
            }
        }
    }
    plan
}

/// One level's run; `None` when `a.stop` stopped it (the level is abandoned).
fn run_level(target: &uflip::Target, a: &LadderArgs, load: Load, pause_us: u64, count: u64) -> Result<Option<(ProbeReport, RunResult)>, ProbeCmdError> {
    let plan = level_plan(target.size, a, load, pause_us, count);
    let report = match super::run_plan(target, &plan, &mut NullObserver, a.stop.as_deref()) {
        Err(uflip::ProbeError::Interrupted(_)) => return Ok(None),
        r => r?,
    };
    let run = report
        .runs
        .first()
        .cloned()
        .ok_or_else(|| ProbeCmdError::Output { path: a.target.clone(), source: std::io::Error::other(format!("the ladder plan has no {load:?} run")) })?;
    Ok(Some((report, run)))
}

/// One level as measured: its report, run, percentage, target IOPS, pause and load.
type Level = (ProbeReport, RunResult, u32, f64, u64, Load);

/// Each load's name and maximum IOPS (the 100 % reference).
type MaxIops = Vec<(String, f64)>;

/// Climbs every load: its maximum at queue depth 1 (the 100 % reference), then each level. Returns
/// the completed levels, each load's maximum IOPS and whether `a.stop` stopped the climb.
fn climb(target: &wattflip_uflip::Target, a: &LadderArgs) -> Result<(Vec<Level>, MaxIops, bool), ProbeCmdError> {
    let mut done: Vec<Level> = Vec::new();
    let mut max_iops = Vec::new();
    let loads = a.patterns.iter().map(|&b| Load::Pattern(b)).chain(a.mix_ratio.map(|ratio| Load::Mix { ratio }));
    for load in loads {
        // Maximum at queue depth 1, no pauses: the 100 % reference.
        let Some((_, cal)) = run_level(target, a, load, 0, 512)? else { return Ok((done, max_iops, true)) };
        let max = cal.iops.max(1.0);
        let label = match load {
            Load::Pattern(b) => b.as_str().to_string(),
            Load::Mix { ratio } => format!("MIX (RR-RW ratio {ratio}, {:.1} % reads)", mix_read_pct(ratio)),
        };
        max_iops.push((label, max));
        for &pct in &a.levels {
            let rate = max * f64::from(pct) / 100.0;
            let pause_us = ((1e6 / rate) - cal.mean_us).max(0.0) as u64;
            let count = (rate * a.hold.as_secs_f64()).ceil() as u64;
            let Some((report, r)) = run_level(target, a, load, pause_us, count)? else { return Ok((done, max_iops, true)) };
            tracing::info!("ladder level {} completed: {} at {pct} %", done.len() + 1, r.pattern);
            done.push((report, r, pct, rate, pause_us, load));
        }
    }
    Ok((done, max_iops, false))
}

/// Runs the ladder on `a.target`, recording power from the host's sources (`e`).
pub fn run(a: &LadderArgs, e: &EnergyOptions, host: &Host) -> Result<Ladder, ProbeCmdError> {
    let clock = host.clock;
    let target = open_target(&a.target, a.size, &a.destroy_consent)?;
    let found = crate::sensors::discover_all(&e.sysfs_root, &e.kinds, &host.runner);
    let recorder = (!found.power.is_empty()).then(|| crate::energy::live::PowerRecorder::start(found.power, e.period, clock));
    let idle_from = clock.utc_now();
    let stopped_idle = super::sleep_unless_stopped(a.hold, a.stop.as_deref());
    let idle_to = clock.utc_now();
    let (done, max_iops, interrupted) = if stopped_idle { (Vec::new(), Vec::new(), true) } else { climb(&target, a)? };
    if !interrupted {
        std::thread::sleep(e.tail.min(a.hold));
    }
    let zones = recorder.map(|r| r.stop()).unwrap_or_default();
    let zone = crate::energy::live::pick(&zones, e.zone.as_deref());
    let series = zone.and_then(|z| z.series());
    let energy_note = match (&zone, &series) {
        (Some(_), Some(_)) => String::new(),
        _ => "no power source recorded: levels have no power, and no proportionality can be computed".to_string(),
    };
    let idle = series.as_ref().and_then(|s| wattflip_energy::Baseline::from_window(s, UnixNanos(idle_from), UnixNanos(idle_to), 3).ok());
    let idle_w = idle.as_ref().map(|b| b.median.0);
    let idle_u95 = zone.zip(idle.as_ref()).map(|(z, b)| idle_half_width(z, b, idle_from, idle_to));
    let mut runs = Vec::new();
    let mut levels = Vec::new();
    for (report, r, pct, rate, pause_us, load) in &done {
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
        if let Load::Mix { ratio } = load {
            p.parameters.insert("mix_ratio".into(), ratio.to_string());
            p.parameters.insert("read_pct".into(), format!("{:.3}", mix_read_pct(*ratio)));
        }
        if let Some(z) = zone {
            // Tells the collector whether the energy is the drive's own or the whole platform's.
            p.parameters.insert("energy_scope".into(), z.scope.clone());
        }
        p.energy_j = energy;
        // The level as a steady interval of the source (the efficiency preset's model).
        p.energy_u95_j = match (zone, &series, energy) {
            (Some(z), Some(s), Some(_)) => energy_u95(z, s, start, end).map(|j| j.0),
            _ => None,
        };
        p.idle_baseline_w = idle_w;
        p.idle_u95_w = idle_u95;
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
    Ok(Ladder { runs, levels, idle_w, max_iops, energy_note, interrupted })
}

/// The 95 % half-width of the idle baseline `b` measured over `[from, to)` of `z`: the energy
/// model's idle term (`docs/energy-method.md` §9), its noise the window's spread.
fn idle_half_width(z: &ZoneSeries, b: &wattflip_energy::Baseline, from: i64, to: i64) -> f64 {
    let facts = source::resolve(z, None, from, to);
    let model = uncertain::model_of_zone(z, &facts, b.spread.0);
    model.idle(b.median, Nanos(u64::try_from(to - from).unwrap_or(0))).u95.0
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> LadderArgs {
        LadderArgs {
            target: "/x".into(),
            size: 64 << 20,
            destroy_consent: vec![],
            patterns: vec![Baseline::RR],
            mix_ratio: None,
            io_size: 4096,
            levels: vec![100],
            hold: Duration::from_millis(100),
            seed: 1,
            stop: None,
        }
    }

    #[test]
    fn read_shares_map_to_the_nearest_uflip_mix_ratio() {
        assert_eq!(mix_ratio(70).unwrap(), (2, 200.0 / 3.0));
        assert_eq!(mix_ratio(75).unwrap(), (3, 75.0));
        assert_eq!(mix_ratio(50).unwrap(), (1, 50.0));
        assert_eq!(mix_ratio(25).unwrap(), (-3, 25.0));
        assert_eq!(mix_ratio(10).unwrap(), (-9, 10.0));
        assert_eq!(mix_ratio(99).unwrap(), (99, 99.0));
        assert!(mix_ratio(0).unwrap_err().contains("--ladder-mix 0"));
        assert!(mix_ratio(100).is_err());
    }

    #[test]
    fn a_mix_level_is_the_uflip_mix_run_with_the_ladder_pause() {
        let plan = level_plan(64 << 20, &args(), Load::Mix { ratio: 2 }, 250, 300);
        assert_eq!(plan.runs.len(), 1);
        let r = &plan.runs[0];
        assert_eq!((r.experiment.as_str(), r.pattern.as_str(), r.index), ("mix/RR-RW", "MIX", 0));
        let uflip::Work::Pattern(specs) = &r.work else { panic!("not a pattern run: {r:?}") };
        let s = &specs[0];
        let mix = s.mix.as_ref().expect("a Mix run");
        assert_eq!((s.baseline, mix.baseline2, mix.ratio, s.pause_io_us, s.io_size), (Baseline::RR, Baseline::RW, 2, 250, 4096));
        // uFLIP's interleaving over the run's IOs (300 + 1 start-up IO): two reads per write.
        assert_eq!((s.io_count, s.ignore_io), (301, 1));
        assert_eq!(wattflip_uflip::plan::mix_split(s.io_count, 2), (200, 101));
        // A plain level: the pattern's Pause run, same pause.
        let plan = level_plan(64 << 20, &args(), Load::Pattern(Baseline::RW), 250, 300);
        let uflip::Work::Pattern(specs) = &plan.runs[0].work else { panic!() };
        assert_eq!((plan.runs.len(), plan.runs[0].pattern.as_str(), specs[0].pause_io_us, specs[0].mix.is_none()), (1, "RW", 250, true));
    }
}
