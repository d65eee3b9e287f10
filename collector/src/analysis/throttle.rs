//! Fleet-wide thermal-throttling detection: a pure, online detector fed with every agent's
//! batches, one state per (host, drive).
//!
//! Rule (issue 5; Zhang et al. in hardware.md §8.2: a self-throttling SSD drops power ~15 % and
//! performance 12–18 % past its threshold): a **thermal trigger** — the composite temperature
//! reaching the drive's warning threshold (WCTEMP from the agent's inventory; its critical
//! threshold CCTEMP for a drive that reports no WCTEMP), the NVMe
//! thermal-management counters (TMT1/TMT2 transition counts and times, warning-temperature time)
//! moving, or critical-warning bit 1 appearing — opens a hot period. While hot, a probe run whose
//! throughput on the same pattern (pattern and IO size) is ≥ [`THROUGHPUT_DROP_PCT`] below its
//! last value before the trigger, or drive power ≥ [`POWER_DROP_PCT`] below its pre-trigger mean,
//! makes it a throttling episode: one [`ThrottleEvent`] at onset (`ongoing`) and one when the
//! trigger clears (same timestamp and tags, so InfluxDB keeps the final version), with onset
//! temperature, the largest drops and the duration. A hot period without a drop is no event.
//!
//! Observations older than the newest already seen for the same stream (a resent batch after a
//! reconnect) are ignored, so resends never duplicate events. To add a trigger or a signal, add an
//! [`Obs`] variant, extract it in [`observations`], and handle it in [`Drive::observe`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use wattflip_proto::domain::Batch;
use wattflip_proto::schema::ThrottleEvent;
use wattflip_proto::v1;

/// Throughput drop that counts as throttling, in % of the pre-trigger value.
pub const THROUGHPUT_DROP_PCT: f64 = 10.0;
/// Power drop that counts as throttling, in % of the pre-trigger mean.
pub const POWER_DROP_PCT: f64 = 10.0;
/// Normal-state power samples averaged into the power baseline.
const POWER_BASELINE_SAMPLES: usize = 10;

/// One observation of one drive, in the detector's terms.
#[derive(Debug, Clone, PartialEq)]
pub enum Obs {
    /// Composite temperature from one source (`hwmon`, `nvme_cli`, `smartctl`).
    Temperature { time_ns: i64, source: String, celsius: f64 },
    /// SMART: critical warning and the thermal-management counters.
    /// A counter or temperature the record left out is `None`: never compared, never a 0.
    Smart { time_ns: i64, critical_warning: u32, counters: [Option<u64>; 5], composite_celsius: Option<f64> },
    /// A probe run: throughput on a pattern key such as `SW/131072`, timed by its start and end.
    Run { start_ns: i64, end_ns: i64, pattern: String, mib_per_s: f64 },
    /// Drive power (a `power` sample with scope `drive`, or a run's energy over its duration).
    Power { time_ns: i64, watts: f64 },
}

impl Obs {
    fn time(&self) -> i64 {
        match self {
            Obs::Temperature { time_ns, .. } | Obs::Smart { time_ns, .. } | Obs::Power { time_ns, .. } => *time_ns,
            Obs::Run { start_ns, .. } => *start_ns,
        }
    }

    /// The stream it belongs to, for resend filtering.
    fn stream(&self) -> String {
        match self {
            Obs::Temperature { source, .. } => format!("temperature/{source}"),
            Obs::Smart { .. } => "smart".into(),
            Obs::Run { pattern, .. } => format!("run/{pattern}"),
            Obs::Power { .. } => "power".into(),
        }
    }
}

#[derive(Debug, Clone)]
struct Hot {
    time_ns: i64,
    celsius: Option<f64>,
    trigger: &'static str,
}

#[derive(Debug, Default)]
struct Drive {
    warning_celsius: Option<f64>,
    critical_celsius: Option<f64>,
    last_time: HashMap<String, i64>,
    temperature: HashMap<String, f64>,
    last_composite: Option<f64>,
    counters: Option<[Option<u64>; 5]>,
    critical_temperature_bit: bool,
    hot: Option<Hot>,
    throughput_base: HashMap<String, f64>,
    power_base: VecDeque<f64>,
    episode: Option<ThrottleEvent>,
}

