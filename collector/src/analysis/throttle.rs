//! Fleet-wide thermal-throttling detection in event time: a pure detector fed with every agent's
//! batches, one state per (host, drive), whose episodes do not depend on the order or the batches
//! in which the observations arrive.
//!
//! Rule (issue 5; Zhang et al. in hardware.md §8.2: a self-throttling SSD drops power ~15 % and
//! performance 12–18 % past its threshold): a **thermal trigger** — the composite temperature
//! reaching the drive's warning threshold (WCTEMP from the agent's inventory; its critical
//! threshold CCTEMP for a drive that reports no WCTEMP), the NVMe thermal-management counters
//! (TMT1/TMT2 transition counts and times, warning-temperature time) moving, or critical-warning
//! bit 1 appearing — opens a **hot period**, which the same trigger clearing closes. A probe run
//! that starts inside a hot period and whose throughput on the same pattern (pattern and IO size)
//! is ≥ [`THROUGHPUT_DROP_PCT`] below the last run of that pattern started before the onset
//! outside any hot period, or a drive power sample inside it ≥ [`POWER_DROP_PCT`] below the mean of
//! the last [`POWER_BASELINE_SAMPLES`] samples before the onset outside any hot period, makes the
//! period a throttling episode: one [`ThrottleEvent`] stamped with the onset (so every version of
//! an episode is one InfluxDB point, the last written wins), with the onset temperature, the
//! largest drops and the duration, `ongoing` until the period closes. A hot period without a drop
//! is no event.
//!
//! **Event time.** Each drive keeps its thermal observations (temperatures, compacted to the
//! crossings once settled, and SMART polls) and its signals (runs, drive power) in maps ordered by
//! timestamp, and recomputes its periods and episodes from them after every batch. The lateness
//! bound is [`LATENESS_NS`] (2 minutes) behind the newest observation of the drive:
//! - a signal is judged once the thermal side has reached its timestamp (a thermal observation at
//!   or after it), or once it is behind the lateness bound (a drive whose temperatures stopped);
//! - an episode is first emitted once its onset is behind the lateness bound, so a temperature
//!   arriving out of order within the bound (another stream, a resend) can still move the onset;
//!   after that, every change re-emits it (same onset, so it replaces the stored point).
//!
//! An agent streams temperatures live and sends a probe's runs after the probe, so runs are
//! normally judged as they arrive, and runs that arrive first wait for the temperatures. Data up
//! to [`RETENTION_NS`] behind the newest observation still changes its episode: a late run, a
//! late baseline or a late temperature re-emits it (a late event rather than none). What this
//! cannot repair: a temperature arriving more than the lateness bound out of order after its
//! onset was emitted (the old onset stays stored next to the new one; points are never
//! retracted), and data older than the retention (dropped). Resent batches change nothing
//! (every observation is keyed by its stream and timestamp).
//!
//! Thresholds are compared with a tolerance ([`PCT_TOLERANCE`], [`CELSIUS_TOLERANCE`]): a drop of
//! exactly 10 % computed as 9.999999999999998 % is a 10 % drop.
//!
//! To add a trigger, add a [`Thermal`] variant and handle it in `ThermalState::apply`; to add a
//! signal, add an [`Obs`] variant, store it in `Drive::insert` and judge it in `Drive::episode`.

use std::collections::{BTreeMap, HashMap};
use wattflip_proto::domain::Batch;
use wattflip_proto::schema::ThrottleEvent;
use wattflip_proto::v1;

/// Throughput drop that counts as throttling, in % of the pre-onset value.
pub const THROUGHPUT_DROP_PCT: f64 = 10.0;
/// Power drop that counts as throttling, in % of the pre-onset mean.
pub const POWER_DROP_PCT: f64 = 10.0;
/// A drop within this many percentage points below a threshold reaches it (float noise of
/// (b − v)·100/b, e.g. 9.999999999999998 % for ×0.9).
pub const PCT_TOLERANCE: f64 = 1e-9;
/// A temperature within this many °C below a threshold reaches it (K → °C conversions).
pub const CELSIUS_TOLERANCE: f64 = 1e-6;
/// Normal-state power samples averaged into the power baseline.
pub const POWER_BASELINE_SAMPLES: usize = 10;
/// The lateness bound: a signal this much older than the drive's newest observation is judged
/// even if no thermal observation has reached its timestamp yet (2 minutes).
pub const LATENESS_NS: i64 = 120 * 1_000_000_000;
/// How far behind the drive's newest observation data is kept and can still change an episode
/// (6 hours: a long probe's runs arrive after it ends).
pub const RETENTION_NS: i64 = 6 * 3600 * 1_000_000_000;
/// Per-drive caps on stored observations (oldest dropped first), so memory stays bounded for
/// drives that report power or SMART very often.
const MAX_THERMAL: usize = 16_384;
const MAX_RUNS: usize = 16_384;
const MAX_POWER: usize = 16_384;

/// One observation of one drive, in the detector's terms.
#[derive(Debug, Clone, PartialEq)]
pub enum Obs {
    /// Composite temperature from one source (`hwmon`, `nvme_cli`, `smartctl`).
    Temperature { time_ns: i64, source: String, celsius: f64 },
    /// SMART: critical warning and the thermal-management counters. A counter or temperature the
    /// record left out is `None`: never compared, never a 0.
    Smart { time_ns: i64, critical_warning: u32, counters: [Option<u64>; 5], composite_celsius: Option<f64> },
    /// A probe run: throughput on a pattern key such as `SW/131072`, timed by its start and end.
    Run { start_ns: i64, end_ns: i64, pattern: String, mib_per_s: f64 },
    /// Drive power (a `power` sample with scope `drive`, or a run's energy over its duration).
    Power { time_ns: i64, watts: f64 },
}

