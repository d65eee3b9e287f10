//! `--pause auto`: the pause between two runs chosen per run from measured background tails, the
//! energy paper's suggestion (Björling et al. 2010, §"Energy profiles reveal interferences": "minimal
//! pause for read runs, pause depending on the nature of the run" for write runs; docs/uflip-method.md §11.6).
//! The rule and its parameters are documented in `docs/energy-method.md` (§"Pauses from measured
//! tails").
//!
//! Tails come from two places: the store of earlier probes of the same target,
//! `<out>/tails/<key>.json`, keyed like the calibration store (`calibration.rs`: a block device's
//! serial/wwid/`loop:<file>`, a file's canonical path) so one device's tails never set another's
//! pauses; and, when power is recorded live, the runs of the running probe itself, analysed as soon
//! as their tail has ended (the next run started). The newer measurement of an (experiment, value)
//! replaces the older one. A new source of tails only has to produce a [`Tails`].

use super::calibration::{key_of_info, key_of_path, keyed_path};
use super::ProbeCmdError;
use crate::energy::live::LivePower;
use crate::energy::ProbeEnergy;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use wattflip_energy::{
    analyze_next_run, recommend_pause, recommend_pause_for_value, BackgroundObservation, Baseline, IoMix, Joules, Nanos, PauseConfig, PreviousRun,
    RunDetectConfig, RunInfo, TimeBase, UnixNanos, ValueRuns,
};
use wattflip_uflip::{Pause, RunResult, RunSpec, RunStatus, TargetInfo};

/// The folder of per-target tails inside a result folder.
pub const TAILS_DIR: &str = "tails";

/// Measured background tails of one target: experiment → its values, each with the observations of
/// its repetitions.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tails {
    pub experiments: BTreeMap<String, Vec<ValueRuns>>,
}

impl Tails {
    /// The tails of a probe's energy records.
    pub fn from_energy(e: &ProbeEnergy) -> Tails {
        let mut t = Tails::default();
        for r in e.runs.iter().filter(|r| r.background_s.is_finite() && r.background_s >= 0.0) {
            let obs =
                BackgroundObservation { duration: Nanos::from_secs_f64(r.background_s), energy: Joules(r.background_energy_j), run_energy: Joules(r.energy_j) };
            t.add(&r.experiment, r.value, obs);
        }
        t
    }

    /// Adds one repetition's observation to (`experiment`, `value`).
    pub fn add(&mut self, experiment: &str, value: f64, obs: BackgroundObservation) {
        let values = self.experiments.entry(experiment.to_string()).or_default();
        match values.iter_mut().find(|v| v.value == value) {
            Some(v) => v.runs.push(obs),
            None => values.push(ValueRuns { value, runs: vec![obs] }),
        }
    }

    /// These tails with every (experiment, value) that `newer` measured replaced by its measurement.
    pub fn overlay(&self, newer: &Tails) -> Tails {
        let mut t = self.clone();
        for (exp, values) in &newer.experiments {
            let mine = t.experiments.entry(exp.clone()).or_default();
            for v in values {
                mine.retain(|m| m.value != v.value);
                mine.push(v.clone());
            }
        }
        t
    }
}

/// The tails of one target as stored in `<out>/tails/`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredTails {
    /// The store key (see the module docs).
    pub key: String,
    /// The target as the report named it (its path), for people reading the file.
    pub target: String,
    pub tails: Tails,
}

/// Where the tails of `key` live in `out`.
pub fn tails_path(out: &Path, key: &str) -> PathBuf {
    keyed_path(out, TAILS_DIR, key)
}

/// The stored tails of the target at `target` in `out`, with their file; `None` when that target
/// has none (another target's tails are never returned).
pub fn stored_tails(out: &Path, target: &Path) -> Option<(Tails, PathBuf)> {
    let key = key_of_path(target);
    let path = tails_path(out, &key);
    let s: StoredTails = serde_json::from_str(&std::fs::read_to_string(&path).ok()?).ok()?;
    (s.key == key).then_some((s.tails, path))
}