fn drop_pct(base: f64, now: f64) -> f64 {
    // (b − v) · 100 / b keeps round numbers exact (1000 → 850 MiB/s is exactly 15 %).
    (base - now) * 100.0 / base
}

impl Drive {
    fn observe(&mut self, device: &str, obs: Obs, out: &mut Vec<ThrottleEvent>) {
        let stream = obs.stream();
        let t = obs.time();
        if self.last_time.get(&stream).is_some_and(|&last| t <= last) {
            return;
        }
        self.last_time.insert(stream, t);
        match obs {
            Obs::Temperature { time_ns, source, celsius } => {
                self.last_composite = Some(celsius);
                let before = self.temperature.insert(source, celsius);
                let Some((limit, trigger)) = self.temperature_limit() else { return };
                let was_hot = before.is_some_and(|b| b >= limit);
                if celsius >= limit && !was_hot {
                    self.heat(time_ns, Some(celsius), trigger);
                } else if celsius < limit && self.temperature.values().all(|&c| c < limit) {
                    self.cool(time_ns, trigger, out);
                }
            }
            Obs::Smart { time_ns, critical_warning, counters, composite_celsius } => {
                let celsius = composite_celsius.or(self.last_composite);
                // Only a counter present in both records can have moved.
                let moved = self.counters.is_some_and(|c| {
                    counters.iter().zip(c.iter()).any(|(now, was)| matches!((now, was), (Some(n), Some(w)) if n > w))
                });
                // A counter this record left out keeps its last known value for the next compare.
                let mut kept = counters;
                if let Some(c) = self.counters {
                    for (k, was) in kept.iter_mut().zip(c) {
                        *k = k.or(was);
                    }
                }
                self.counters = Some(kept);
                let bit = critical_warning & 0x2 != 0;
                let newly_set = bit && !self.critical_temperature_bit;
                self.critical_temperature_bit = bit;
                if moved {
                    self.heat(time_ns, celsius, "thermal_counters");
                } else {
                    self.cool(time_ns, "thermal_counters", out);
                }
                if newly_set {
                    self.heat(time_ns, celsius, "critical_warning");
                } else if !bit {
                    self.cool(time_ns, "critical_warning", out);
                }
            }
            Obs::Run { end_ns, pattern, mib_per_s, .. } => {
                if self.hot.is_none() {
                    self.throughput_base.insert(pattern, mib_per_s);
                    return;
                }
                let Some(&base) = self.throughput_base.get(&pattern) else { return };
                if base > 0.0 && drop_pct(base, mib_per_s) >= THROUGHPUT_DROP_PCT {
                    self.throttled(device, end_ns, Some((pattern, drop_pct(base, mib_per_s))), None, out);
                }
            }
            Obs::Power { time_ns, watts } => {
                if self.hot.is_none() {
                    if self.power_base.len() == POWER_BASELINE_SAMPLES {
                        self.power_base.pop_front();
                    }
                    self.power_base.push_back(watts);
                    return;
                }
                if self.power_base.is_empty() {
                    return;
                }
                let base = self.power_base.iter().sum::<f64>() / self.power_base.len() as f64;
                if base > 0.0 && drop_pct(base, watts) >= POWER_DROP_PCT {
                    self.throttled(device, time_ns, None, Some(drop_pct(base, watts)), out);
                }
            }
        }
    }

    /// The temperature threshold and its trigger name: the warning threshold when the drive
    /// reports one (throttling starts there), else the critical one, which a drive without a
    /// WCTEMP still throttles at (some report CCTEMP only).
    fn temperature_limit(&self) -> Option<(f64, &'static str)> {
        self.warning_celsius
            .map(|w| (w, "temperature"))
            .or_else(|| self.critical_celsius.map(|c| (c, "critical_temperature")))
    }

    /// A thermal trigger fired; the first trigger of a hot period defines its onset.
    fn heat(&mut self, time_ns: i64, celsius: Option<f64>, trigger: &'static str) {
        if self.hot.is_none() {
            self.hot = Some(Hot { time_ns, celsius, trigger });
        }
    }

    /// The trigger `trigger` cleared: if it opened the hot period, the period (and its episode) ends.
    fn cool(&mut self, time_ns: i64, trigger: &str, out: &mut Vec<ThrottleEvent>) {
        if self.hot.as_ref().is_none_or(|h| h.trigger != trigger) {
            return;
        }
        let hot = self.hot.take();
        if let (Some(mut e), Some(hot)) = (self.episode.take(), hot) {
            e.duration_s = (time_ns - hot.time_ns) as f64 / 1e9;
            e.ongoing = false;
            out.push(e);
        }
    }