/// A thermal observation as stored (keyed by time and stream).
#[derive(Debug, Clone, PartialEq)]
pub enum Thermal {
    Temperature { celsius: f64 },
    Smart { critical_warning: u32, counters: [Option<u64>; 5], composite_celsius: Option<f64> },
}

/// Thermal state after a prefix of the thermal observations.
#[derive(Debug, Clone, Default)]
struct ThermalState {
    temperature: BTreeMap<String, f64>,
    last_composite: Option<f64>,
    counters: Option<[Option<u64>; 5]>,
    critical_temperature_bit: bool,
    hot: Option<Period>,
}

/// A hot period: from the trigger firing to the same trigger clearing (`end_ns` None: still hot).
#[derive(Debug, Clone, PartialEq)]
struct Period {
    onset_ns: i64,
    celsius: Option<f64>,
    trigger: &'static str,
    end_ns: Option<i64>,
}

fn reaches(value: f64, limit: f64) -> bool {
    value >= limit - CELSIUS_TOLERANCE
}

fn drop_pct(base: f64, now: f64) -> f64 {
    // (b − v) · 100 / b keeps round numbers exact (1000 → 850 MiB/s is exactly 15 %).
    (base - now) * 100.0 / base
}

fn is_drop(pct: f64, threshold: f64) -> bool {
    pct >= threshold - PCT_TOLERANCE
}

/// The temperature threshold and its trigger name: the warning threshold when the drive reports
/// one (throttling starts there), else the critical one, which a drive without a WCTEMP still
/// throttles at (some report CCTEMP only).
fn temperature_limit(warning: Option<f64>, critical: Option<f64>) -> Option<(f64, &'static str)> {
    warning.map(|w| (w, "temperature")).or_else(|| critical.map(|c| (c, "critical_temperature")))
}

impl ThermalState {
    fn apply(&mut self, time_ns: i64, stream: &str, obs: &Thermal, limit: Option<(f64, &'static str)>, closed: &mut Vec<Period>) {
        match obs {
            Thermal::Temperature { celsius } => {
                let celsius = *celsius;
                self.last_composite = Some(celsius);
                let before = self.temperature.insert(stream.to_string(), celsius);
                let Some((limit, trigger)) = limit else {
                    return;
                };
                let was_hot = before.is_some_and(|b| reaches(b, limit));
                if reaches(celsius, limit) && !was_hot {
                    self.heat(time_ns, Some(celsius), trigger);
                } else if !reaches(celsius, limit) && self.temperature.values().all(|&c| !reaches(c, limit)) {
                    self.cool(time_ns, trigger, closed);
                }
            }
            Thermal::Smart { critical_warning, counters, composite_celsius } => {
                let celsius = composite_celsius.or(self.last_composite);
                // Only a counter present in both records can have moved.
                let moved = self.counters.is_some_and(|c| counters.iter().zip(c.iter()).any(|(now, was)| matches!((now, was), (Some(n), Some(w)) if n > w)));
                // A counter this record left out keeps its last known value for the next compare.
                let mut kept = *counters;
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
                    self.cool(time_ns, "thermal_counters", closed);
                }
                if newly_set {
                    self.heat(time_ns, celsius, "critical_warning");
                } else if !bit {
                    self.cool(time_ns, "critical_warning", closed);
                }
            }
        }
    }

    /// A thermal trigger fired; the first trigger of a hot period defines its onset.
    fn heat(&mut self, time_ns: i64, celsius: Option<f64>, trigger: &'static str) {
        if self.hot.is_none() {
            self.hot = Some(Period { onset_ns: time_ns, celsius, trigger, end_ns: None });
        }
    }

    /// The trigger `trigger` cleared: if it opened the hot period, the period ends.
    fn cool(&mut self, time_ns: i64, trigger: &str, closed: &mut Vec<Period>) {
        if self.hot.as_ref().is_some_and(|h| h.trigger == trigger) {
            if let Some(mut p) = self.hot.take() {
                p.end_ns = Some(time_ns);
                closed.push(p);
            }
        }
    }
}

#[derive(Debug)]
struct Drive {
    warning_celsius: Option<f64>,
    critical_celsius: Option<f64>,
    /// The state after the thermal observations already dropped (older than the retention), and
    /// the periods they closed.
    base: ThermalState,
    base_periods: Vec<Period>,
    /// Thermal observations by (time, stream): temperature crossings and SMART polls.
    thermal: BTreeMap<(i64, String), Thermal>,
    /// Newest thermal timestamp ever seen: signals up to it can be judged.
    thermal_watermark: Option<i64>,
    /// Runs by (start, pattern) → (end, MiB/s).
    runs: BTreeMap<(i64, String), (i64, f64)>,
    /// Drive power by time.
    power: BTreeMap<i64, f64>,
    newest_ns: Option<i64>,
    /// Temperatures before this time are compacted to crossings.
    compacted_until: i64,
    /// Episodes as last emitted, by onset.
    emitted: BTreeMap<i64, ThrottleEvent>,
}