/// Merges the tails of `energy` (a probe of `target`) into that target's store in `out`: the new
/// measurement of an (experiment, value) replaces the stored one. Replaced by a rename, so a probe
/// reading it concurrently sees the old or the new file. Returns the file.
pub fn store_tails(out: &Path, target: &TargetInfo, energy: &ProbeEnergy) -> Result<PathBuf, ProbeCmdError> {
    let key = key_of_info(target);
    let path = tails_path(out, &key);
    let old = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| serde_json::from_str::<StoredTails>(&s).ok())
        .filter(|s| s.key == key)
        .map(|s| s.tails)
        .unwrap_or_default();
    let stored = StoredTails { key, target: target.path.display().to_string(), tails: old.overlay(&Tails::from_energy(energy)) };
    let dir = path.parent().unwrap_or(out);
    std::fs::create_dir_all(dir).map_err(|e| ProbeCmdError::Output { path: dir.to_owned(), source: e })?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&stored).unwrap_or_default()).map_err(|e| ProbeCmdError::Output { path: tmp.clone(), source: e })?;
    std::fs::rename(&tmp, &path).map_err(|e| ProbeCmdError::Output { path: path.clone(), source: e })?;
    Ok(path)
}

/// Where a chosen pause came from (recorded as the next run's `pause_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseSource {
    /// The previous run only read: P_min (reads leave no pattern-dependent background work, §11.5).
    ReadOnly,
    /// The tail measured for the previous run's experiment and value.
    Measured,
    /// That value was not measured: the tail of the nearest measured value of the experiment,
    /// when the value lies between two measured ones.
    Nearest,
    /// Outside the measured values: the experiment's longest tail.
    Experiment,
    /// Nothing measured for the experiment: the configured fixed pause.
    Fallback,
}

impl PauseSource {
    pub fn as_str(self) -> &'static str {
        match self {
            PauseSource::ReadOnly => "read_only",
            PauseSource::Measured => "measured",
            PauseSource::Nearest => "nearest",
            PauseSource::Experiment => "experiment",
            PauseSource::Fallback => "fallback",
        }
    }
}

/// The rule's parameters: §11.6's `PauseConfig` (P_min, factor, return-to-idle) and the fixed
/// pause used when the experiment has no measured tail.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PauseRule {
    pub cfg: PauseConfig,
    pub fallback: Duration,
}

impl PauseRule {
    /// The pause after a run of (`experiment`, `value`) that `writes` or not, from `tails`.
    pub fn choose(&self, tails: &Tails, experiment: &str, value: f64, writes: bool) -> (Duration, PauseSource) {
        let d = |n: Nanos| Duration::from_nanos(n.0);
        if !writes {
            return (d(recommend_pause(Nanos(0), IoMix::ReadOnly, &self.cfg)), PauseSource::ReadOnly);
        }
        let for_value = |runs: &[BackgroundObservation]| d(recommend_pause_for_value(runs, IoMix::WithWrites, &self.cfg));
        let values: Vec<&ValueRuns> = tails.experiments.get(experiment).into_iter().flatten().filter(|v| !v.runs.is_empty()).collect();
        if let Some(v) = values.iter().find(|v| v.value == value) {
            return (for_value(&v.runs), PauseSource::Measured);
        }
        // Between two measured values the nearest one stands in (equally near: the longer pause).
        // Beyond the measured range a neighbour would be an extrapolation, and a tail that grows
        // with the parameter (GWP, Table 2) would be underestimated: the experiment's longest.
        let below = values.iter().filter(|v| v.value < value).max_by(|a, b| a.value.total_cmp(&b.value));
        let above = values.iter().filter(|v| v.value > value).min_by(|a, b| a.value.total_cmp(&b.value));
        if let (Some(lo), Some(hi)) = (below, above) {
            let (dl, dh) = (value - lo.value, hi.value - value);
            let p = if dl < dh {
                for_value(&lo.runs)
            } else if dh < dl {
                for_value(&hi.runs)
            } else {
                for_value(&lo.runs).max(for_value(&hi.runs))
            };
            return (p, PauseSource::Nearest);
        }
        if !values.is_empty() {
            let all: Vec<BackgroundObservation> = values.iter().flat_map(|v| v.runs.iter().copied()).collect();
            return (for_value(&all), PauseSource::Experiment);
        }
        (self.fallback, PauseSource::Fallback)
    }
}