    /// A drop while hot: opens the episode (emitting it) or widens it.
    fn throttled(&mut self, device: &str, time_ns: i64, tput: Option<(String, f64)>, power: Option<f64>, out: &mut Vec<ThrottleEvent>) {
        let Some(hot) = self.hot.clone() else { return };
        let duration_s = (time_ns - hot.time_ns).max(0) as f64 / 1e9;
        let max = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        match &mut self.episode {
            Some(e) => {
                if let Some((p, d)) = &tput {
                    if e.throughput_drop_pct.is_none_or(|old| *d > old) {
                        e.pattern = p.clone();
                    }
                }
                e.throughput_drop_pct = max(e.throughput_drop_pct, tput.map(|t| t.1));
                e.power_drop_pct = max(e.power_drop_pct, power);
                e.signal = signal(e.throughput_drop_pct, e.power_drop_pct).into();
                e.duration_s = e.duration_s.max(duration_s);
            }
            None => {
                let throughput_drop_pct = tput.as_ref().map(|t| t.1);
                let e = ThrottleEvent {
                    time_ns: hot.time_ns,
                    device: device.to_string(),
                    trigger: hot.trigger.into(),
                    signal: signal(throughput_drop_pct, power).into(),
                    pattern: tput.map(|t| t.0).unwrap_or_default(),
                    onset_celsius: hot.celsius,
                    warning_celsius: self.warning_celsius,
                    critical_celsius: self.critical_celsius,
                    throughput_drop_pct,
                    power_drop_pct: power,
                    duration_s,
                    ongoing: true,
                };
                out.push(e.clone());
                self.episode = Some(e);
            }
        }
    }
}

fn signal(tput: Option<f64>, power: Option<f64>) -> &'static str {
    match (tput.is_some(), power.is_some()) {
        (true, true) => "throughput+power",
        (true, false) => "throughput",
        _ => "power",
    }
}

/// The detector: per (host, device) state. Not thread-safe by itself; the ingest service keeps
/// it behind a mutex (it is pure computation, no I/O under the lock).
#[derive(Debug, Default)]
pub struct ThrottleDetector {
    drives: HashMap<(String, String), Drive>,
    /// Per host: block device (namespace) → drive tag, from the inventory.
    namespaces: HashMap<String, BTreeMap<String, String>>,
}

impl ThrottleDetector {
    pub fn new() -> Self {
        Self::default()
    }

    /// Thresholds and namespace → drive mapping from an agent's Hello inventory.
    pub fn set_inventory(&mut self, host: &str, inv: &v1::Inventory) {
        let ns = self.namespaces.entry(host.to_string()).or_default();
        for l in &inv.drive_thermal_limits {
            for n in &l.namespaces {
                ns.insert(n.clone(), l.device.clone());
            }
            let d = self.drives.entry((host.to_string(), l.device.clone())).or_default();
            d.warning_celsius = (l.warning_celsius > 0.0).then_some(l.warning_celsius);
            d.critical_celsius = (l.critical_celsius > 0.0).then_some(l.critical_celsius);
        }
        for s in &inv.storage_devices {
            if !s.controller.is_empty() && s.controller != s.name {
                ns.insert(s.name.clone(), s.controller.clone());
            }
        }
    }

    /// Feeds one observation of `device` on `host`.
    pub fn observe(&mut self, host: &str, device: &str, obs: Obs) -> Vec<ThrottleEvent> {
        let mut out = Vec::new();
        self.drives.entry((host.to_string(), device.to_string())).or_default().observe(device, obs, &mut out);
        out
    }

    /// Feeds every relevant record of a batch, in time order.
    pub fn observe_batch(&mut self, host: &str, b: &Batch) -> Vec<ThrottleEvent> {
        let ns = self.namespaces.get(host).cloned().unwrap_or_default();
        let mut obs = observations(b, &ns);
        obs.sort_by_key(|(_, o)| o.time());
        let mut out = Vec::new();
        for (device, o) in obs {
            out.extend(self.observe(host, &device, o));
        }
        out
    }
}