impl Default for Drive {
    fn default() -> Self {
        Drive {
            warning_celsius: None,
            critical_celsius: None,
            base: ThermalState::default(),
            base_periods: Vec::new(),
            thermal: BTreeMap::new(),
            thermal_watermark: None,
            runs: BTreeMap::new(),
            power: BTreeMap::new(),
            newest_ns: None,
            compacted_until: i64::MIN,
            emitted: BTreeMap::new(),
        }
    }
}

impl Drive {
    /// Drops temperature readings that are on the same side of the threshold as the previous
    /// reading of their source (only crossings open or close a period), for readings more than
    /// [`LATENESS_NS`] behind the thermal watermark: a reading arriving later than that between
    /// two compacted ones may be placed against fewer neighbours than it had.
    fn compact(&mut self) {
        let (Some((limit, _)), Some(w)) = (self.limit(), self.thermal_watermark) else {
            return;
        };
        let until = w - LATENESS_NS;
        if until <= self.compacted_until {
            return;
        }
        let keys: Vec<(i64, String)> = self
            .thermal
            .range((self.compacted_until, String::new())..(until, String::new()))
            .filter(|(k, _)| k.1.starts_with("temperature/"))
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            let side = |v: &Thermal| match v {
                Thermal::Temperature { celsius } => Some(reaches(*celsius, limit)),
                Thermal::Smart { .. } => None,
            };
            let Some(mine) = self.thermal.get(&k).and_then(side) else {
                continue;
            };
            let source = k.1.trim_start_matches("temperature/");
            let prev = self
                .thermal
                .range(..k.clone())
                .rev()
                .find(|(pk, _)| pk.1 == k.1)
                .and_then(|(_, v)| side(v))
                .or_else(|| self.base.temperature.get(source).map(|c| reaches(*c, limit)));
            if prev == Some(mine) {
                self.thermal.remove(&k);
            }
        }
        self.compacted_until = until;
    }

    fn limit(&self) -> Option<(f64, &'static str)> {
        temperature_limit(self.warning_celsius, self.critical_celsius)
    }

    /// Stores one observation (a resent one replaces itself).
    fn insert(&mut self, obs: Obs) {
        let t = match &obs {
            Obs::Temperature { time_ns, .. } | Obs::Smart { time_ns, .. } | Obs::Power { time_ns, .. } => *time_ns,
            Obs::Run { start_ns, .. } => *start_ns,
        };
        if self.newest_ns.is_some_and(|n| t < n - RETENTION_NS) {
            return; // older than anything that can still change an episode
        }
        self.newest_ns = Some(self.newest_ns.map_or(t, |n| n.max(t)));
        match obs {
            Obs::Temperature { time_ns, source, celsius } => {
                self.thermal_watermark = Some(self.thermal_watermark.map_or(time_ns, |w| w.max(time_ns)));
                // Stored as is; `compact` later keeps only the crossings.
                self.compacted_until = self.compacted_until.min(time_ns);
                self.thermal.insert((time_ns, format!("temperature/{source}")), Thermal::Temperature { celsius });
            }
            Obs::Smart { time_ns, critical_warning, counters, composite_celsius } => {
                self.thermal_watermark = Some(self.thermal_watermark.map_or(time_ns, |w| w.max(time_ns)));
                self.thermal.insert((time_ns, "smart".into()), Thermal::Smart { critical_warning, counters, composite_celsius });
            }
            Obs::Run { start_ns, end_ns, pattern, mib_per_s } => {
                self.runs.insert((start_ns, pattern), (end_ns, mib_per_s));
            }
            Obs::Power { time_ns, watts } => {
                self.power.insert(time_ns, watts);
            }
        }
    }

    /// Every hot period, in onset order, from the stored thermal observations.
    fn periods(&self) -> Vec<Period> {
        let limit = self.limit();
        let mut st = self.base.clone();
        let mut out = self.base_periods.clone();
        for ((t, stream), obs) in &self.thermal {
            let source = stream.strip_prefix("temperature/").unwrap_or(stream);
            st.apply(*t, source, obs, limit, &mut out);
        }
        out.extend(st.hot);
        out
    }

    /// The newest signal timestamp that can be judged now.
    fn horizon(&self) -> Option<i64> {
        let late = self.newest_ns.map(|n| n - LATENESS_NS);
        match (self.thermal_watermark, late) {
            (Some(w), Some(l)) => Some(w.max(l)),
            (w, l) => w.or(l),
        }
    }

    /// The episode of hot period `p` from the signals judged so far, if any fell.
    fn episode(&self, device: &str, p: &Period, periods: &[Period], horizon: i64) -> Option<ThrottleEvent> {
        let in_period = |q: &Period, t: i64| t >= q.onset_ns && q.end_ns.is_none_or(|e| t < e);
        let hot = |t: i64| periods.iter().any(|q| in_period(q, t));
        let mut tput: Option<(String, f64)> = None;
        let mut power: Option<f64> = None;
        let mut last_drop = p.onset_ns;
        // Runs in start order; the first largest drop names the pattern.
        for ((start, pattern), (end, mib)) in self.runs.range((p.onset_ns, String::new())..) {
            if !in_period(p, *start) || *start > horizon {
                break;
            }
            let base = self.runs.range(..(p.onset_ns, String::new())).rev().find(|((s, pat), _)| pat == pattern && !hot(*s)).map(|(_, v)| v.1);
            let Some(base) = base.filter(|b| *b > 0.0) else {
                continue;
            };
            let d = drop_pct(base, *mib);
            if is_drop(d, THROUGHPUT_DROP_PCT) {
                if tput.as_ref().is_none_or(|(_, old)| d > *old) {
                    tput = Some((pattern.clone(), d));
                }
                last_drop = last_drop.max(*end);
            }
        }
        let before: Vec<f64> = self.power.range(..p.onset_ns).rev().filter(|(t, _)| !hot(**t)).take(POWER_BASELINE_SAMPLES).map(|(_, w)| *w).collect();
        if !before.is_empty() {
            let base = before.iter().sum::<f64>() / before.len() as f64;
            for (t, w) in self.power.range(p.onset_ns..) {
                if !in_period(p, *t) || *t > horizon {
                    break;
                }
                let d = drop_pct(base, *w);
                if base > 0.0 && is_drop(d, POWER_DROP_PCT) {
                    power = Some(power.map_or(d, |old: f64| old.max(d)));
                    last_drop = last_drop.max(*t);
                }
            }
        }
        if tput.is_none() && power.is_none() {
            return None;
        }
        let duration_ns = match p.end_ns {
            Some(e) => e - p.onset_ns,
            None => last_drop - p.onset_ns,
        };
        let throughput_drop_pct = tput.as_ref().map(|t| t.1);
        Some(ThrottleEvent {
            time_ns: p.onset_ns,
            device: device.to_string(),
            trigger: p.trigger.into(),
            signal: signal(throughput_drop_pct, power).into(),
            pattern: tput.map(|t| t.0).unwrap_or_default(),
            onset_celsius: p.celsius,
            warning_celsius: self.warning_celsius,
            critical_celsius: self.critical_celsius,
            throughput_drop_pct,
            power_drop_pct: power,
            duration_s: duration_ns.max(0) as f64 / 1e9,
            ongoing: p.end_ns.is_none(),
        })
    }

    /// Recomputes every episode and returns those that differ from their last emitted version.
    fn update(&mut self, device: &str) -> Vec<ThrottleEvent> {
        let mut out = Vec::new();
        let Some(horizon) = self.horizon() else {
            return out;
        };
        let periods = self.periods();
        let cutoff = self.newest_ns.map_or(i64::MIN, |n| n - RETENTION_NS);
        for p in &periods {
            if p.onset_ns < cutoff {
                // Its signals may be gone: only its end can still change.
                if let Some(old) = self.emitted.get_mut(&p.onset_ns) {
                    let mut e = old.clone();
                    e.ongoing = p.end_ns.is_none();
                    if let Some(end) = p.end_ns {
                        e.duration_s = (end - p.onset_ns) as f64 / 1e9;
                    }
                    if *old != e {
                        *old = e.clone();
                        out.push(e);
                    }
                }
                continue;
            }
            // A new onset is emitted once it is settled (the lateness bound behind the newest
            // observation): a temperature arriving out of order could still move it, and an
            // emitted onset cannot be taken back. Its later versions follow every change.
            let settled = self.newest_ns.is_some_and(|n| p.onset_ns <= n - LATENESS_NS);
            if !settled && !self.emitted.contains_key(&p.onset_ns) {
                continue;
            }
            if let Some(e) = self.episode(device, p, &periods, horizon) {
                if self.emitted.get(&p.onset_ns) != Some(&e) {
                    self.emitted.insert(p.onset_ns, e.clone());
                    out.push(e);
                }
            }
        }
        self.evict(&periods);
        self.compact();
        out
    }

    /// Drops what is older than the retention (folding thermal observations into the base
    /// state) and what exceeds the caps; keeps the baselines a newer period may still need.
    fn evict(&mut self, periods: &[Period]) {
        let Some(newest) = self.newest_ns else { return };
        let cutoff = newest - RETENTION_NS;
        let limit = self.limit();
        loop {
            let over = self.thermal.len() > MAX_THERMAL;
            let Some(entry) = self.thermal.first_entry() else {
                break;
            };
            if entry.key().0 >= cutoff && !over {
                break;
            }
            let ((t, stream), obs) = entry.remove_entry();
            let source = stream.strip_prefix("temperature/").unwrap_or(&stream).to_string();
            self.base.apply(t, &source, &obs, limit, &mut self.base_periods);
        }
        self.base_periods.retain(|p| p.end_ns.is_none_or(|e| e >= cutoff));
        let oldest_kept = periods.iter().filter(|p| p.end_ns.is_none_or(|e| e >= cutoff)).map(|p| p.onset_ns).min();
        self.emitted.retain(|onset, _| oldest_kept.is_some_and(|o| *onset >= o));
        // Runs and power: drop the oldest beyond the retention or the cap, but keep the last run
        // of each pattern and the last baseline samples (a later period's baselines).
        let mut last_of: BTreeMap<String, i64> = BTreeMap::new();
        for (s, p) in self.runs.keys() {
            last_of.insert(p.clone(), *s);
        }
        let excess = self.runs.len().saturating_sub(MAX_RUNS);
        let drop: Vec<(i64, String)> =
            self.runs.keys().enumerate().filter(|(i, (s, p))| (*s < cutoff || *i < excess) && last_of.get(p) != Some(s)).map(|(_, k)| k.clone()).collect();
        for k in drop {
            self.runs.remove(&k);
        }
        while self.power.len() > POWER_BASELINE_SAMPLES {
            match self.power.first_key_value() {
                Some((t, _)) if *t < cutoff || self.power.len() > MAX_POWER => {
                    let t = *t;
                    self.power.remove(&t);
                }
                _ => break,
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

    /// Feeds one observation of `device` on `host`; the episodes it created or changed.
    pub fn observe(&mut self, host: &str, device: &str, obs: Obs) -> Vec<ThrottleEvent> {
        let d = self.drives.entry((host.to_string(), device.to_string())).or_default();
        d.insert(obs);
        d.update(device)
    }

    /// Feeds every relevant record of a batch; the episodes it created or changed.
    pub fn observe_batch(&mut self, host: &str, b: &Batch) -> Vec<ThrottleEvent> {
        let ns = self.namespaces.get(host).cloned().unwrap_or_default();
        let mut touched: Vec<String> = Vec::new();
        for (device, o) in observations(b, &ns) {
            self.drives.entry((host.to_string(), device.clone())).or_default().insert(o);
            if !touched.contains(&device) {
                touched.push(device);
            }
        }
        touched.sort();
        let mut out = Vec::new();
        for device in touched {
            if let Some(d) = self.drives.get_mut(&(host.to_string(), device.clone())) {
                out.extend(d.update(&device));
            }
        }
        out
    }

    /// Every episode of `host` as last emitted, by (device, onset): what InfluxDB holds.
    pub fn episodes(&self, host: &str) -> BTreeMap<(String, i64), ThrottleEvent> {
        self.drives
            .iter()
            .filter(|((h, _), _)| h == host)
            .flat_map(|((_, dev), d)| d.emitted.iter().map(move |(t, e)| ((dev.clone(), *t), e.clone())))
            .collect()
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
        let counters = [s.thm_temp1_trans_count, s.thm_temp2_trans_count, s.thm_temp1_total_time_s, s.thm_temp2_total_time_s, s.warning_temp_time_min];
        out.push((s.device.clone(), Obs::Smart { time_ns: s.time_ns, critical_warning: s.critical_warning, counters, composite_celsius: s.composite_celsius }));
    }
    for r in &b.probe_runs {
        let drive = drive_of(&r.device, ns);
        out.push((
            drive.clone(),
            Obs::Run { start_ns: r.start_ns, end_ns: r.end_ns, pattern: format!("{}/{}", r.pattern, r.io_size_bytes), mib_per_s: r.mib_per_s },
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
        Obs::Smart {
            time_ns: T0 + t * S,
            critical_warning: warning,
            counters: [Some(trans), Some(0), Some(trans * 30), Some(0), Some(0)],
            composite_celsius: Some(80.0),
        }
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

    /// The episodes as InfluxDB ends up holding them (the last version of each).
    fn stored(d: &ThrottleDetector) -> Vec<ThrottleEvent> {
        d.episodes("h1").into_values().collect()
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
                temp(25, 73.0),
                run(30, "SW/131072", 841.5),  // 15 % below 990
                temp(140, 73.5),              // the onset is settled (2 min behind): the episode opens
                run(150, "SW/131072", 811.8), // 18 %: waits for the temperatures to reach it
                temp(155, 74.0),              // they have: the episode widens
                temp(180, 65.0),              // recovery
                run(190, "SW/131072", 1000.0),
            ],
        );
        let mut open = event("temperature", "throughput", "SW/131072", 20, Some(72.0), Some(70.0));
        open.throughput_drop_pct = Some(drop_pct(990.0, 841.5));
        open.duration_s = 11.0;
        let mut wider = open.clone();
        wider.throughput_drop_pct = Some(drop_pct(990.0, 811.8));
        wider.duration_s = 131.0;
        let mut closed = wider.clone();
        closed.duration_s = 160.0;
        closed.ongoing = false;
        assert_eq!(got, vec![open, wider, closed.clone()]);
        assert_eq!(stored(&d), vec![closed]);
        assert_eq!((drop_pct(990.0, 841.5), drop_pct(1000.0, 850.0)), (15.0, 15.0));
    }

    /// The scenario of issue 19: a GC pause (15 % slower while cool) before the drive gets hot,
    /// then a 20 % drop while hot, and drive power falling 10 % exactly (8 W → 7.2 W, which
    /// (b − v)·100/b computes as 9.999999999999998 %).
    fn scenario() -> Vec<Obs> {
        vec![
            temp(0, 55.0),
            run(0, "SW/131072", 1000.0),
            power(1, 8.0),
            power(2, 8.0),
            run(8, "SW/131072", 850.0), // GC pause while cool: no throttling, and no baseline
            temp(9, 60.0),
            run(12, "SW/131072", 1000.0), // back: the baseline
            run(14, "RR/4096", 400.0),
            temp(20, 72.0), // onset
            temp(24, 73.0),
            run(30, "SW/131072", 800.0), // 20 %
            power(31, 7.2),              // 10 % exactly
            run(32, "RR/4096", 380.0),   // 5 %: not a drop
            temp(40, 71.0),
            temp(60, 65.0), // recovery
            run(61, "SW/131072", 1000.0),
            power(62, 8.0),
            temp(70, 50.0),
            temp(200, 50.0), // 2 min after the onset: it is settled
        ]
    }

    fn scenario_episode() -> ThrottleEvent {
        let mut e = event("temperature", "throughput+power", "SW/131072", 20, Some(72.0), Some(70.0));
        e.throughput_drop_pct = Some(20.0);
        e.power_drop_pct = Some(drop_pct(8.0, 7.2));
        e.duration_s = 40.0;
        e.ongoing = false;
        e
    }

    fn is_thermal(o: &Obs) -> bool {
        matches!(o, Obs::Temperature { .. } | Obs::Smart { .. })
    }

    /// A deterministic shuffle (xorshift), so a failing order can be replayed from its seed.
    fn shuffled(mut v: Vec<Obs>, seed: u64) -> Vec<Obs> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        for i in (1..v.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.swap(i, (x % (i as u64 + 1)) as usize);
        }
        v
    }

    /// A random merge of `a` and `b` that keeps the order within each.
    fn interleaved(a: &[Obs], b: Vec<Obs>, seed: u64) -> Vec<Obs> {
        let mut x = seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1;
        let (mut a, mut b) = (a.iter().cloned().peekable(), b.into_iter().peekable());
        let mut out = Vec::new();
        loop {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let next = if x.is_multiple_of(2) { a.next().or_else(|| b.next()) } else { b.next().or_else(|| a.next()) };
            match next {
                Some(o) => out.push(o),
                None => return out,
            }
        }
    }

    #[test]
    fn the_same_episodes_whatever_the_order_of_arrival() {
        assert!(drop_pct(8.0, 8.0 * 0.9) < 10.0, "the float boundary this scenario exercises");
        let want = vec![scenario_episode()];
        let all = scenario();
        let (thermal, signals): (Vec<Obs>, Vec<Obs>) = all.iter().cloned().partition(is_thermal);
        // Temperatures first (the agent's normal order: runs come after the probe).
        let mut d = detector(Some(70.0));
        feed(&mut d, thermal.iter().chain(&signals).cloned().collect());
        assert_eq!(stored(&d), want, "temperatures first");
        // Runs and power first.
        let mut d = detector(Some(70.0));
        feed(&mut d, signals.iter().chain(&thermal).cloned().collect());
        assert_eq!(stored(&d), want, "runs first");
        // Each side newest first.
        let mut d = detector(Some(70.0));
        feed(&mut d, thermal.iter().rev().chain(signals.iter().rev()).cloned().collect());
        assert_eq!(stored(&d), want, "each side newest first");
        // Interleaved: 200 random merges of the temperatures (in the order a live stream sends
        // them) with the runs and power samples in any order, one observation at a time.
        for seed in 0..200 {
            let mut d = detector(Some(70.0));
            feed(&mut d, interleaved(&thermal, shuffled(signals.clone(), seed), seed));
            assert_eq!(stored(&d), want, "interleaved, seed {seed}");
        }
    }

    /// One batch of `obs` as the agent sends it (namespace nvme0n1 for runs, drive power as a
    /// `drive`-scope sample of zone nvme0).
    fn batch_of(obs: &[Obs], seq: u64) -> Batch {
        use wattflip_proto::domain::convert_batch;
        let mut b = v1::Batch { agent_id: "h1".into(), sequence: seq, ..Default::default() };
        for o in obs {
            match o {
                Obs::Temperature { time_ns, source, celsius } => b.temperature.push(v1::TemperatureSample {
                    time_ns: *time_ns,
                    source: source.clone(),
                    device: "nvme0".into(),
                    sensor: "Composite".into(),
                    celsius: *celsius,
                }),
                Obs::Run { start_ns, end_ns, pattern, mib_per_s } => {
                    let (p, size) = pattern.split_once('/').unwrap();
                    b.probe_runs.push(v1::ProbeRun {
                        run_id: format!("r{start_ns}{p}"),
                        device: "nvme0n1".into(),
                        bench: "granularity".into(),
                        experiment: format!("granularity/{p}"),
                        pattern: p.into(),
                        io_size_bytes: size.parse().unwrap(),
                        start_ns: *start_ns,
                        end_ns: *end_ns,
                        mib_per_s: *mib_per_s,
                        ..Default::default()
                    })
                }
                Obs::Power { time_ns, watts } => b.power.push(v1::PowerSample {
                    time_ns: *time_ns,
                    source: "nvme_estimate".into(),
                    zone: "nvme0".into(),
                    scope: "drive".into(),
                    method: v1::Method::Estimated as i32,
                    watts: Some(*watts),
                    ..Default::default()
                }),
                Obs::Smart { .. } => unreachable!("not in the scenario"),
            }
        }
        convert_batch("h1", b).unwrap()
    }

    #[test]
    fn the_same_episodes_from_batches_split_across_streams() {
        let want = vec![scenario_episode()];
        let all = scenario();
        let (thermal, signals): (Vec<Obs>, Vec<Obs>) = all.iter().cloned().partition(is_thermal);
        // Live temperatures in batches of three, the probe's runs in one batch at the end, then the
        // same again as a resend after a reconnect: one episode, emitted once as closed.
        let mut d = detector(Some(70.0));
        let mut emitted = Vec::new();
        for (i, chunk) in thermal.chunks(3).enumerate() {
            emitted.extend(d.observe_batch("h1", &batch_of(chunk, i as u64 + 1)));
        }
        emitted.extend(d.observe_batch("h1", &batch_of(&signals, 10)));
        assert_eq!(emitted, want, "temperatures streamed, runs after the probe");
        assert!(d.observe_batch("h1", &batch_of(&all, 11)).is_empty(), "a resent batch changes nothing");
        // Two streams, each carrying half of both sides (odd and even observations), the odd one
        // first: its temperatures show an onset at 24 s, the even one's the real one at 20 s,
        // within the lateness bound. Then the settling reading.
        let (last, early) = all.split_last().unwrap();
        let mut d = detector(Some(70.0));
        let odd: Vec<Obs> = early.iter().skip(1).step_by(2).cloned().collect();
        let even: Vec<Obs> = early.iter().step_by(2).cloned().collect();
        assert!(d.observe_batch("h1", &batch_of(&odd, 1)).is_empty(), "nothing settled yet");
        assert!(d.observe_batch("h1", &batch_of(&even, 1)).is_empty(), "nothing settled yet");
        assert_eq!(d.observe_batch("h1", &batch_of(std::slice::from_ref(last), 2)), want, "split across two streams");
        // Runs in one batch before any temperature, then the temperatures one batch each.
        let mut d = detector(Some(70.0));
        assert!(d.observe_batch("h1", &batch_of(&signals, 1)).is_empty(), "runs alone decide nothing");
        for (i, t) in thermal.iter().enumerate() {
            d.observe_batch("h1", &batch_of(std::slice::from_ref(t), i as u64 + 2));
        }
        assert_eq!(stored(&d), want, "runs first, temperatures after");
    }

    #[test]
    fn a_late_baseline_or_run_gives_a_late_event_rather_than_none() {
        // The hot period is closed and the drop run is known, but its baseline arrives last
        // (another stream): the episode appears then, closed.
        let mut d = detector(Some(70.0));
        let got = feed(&mut d, vec![temp(0, 60.0), temp(20, 75.0), temp(60, 60.0), temp(200, 60.0), run(30, "SW/131072", 700.0)]);
        assert!(got.is_empty(), "no baseline yet: {got:?}");
        let got = feed(&mut d, vec![run(10, "SW/131072", 1000.0)]);
        let mut e = event("temperature", "throughput", "SW/131072", 20, Some(75.0), Some(70.0));
        e.throughput_drop_pct = Some(30.0);
        e.duration_s = 40.0;
        e.ongoing = false;
        assert_eq!(got, vec![e.clone()]);
        // A larger drop of the same period arrives an hour later (within the retention): the
        // episode is emitted again, widened.
        let got = feed(&mut d, vec![temp(3600, 60.0), run(40, "SW/131072", 500.0)]);
        e.throughput_drop_pct = Some(50.0);
        assert_eq!(got, vec![e]);
        // Past the retention, data is dropped: nothing changes.
        assert!(feed(&mut d, vec![temp(RETENTION_NS / S + 7200, 60.0), run(45, "SW/131072", 100.0)]).is_empty());
    }

    #[test]
    fn a_signal_past_the_temperatures_waits_until_the_lateness_bound() {
        // Temperatures stop at 20 s (hot); a drop at 30 s is judged once the drive's newest
        // observation is LATENESS_NS later, with the period still open.
        let mut d = detector(Some(70.0));
        assert!(feed(&mut d, vec![run(0, "SW/131072", 1000.0), temp(20, 75.0), run(30, "SW/131072", 800.0)]).is_empty());
        let later = 30 + LATENESS_NS / S;
        let got = feed(&mut d, vec![run(later, "RR/4096", 100.0)]);
        let mut e = event("temperature", "throughput", "SW/131072", 20, Some(75.0), Some(70.0));
        e.throughput_drop_pct = Some(20.0);
        e.duration_s = 11.0;
        assert_eq!(got, vec![e]);
    }

    #[test]
    fn thresholds_have_a_tolerance() {
        // Exactly 10 % of a throughput of 12 MiB/s (10.8) and of a temperature reaching the
        // limit through float noise.
        assert!(drop_pct(12.0, 12.0 * 0.9) < 10.0);
        let kelvin = 343.15 - 273.150_000_000_000_03; // float noise: 69.99999999999994
        assert!(kelvin < 70.0);
        let mut d = detector(Some(70.0));
        feed(&mut d, vec![temp(0, 60.0), run(1, "SW/131072", 12.0), temp(2, kelvin), run(3, "SW/131072", 12.0 * 0.9), temp(9, 60.0), temp(200, 60.0)]);
        let mut e = event("temperature", "throughput", "SW/131072", 2, Some(kelvin), Some(70.0));
        e.throughput_drop_pct = Some(drop_pct(12.0, 12.0 * 0.9));
        e.duration_s = 7.0;
        e.ongoing = false;
        assert_eq!(stored(&d), vec![e]);
    }

    #[test]
    fn the_critical_threshold_triggers_when_the_drive_reports_no_warning_threshold() {
        // CCTEMP 85 °C only: 84.85 °C is no trigger, 86 °C is, and the drop makes it an episode.
        let mut d = detector_with(None, Some(85.0));
        feed(
            &mut d,
            vec![
                run(0, "SW/131072", 2000.0),
                temp(5, 84.85),
                run(6, "SW/131072", 1990.0),  // still normal: the new baseline
                temp(10, 86.0),               // onset
                run(12, "SW/131072", 1592.0), // 20 % below 1990
                temp(30, 84.0),               // recovery
                temp(200, 60.0),
            ],
        );
        let mut closed = event("critical_temperature", "throughput", "SW/131072", 10, Some(86.0), None);
        closed.critical_celsius = Some(85.0);
        closed.throughput_drop_pct = Some(20.0);
        closed.duration_s = 20.0;
        closed.ongoing = false;
        assert_eq!(stored(&d), vec![closed]);
        // With both thresholds the warning one triggers (throttling starts there), and the event
        // carries both.
        let mut d = detector_with(Some(70.0), Some(85.0));
        let got = feed(&mut d, vec![run(0, "SW/131072", 1000.0), temp(1, 72.0), temp(200, 72.0), run(2, "SW/131072", 500.0)]);
        let mut e = event("temperature", "throughput", "SW/131072", 1, Some(72.0), Some(70.0));
        e.critical_celsius = Some(85.0);
        e.throughput_drop_pct = Some(50.0);
        e.duration_s = 2.0;
        assert_eq!(got, vec![e]);
        // Neither threshold known: a temperature alone never triggers.
        let mut d = detector_with(None, None);
        assert!(feed(&mut d, vec![run(0, "SW/131072", 1000.0), temp(1, 120.0), run(2, "SW/131072", 100.0), temp(200, 120.0)]).is_empty());
    }

    #[test]
    fn thermal_counters_with_a_power_drop_and_no_threshold() {
        let mut d = detector(None);
        feed(
            &mut d,
            vec![
                smart(0, 0, 0),
                power(10, 10.0),
                power(20, 10.0),
                smart(60, 1, 0), // TMT1 transition: onset
                power(70, 8.5),  // 15 % below the 10 W mean
                run(75, "RW/4096", 200.0),
                smart(120, 1, 0), // counters still: recovered
                smart(200, 1, 0),
            ],
        );
        let mut closed = event("thermal_counters", "power", "", 60, Some(80.0), None);
        closed.power_drop_pct = Some(15.0);
        closed.duration_s = 60.0;
        closed.ongoing = false;
        assert_eq!(stored(&d), vec![closed]);
    }

    /// A record without counters (smartctl's NVMe log has none) between two nvme-cli records
    /// that read the same: nothing moved. Read as zeros, the second record would look like a
    /// TMT1 transition and the power drop after it like throttling.
    #[test]
    fn a_record_without_counters_neither_fires_nor_forgets_them() {
        let mut d = detector(None);
        let bare = |t: i64| Obs::Smart { time_ns: T0 + t * S, critical_warning: 0, counters: [None; 5], composite_celsius: None };
        feed(&mut d, vec![smart(0, 3, 0), power(10, 10.0), power(20, 10.0), bare(30), smart(60, 3, 0), power(70, 8.5)]);
        assert_eq!(stored(&d), Vec::<ThrottleEvent>::new());
    }

    #[test]
    fn critical_warning_bit_and_both_signals_merge() {
        let mut d = detector(Some(90.0));
        feed(
            &mut d,
            vec![
                power(1, 12.0),
                run(2, "SW/131072", 2000.0),
                smart(5, 0, 2), // bit 1 set (e.g. a lowered threshold, as in QEMU)
                run(6, "SW/131072", 1500.0),
                power(8, 9.0),
                smart(20, 0, 0),
                smart(200, 0, 0),
            ],
        );
        let mut closed = event("critical_warning", "throughput+power", "SW/131072", 5, Some(80.0), Some(90.0));
        closed.throughput_drop_pct = Some(25.0);
        closed.power_drop_pct = Some(25.0);
        closed.duration_s = 15.0;
        closed.ongoing = false;
        assert_eq!(stored(&d), vec![closed]);
    }

    #[test]
    fn series_that_must_not_trigger() {
        // Hot, but throughput stays within 10 % (9.9 % below).
        let mut d = detector(Some(70.0));
        assert!(feed(&mut d, vec![run(0, "SR/131072", 1000.0), temp(1, 75.0), run(2, "SR/131072", 901.0), temp(3, 60.0), temp(200, 60.0)]).is_empty());
        // A 30 % drop without any thermal trigger (e.g. a GC pause).
        let mut d = detector(Some(70.0));
        assert!(feed(&mut d, vec![temp(0, 50.0), run(1, "SW/131072", 1000.0), run(2, "SW/131072", 700.0), temp(200, 50.0)]).is_empty());
        // Hot, but the slow pattern has no pre-trigger value to compare with.
        let mut d = detector(Some(70.0));
        assert!(feed(&mut d, vec![run(0, "SR/131072", 1000.0), temp(1, 75.0), run(2, "SW/131072", 100.0), temp(3, 60.0), temp(200, 60.0)]).is_empty());
        // Below the threshold (69.85 °C vs 70): no trigger even with a drop.
        let mut d = detector(Some(70.0));
        assert!(feed(&mut d, vec![run(0, "SW/131072", 1000.0), temp(1, 69.85), run(2, "SW/131072", 500.0), temp(200, 69.85)]).is_empty());
        // Counters that never move; power falls.
        let mut d = detector(None);
        assert!(feed(&mut d, vec![smart(0, 3, 0), power(1, 10.0), smart(2, 3, 0), power(3, 5.0), smart(200, 3, 0)]).is_empty());
    }

    #[test]
    fn resent_observations_do_not_duplicate_and_hosts_are_independent() {
        let mut d = detector(Some(70.0));
        let series = vec![run(0, "SW/131072", 1000.0), temp(1, 75.0), run(2, "SW/131072", 500.0), temp(200, 75.0)];
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
        let t = |s: i64, c: f64| v1::TemperatureSample {
            time_ns: T0 + s * S,
            source: "hwmon".into(),
            device: "nvme0".into(),
            sensor: "Composite".into(),
            celsius: c,
        };
        let b = v1::Batch {
            agent_id: "h1".into(),
            sequence: 1,
            probe_runs: vec![pr(0, 1000.0), pr(10, 880.0)],
            temperature: vec![t(5, 71.0), t(12, 71.5), t(200, 72.0)],
            ..Default::default()
        };
        let got = d.observe_batch("h1", &convert_batch("h1", b).unwrap());
        let mut e = event("temperature", "throughput", "SW/131072", 5, Some(71.0), Some(70.0));
        e.throughput_drop_pct = Some(12.0);
        e.duration_s = 7.0;
        assert_eq!(got, vec![e]);
    }
}