/// What the planner keeps of a finished run.
#[derive(Debug, Clone, PartialEq)]
pub struct DoneRun {
    pub experiment: String,
    pub value: f64,
    pub writes: bool,
    /// Completed normally (an unsupported run did no IO and has no tail).
    pub ok: bool,
    pub start_ns: u64,
    pub end_ns: u64,
    pub bytes: u64,
    pub ios: u64,
}

impl DoneRun {
    pub fn of(spec: &RunSpec, r: &RunResult) -> DoneRun {
        DoneRun {
            experiment: spec.experiment.clone(),
            value: spec.value,
            writes: spec.writes(),
            ok: r.status == RunStatus::Ok,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            bytes: r.io_count.saturating_mul(r.io_size_bytes),
            ios: r.io_count,
        }
    }
}

/// Power recorded live during the probe, to measure its runs' tails as they end.
pub struct LiveTails {
    pub power: LivePower,
    /// The zone to attribute power to (`--power-zone`), as for the probe's energy.
    pub prefer: Option<String>,
    /// The idle window recorded before the first run: the baseline of every run, as in the
    /// probe's own energy analysis.
    pub idle: Duration,
    /// The idle window as recorded (UTC ns), when the probe measured it on its own (after the
    /// target was prepared and settled); otherwise the `idle` before the first run.
    pub window: Option<(i64, i64)>,
    pub detect: RunDetectConfig,
    baseline: Option<Baseline>,
    analysed: usize,
    /// The last analysed run, which bounds the next one (as in the probe's own analysis).
    previous: Option<PreviousRun>,
}

impl LiveTails {
    pub fn new(power: LivePower, prefer: Option<String>, idle: Duration) -> LiveTails {
        LiveTails { power, prefer, idle, window: None, detect: crate::energy::live_detect_config(), baseline: None, analysed: 0, previous: None }
    }

    /// Analyses every run of `done` whose tail has ended (a later run has started) and was not
    /// analysed yet, adding its tail to `into`.
    fn update(&mut self, done: &[DoneRun], into: &mut Tails) {
        let ns = |t: u64| UnixNanos(i64::try_from(t).unwrap_or(i64::MAX));
        let Some(first) = done.first() else {
            return;
        };
        if self.baseline.is_none() {
            let before_first = ns(first.start_ns).0;
            let (from, to) = self.window.unwrap_or((before_first - i64::try_from(self.idle.as_nanos()).unwrap_or(0), before_first));
            let (from, to) = (UnixNanos(from), UnixNanos(to));
            self.baseline = self.power.since(self.prefer.as_deref(), from.0).and_then(|s| Baseline::from_window(&s, from, to, 3).ok());
        }
        let Some(baseline) = &self.baseline else {
            return;
        };
        // A counter zone's levels are averaged: the end refinement must know over how long.
        self.detect.level_span = wattflip_energy::Nanos(u64::try_from(self.power.level_span_ns(self.prefer.as_deref())).unwrap_or(0));
        while self.analysed + 1 < done.len() {
            let (r, next) = (&done[self.analysed], &done[self.analysed + 1]);
            self.analysed += 1;
            if !r.ok {
                continue;
            }
            let from = ns(r.start_ns).0 - i64::try_from(self.detect.start_slack.0.saturating_mul(2)).unwrap_or(0);
            let Some(series) = self.power.since(self.prefer.as_deref(), from) else {
                continue;
            };
            let info = RunInfo {
                first_submit: ns(r.start_ns),
                last_complete: ns(r.end_ns),
                bytes: r.bytes,
                ios: r.ios,
                next_run_start: Some(ns(next.start_ns)),
                datasheet_active: None,
            };
            // One step of the probe's analysis (energy crate `analyze_probe`): bounded by the run
            // before it and by the next run's first IO, a cut tail split there.
            let res = analyze_next_run(&series, &info, self.previous, Some(baseline), &self.detect, TimeBase::Shared);
            self.previous = Some(PreviousRun::of(&info, &res));
            if let Ok(e) = res {
                into.add(&r.experiment, r.value, BackgroundObservation::from(&e));
            }
        }
    }
}