/// The drive a block device belongs to: the inventory's mapping, else `nvme0n1` → `nvme0`.
fn drive_of(device: &str, ns: &BTreeMap<String, String>) -> String {
    if let Some(d) = ns.get(device) {
        return d.clone();
    }
    if let Some(rest) = device.strip_prefix("nvme") {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if !digits.is_empty() && rest[digits.len()..].starts_with('n') {
            return format!("nvme{digits}");
        }
    }
    device.to_string()
}

/// The detector's view of a batch: (drive, observation) pairs.
pub fn observations(b: &Batch, ns: &BTreeMap<String, String>) -> Vec<(String, Obs)> {
    let mut out = Vec::new();
    for t in &b.temperature {
        // Thresholds are defined on the composite temperature (hardware.md §5.4).
        if t.sensor == "Composite" {
            out.push((t.device.clone(), Obs::Temperature { time_ns: t.time.0, source: t.source.clone(), celsius: t.celsius.0 }));
        }
    }
    for s in &b.nvme_smart {
        let counters = [
            s.thm_temp1_trans_count,
            s.thm_temp2_trans_count,
            s.thm_temp1_total_time_s,
            s.thm_temp2_total_time_s,
            s.warning_temp_time_min,
        ];
        out.push((
            s.device.clone(),
            Obs::Smart { time_ns: s.time_ns, critical_warning: s.critical_warning, counters, composite_celsius: s.composite_celsius },
        ));
    }
    for r in &b.probe_runs {
        let drive = drive_of(&r.device, ns);
        out.push((
            drive.clone(),
            Obs::Run {
                start_ns: r.start_ns,
                end_ns: r.end_ns,
                pattern: format!("{}/{}", r.pattern, r.io_size_bytes),
                mib_per_s: r.mib_per_s,
            },
        ));
        let secs = (r.end_ns - r.start_ns) as f64 / 1e9;
        if let (Some(j), true) = (r.energy_j, secs > 0.0) {
            out.push((drive, Obs::Power { time_ns: r.end_ns, watts: j / secs }));
        }
    }
    for p in &b.power {
        if p.scope == "drive" {
            if let Some(w) = p.watts {
                out.push((drive_of(&p.zone, ns), Obs::Power { time_ns: p.time.0, watts: w.0 }));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;
    const T0: i64 = 1_700_000_000 * S;

    fn temp(t: i64, c: f64) -> Obs {
        Obs::Temperature { time_ns: T0 + t * S, source: "nvme_cli".into(), celsius: c }
    }
    fn run(t: i64, pattern: &str, mib: f64) -> Obs {
        Obs::Run { start_ns: T0 + t * S, end_ns: T0 + (t + 1) * S, pattern: pattern.into(), mib_per_s: mib }
    }
    fn smart(t: i64, trans: u64, warning: u32) -> Obs {
        Obs::Smart { time_ns: T0 + t * S, critical_warning: warning, counters: [Some(trans), Some(0), Some(trans * 30), Some(0), Some(0)], composite_celsius: Some(80.0) }
    }
    fn power(t: i64, w: f64) -> Obs {
        Obs::Power { time_ns: T0 + t * S, watts: w }
    }

    fn detector(warning: Option<f64>) -> ThrottleDetector {
        detector_with(warning, None)
    }

    fn detector_with(warning: Option<f64>, critical: Option<f64>) -> ThrottleDetector {
        let mut d = ThrottleDetector::new();
        d.set_inventory(
            "h1",
            &v1::Inventory {
                drive_thermal_limits: vec![v1::DriveThermalLimits {
                    device: "nvme0".into(),
                    serial: "S1".into(),
                    warning_celsius: warning.unwrap_or(0.0),
                    critical_celsius: critical.unwrap_or(0.0),
                    namespaces: vec!["nvme0n1".into()],
                }],
                ..Default::default()
            },
        );
        d
    }

    fn feed(d: &mut ThrottleDetector, series: Vec<Obs>) -> Vec<ThrottleEvent> {
        series.into_iter().flat_map(|o| d.observe("h1", "nvme0", o)).collect()
    }

    fn event(trigger: &str, signal: &str, pattern: &str, onset: i64, celsius: Option<f64>, warn: Option<f64>) -> ThrottleEvent {
        ThrottleEvent {
            time_ns: T0 + onset * S,
            device: "nvme0".into(),
            trigger: trigger.into(),
            signal: signal.into(),
            pattern: pattern.into(),
            onset_celsius: celsius,
            warning_celsius: warn,
            critical_celsius: None,
            throughput_drop_pct: None,
            power_drop_pct: None,
            duration_s: 0.0,
            ongoing: true,
        }
    }

    #[test]
    fn temperature_crossing_with_a_throughput_drop_is_one_episode() {
        let mut d = detector(Some(70.0));
        let got = feed(
            &mut d,
            vec![
                run(0, "SW/131072", 1000.0),
                temp(10, 60.0),
                run(12, "SW/131072", 990.0), // normal: becomes the baseline
                temp(20, 72.0),              // onset
                run(30, "SW/131072", 841.5), // 15 % below 990
                run(40, "SW/131072", 811.8), // 18 %
                temp(60, 65.0),              // recovery
                run(70, "SW/131072", 1000.0),
            ],
        );
        let mut open = event("temperature", "throughput", "SW/131072", 20, Some(72.0), Some(70.0));
        open.throughput_drop_pct = Some(drop_pct(990.0, 841.5));
        open.duration_s = 11.0;
        let mut closed = open.clone();
        closed.throughput_drop_pct = Some(drop_pct(990.0, 811.8));
        closed.duration_s = 40.0;
        closed.ongoing = false;
        assert_eq!(got, vec![open, closed]);
        assert_eq!((drop_pct(990.0, 841.5), drop_pct(1000.0, 850.0)), (15.0, 15.0));
    }

    #[test]
    fn the_critical_threshold_triggers_when_the_drive_reports_no_warning_threshold() {
        // CCTEMP 85 °C only: 84.85 °C is no trigger, 86 °C is, and the drop makes it an episode.
        let mut d = detector_with(None, Some(85.0));
        let got = feed(
            &mut d,
            vec![
                run(0, "SW/131072", 2000.0),
                temp(5, 84.85),
                run(6, "SW/131072", 1990.0), // still normal: the new baseline
                temp(10, 86.0),              // onset
                run(12, "SW/131072", 1592.0), // 20 % below 1990
                temp(30, 84.0),              // recovery
            ],
        );
        let mut open = event("critical_temperature", "throughput", "SW/131072", 10, Some(86.0), None);
        open.critical_celsius = Some(85.0);
        open.throughput_drop_pct = Some(20.0);
        open.duration_s = 3.0;
        let mut closed = open.clone();
        closed.duration_s = 20.0;
        closed.ongoing = false;
        assert_eq!(got, vec![open, closed]);
        // With both thresholds the warning one triggers (throttling starts there), and the event
        // carries both.
        let mut d = detector_with(Some(70.0), Some(85.0));
        let got = feed(&mut d, vec![run(0, "SW/131072", 1000.0), temp(1, 72.0), run(2, "SW/131072", 500.0)]);
        let mut e = event("temperature", "throughput", "SW/131072", 1, Some(72.0), Some(70.0));
        e.critical_celsius = Some(85.0);
        e.throughput_drop_pct = Some(50.0);
        e.duration_s = 2.0;
        assert_eq!(got, vec![e]);
        // Neither threshold known: a temperature alone never triggers.
        let mut d = detector_with(None, None);
        assert!(feed(&mut d, vec![run(0, "SW/131072", 1000.0), temp(1, 120.0), run(2, "SW/131072", 100.0)]).is_empty());
    }

    #[test]
    fn thermal_counters_with_a_power_drop_and_no_threshold() {
        let mut d = detector(None);
        let got = feed(
            &mut d,
            vec![
                smart(0, 0, 0),
                power(10, 10.0),
                power(20, 10.0),
                smart(60, 1, 0), // TMT1 transition: onset
                power(70, 8.5),  // 15 % below the 10 W mean
                run(75, "RW/4096", 200.0),
                smart(120, 1, 0), // counters still: recovered
            ],
        );
        let mut open = event("thermal_counters", "power", "", 60, Some(80.0), None);
        open.power_drop_pct = Some(15.0);
        open.duration_s = 10.0;
        let mut closed = open.clone();
        closed.duration_s = 60.0;
        closed.ongoing = false;
        assert_eq!(got, vec![open, closed]);
    }

    #[test]
    fn critical_warning_bit_and_both_signals_merge() {
        let mut d = detector(Some(90.0));
        let got = feed(
            &mut d,
            vec![
                power(1, 12.0),
                run(2, "SW/131072", 2000.0),
                smart(5, 0, 2), // bit 1 set (e.g. a lowered threshold, as in QEMU)
                run(6, "SW/131072", 1500.0),
                power(8, 9.0),
                smart(20, 0, 0),
            ],
        );
        let mut open = event("critical_warning", "throughput", "SW/131072", 5, Some(80.0), Some(90.0));
        open.throughput_drop_pct = Some(25.0);
        open.duration_s = 2.0;
        let mut closed = open.clone();
        closed.signal = "throughput+power".into();
        closed.power_drop_pct = Some(25.0);
        closed.duration_s = 15.0;
        closed.ongoing = false;
        assert_eq!(got, vec![open, closed]);
    }

    #[test]
    fn series_that_must_not_trigger() {
        // Hot, but throughput stays within 10 % (9.9 % below).
        let mut d = detector(Some(70.0));
        assert!(feed(&mut d, vec![run(0, "SR/131072", 1000.0), temp(1, 75.0), run(2, "SR/131072", 901.0), temp(3, 60.0)]).is_empty());
        // A 30 % drop without any thermal trigger (e.g. a GC pause).
        let mut d = detector(Some(70.0));
        assert!(feed(&mut d, vec![temp(0, 50.0), run(1, "SW/131072", 1000.0), run(2, "SW/131072", 700.0)]).is_empty());
        // Hot, but the slow pattern has no pre-trigger value to compare with.
        let mut d = detector(Some(70.0));
        assert!(feed(&mut d, vec![run(0, "SR/131072", 1000.0), temp(1, 75.0), run(2, "SW/131072", 100.0)]).is_empty());
        // Below the threshold (69.85 °C vs 70): no trigger even with a drop.
        let mut d = detector(Some(70.0));
        assert!(feed(&mut d, vec![run(0, "SW/131072", 1000.0), temp(1, 69.85), run(2, "SW/131072", 500.0)]).is_empty());
        // Counters that never move; power falls.
        let mut d = detector(None);
        assert!(feed(&mut d, vec![smart(0, 3, 0), power(1, 10.0), smart(2, 3, 0), power(3, 5.0)]).is_empty());
    }

    #[test]
    fn resent_observations_do_not_duplicate_and_hosts_are_independent() {
        let mut d = detector(Some(70.0));
        let series = vec![run(0, "SW/131072", 1000.0), temp(1, 75.0), run(2, "SW/131072", 500.0)];
        assert_eq!(feed(&mut d, series.clone()).len(), 1);
        assert!(feed(&mut d, series.clone()).is_empty(), "a resent batch is ignored");
        // The same device name on another host has its own state (and no threshold there).
        let other: Vec<ThrottleEvent> = series.into_iter().flat_map(|o| d.observe("h2", "nvme0", o)).collect();
        assert!(other.is_empty());
    }

    #[test]
    fn batches_map_namespaces_and_drive_power() {
        use wattflip_proto::domain::convert_batch;
        let mut d = detector(Some(70.0));
        let pr = |t: i64, mib: f64| v1::ProbeRun {
            run_id: format!("r{t}"),
            device: "nvme0n1".into(),
            bench: "governor_sweep".into(),
            experiment: "governor_sweep/SW:128KiB".into(),
            pattern: "SW".into(),
            io_size_bytes: 131_072,
            start_ns: T0 + t * S,
            end_ns: T0 + (t + 2) * S,
            mib_per_s: mib,
            energy_j: Some(20.0),
            ..Default::default()
        };
        let b = v1::Batch {
            agent_id: "h1".into(),
            sequence: 1,
            probe_runs: vec![pr(0, 1000.0), pr(10, 880.0)],
            temperature: vec![v1::TemperatureSample {
                time_ns: T0 + 5 * S,
                source: "hwmon".into(),
                device: "nvme0".into(),
                sensor: "Composite".into(),
                celsius: 71.0,
            }],
            ..Default::default()
        };
        let got = d.observe_batch("h1", &convert_batch("h1", b).unwrap());
        let mut e = event("temperature", "throughput", "SW/131072", 5, Some(71.0), Some(70.0));
        e.throughput_drop_pct = Some(12.0);
        e.duration_s = 7.0;
        assert_eq!(got, vec![e]);
    }
}