/// Chooses each pause of one probe: [`PauseRule`] over the target's stored tails overlaid with the
/// tails measured so far in this probe.
pub struct PausePlanner {
    pub rule: PauseRule,
    stored: Tails,
    live: Option<LiveTails>,
    measured: Tails,
    done: Vec<DoneRun>,
}

impl PausePlanner {
    pub fn new(rule: PauseRule, stored: Tails, live: Option<LiveTails>) -> PausePlanner {
        PausePlanner { rule, stored, live, measured: Tails::default(), done: Vec::new() }
    }

    /// The pause after `run` (just finished), before the next run.
    pub fn after(&mut self, run: DoneRun) -> Pause {
        self.done.push(run);
        if let Some(l) = &mut self.live {
            l.update(&self.done, &mut self.measured);
        }
        let tails = self.stored.overlay(&self.measured);
        let r = &self.done[self.done.len() - 1];
        let (duration, source) = self.rule.choose(&tails, &r.experiment, r.value, r.writes);
        Pause { duration, source: source.as_str().into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::energy::live::ZoneSeries;

    fn obs(ms: u64) -> BackgroundObservation {
        BackgroundObservation { duration: Nanos::from_millis(ms), energy: Joules(0.1), run_energy: Joules(1.0) }
    }

    fn tails(list: &[(&str, f64, &[u64])]) -> Tails {
        let mut t = Tails::default();
        for (exp, v, ms) in list {
            for &m in *ms {
                t.add(exp, *v, obs(m));
            }
        }
        t
    }

    fn rule() -> PauseRule {
        PauseRule { cfg: PauseConfig::default(), fallback: Duration::from_millis(10) }
    }

    fn ms(d: u64) -> Duration {
        Duration::from_millis(d)
    }

    #[test]
    fn the_rule_per_run_reads_value_nearest_experiment_fallback() {
        // granularity/SW: 4 KiB tails 200/300/250 ms, 32 KiB 400 ms, 128 KiB 1000 ms.
        let t = tails(&[
            ("granularity/SW", 4096.0, &[200, 300, 250]),
            ("granularity/SW", 32768.0, &[400]),
            ("granularity/SW", 131072.0, &[1000]),
            ("granularity/RW", 4096.0, &[20]),
            ("granularity/SR", 4096.0, &[900]),
        ]);
        let r = rule();
        let c = |exp: &str, v: f64, w: bool| r.choose(&t, exp, v, w);
        // After a read run: P_min (100 ms), even with a tail on record.
        assert_eq!(c("granularity/SR", 4096.0, false), (ms(100), PauseSource::ReadOnly));
        // The value's own tail: 1.5 × the longest repetition (300 ms).
        assert_eq!(c("granularity/SW", 4096.0, true), (ms(450), PauseSource::Measured));
        assert_eq!(c("granularity/SW", 131072.0, true), (ms(1500), PauseSource::Measured));
        // A short tail: P_min wins over 1.5 × 20 ms.
        assert_eq!(c("granularity/RW", 4096.0, true), (ms(100), PauseSource::Measured));
        // 8 KiB: nearer 4 KiB (4 KiB away) than 32 KiB (24 KiB away).
        assert_eq!(c("granularity/SW", 8192.0, true), (ms(450), PauseSource::Nearest));
        // 100 KiB: nearer 128 KiB.
        assert_eq!(c("granularity/SW", 102400.0, true), (ms(1500), PauseSource::Nearest));
        // Equally near 4 KiB and 32 KiB (18 KiB): the longer, 32 KiB's 600 ms.
        assert_eq!(c("granularity/SW", 18432.0, true), (ms(600), PauseSource::Nearest));
        // Beyond the measured range, either side: the experiment's longest tail, 1000 ms.
        assert_eq!(c("granularity/SW", 512.0, true), (ms(1500), PauseSource::Experiment));
        assert_eq!(c("granularity/SW", 524288.0, true), (ms(1500), PauseSource::Experiment));
        // An experiment without tails: the configured fixed pause, as is.
        assert_eq!(c("alignment/SW", 4096.0, true), (ms(10), PauseSource::Fallback));
    }

    #[test]
    fn stored_tails_are_per_target() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let (a, b) = (dir.path().join("a.dat"), dir.path().join("b.dat"));
        std::fs::write(&a, b"").unwrap();
        std::fs::write(&b, b"").unwrap();
        let info = |p: &Path| TargetInfo {
            path: p.to_owned(),
            device: None,
            kind: wattflip_uflip::TargetKind::File,
            size: 0,
            logical_block_size: 512,
            model: None,
            serial: None,
            firmware: None,
            identity: None,
        };
        let rec = |exp: &str, value: f64, bg: f64| crate::energy::RunEnergyRecord {
            run_id: 0,
            experiment: exp.into(),
            value,
            repetition: 0,
            source: "hwmon:x".into(),
            energy_j: 2.0,
            energy_above_idle_j: 1.0,
            background_energy_j: 0.5,
            background_s: bg,
            idle_baseline_w: 1.0,
            mean_w: 3.0,
            j_per_mib: None,
            j_per_io: None,
            datasheet_ratio: None,
            start_found: "Threshold".into(),
            end_found: "ReturnedToIdle".into(),
            trace_start_ns: None,
            trace_end_ns: None,
            idle_spread_w: None,
            idle_band_w: None,
            coverage: None,
            low_confidence: false,
            low_confidence_reason: None,
            idle_unknown: false,
            energy_u95_j: None,
            energy_above_idle_u95_j: None,
            background_u95_j: None,
            idle_u95_w: None,
            j_per_mib_u95: None,
            tail_cut: false,
            gap_samples: 0,
            baseline_source: "idle_window".into(),
            background_class: "S".into(),
        };
        let energy = |runs| ProbeEnergy { runs, ..Default::default() };
        // A has a 2 s tail for SW 4 KiB; B, probed into the same folder, 0.1 s.
        store_tails(&out, &info(&a), &energy(vec![rec("granularity/SW", 4096.0, 2.0), rec("granularity/SW", 32768.0, 0.4)])).unwrap();
        store_tails(&out, &info(&b), &energy(vec![rec("granularity/SW", 4096.0, 0.1)])).unwrap();
        // A later probe of A replaces 4 KiB and keeps 32 KiB.
        store_tails(&out, &info(&a), &energy(vec![rec("granularity/SW", 4096.0, 1.0)])).unwrap();
        let (ta, from) = stored_tails(&out, &a).unwrap();
        assert_eq!(from, tails_path(&out, &key_of_path(&a)));
        let (tb, _) = stored_tails(&out, &b).unwrap();
        let c = dir.path().join("c.dat");
        std::fs::write(&c, b"").unwrap();
        assert_eq!(stored_tails(&out, &c), None, "an unprobed target gets nobody's tails");
        let r = rule();
        assert_eq!(r.choose(&ta, "granularity/SW", 4096.0, true), (ms(1500), PauseSource::Measured));
        assert_eq!(r.choose(&ta, "granularity/SW", 32768.0, true), (ms(600), PauseSource::Measured));
        assert_eq!(r.choose(&tb, "granularity/SW", 4096.0, true), (ms(150), PauseSource::Measured));
        assert_eq!(r.choose(&tb, "granularity/SW", 32768.0, true), (ms(150), PauseSource::Experiment));
    }

    /// A 1 kHz drive-rail trace: 1 W idle, 3 W while a run does IO, 2 W during a write run's tail.
    /// Instantaneous readings, half a millisecond off the whole milliseconds where the power
    /// changes: each reading stands for the power up to halfway to its neighbours, so the changes
    /// land exactly where they happened.
    fn rail(t0: i64, runs: &[(i64, i64, i64)], total_ms: i64) -> LivePower {
        let (mut t, mut w) = (Vec::new(), Vec::new());
        for i in 0..total_ms {
            let now = t0 + i * 1_000_000 + 500_000;
            let p = runs
                .iter()
                .find_map(|&(s, e, tail)| {
                    if now >= s && now < e {
                        Some(3.0)
                    } else if now >= e && now < e + tail {
                        Some(2.0)
                    } else {
                        None
                    }
                })
                .unwrap_or(1.0);
            t.push(now);
            w.push(p);
        }
        let n = t.len();
        LivePower::from_zones(vec![ZoneSeries {
            source: "hwmon".into(),
            zone: "ina226/power1".into(),
            scope: "rail".into(),
            t,
            watts: w,
            interval_ns: vec![0; n],
            ..Default::default()
        }])
    }

    #[test]
    fn within_a_probe_the_tails_measured_so_far_set_the_next_pauses() {
        let t0 = 1_800_000_000_000_000_000i64;
        let ms_ns = 1_000_000i64;
        // Runs of 100 ms, 1 s apart, after a 1 s idle window: SR 4 KiB, then SW 4 KiB ×3 (tail
        // 200 ms), then SW 8 KiB ×2 (tail 400 ms).
        let plan: Vec<(&str, f64, bool, i64)> = vec![
            ("granularity/SR", 4096.0, false, 0),
            ("granularity/SW", 4096.0, true, 200),
            ("granularity/SW", 4096.0, true, 200),
            ("granularity/SW", 4096.0, true, 200),
            ("granularity/SW", 8192.0, true, 400),
            ("granularity/SW", 8192.0, true, 400),
        ];
        let windows: Vec<(i64, i64, i64)> = plan
            .iter()
            .enumerate()
            .map(|(k, p)| (t0 + 1000 * ms_ns + k as i64 * 1000 * ms_ns, t0 + 1100 * ms_ns + k as i64 * 1000 * ms_ns, p.3 * ms_ns))
            .collect();
        let power = rail(t0, &windows, 1000 + 1000 * plan.len() as i64);
        let live = LiveTails::new(power, None, Duration::from_secs(1));
        // A stored (older) tail of 8 KiB, 1 s: used until this probe measures 8 KiB itself.
        let stored = tails(&[("granularity/SW", 8192.0, &[1000])]);
        let mut p = PausePlanner::new(rule(), stored, Some(live));
        let got: Vec<(u128, String)> = plan
            .iter()
            .zip(&windows)
            .map(|(r, w)| {
                let done = DoneRun { experiment: r.0.into(), value: r.1, writes: r.2, ok: true, start_ns: w.0 as u64, end_ns: w.1 as u64, bytes: 4096, ios: 1 };
                let c = p.after(done);
                (c.duration.as_millis(), c.source)
            })
            .collect();
        let want: Vec<(u128, String)> = [
            // after SR: a read
            (100, "read_only"),
            // after the first SW 4 KiB: its own tail is not over yet and 4 KiB was never measured;
            // below the measured range (the stored 8 KiB): the experiment's longest, 1 s → 1.5 s
            (1500, "experiment"),
            // after the second: the first one's 200 ms tail is measured → 300 ms
            (300, "measured"),
            (300, "measured"),
            // after the first 8 KiB: only the stored 1 s tail of 8 KiB → 1.5 s
            (1500, "measured"),
            // after the second 8 KiB: the first 8 KiB run's 400 ms replaces the stored tail → 600 ms
            (600, "measured"),
        ]
        .iter()
        .map(|&(d, s)| (d, s.to_string()))
        .collect();
        assert_eq!(got, want);
    }
}
