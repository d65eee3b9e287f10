//! Fleet-wide thermal-throttling detection in event time: a pure detector fed with every agent's
//! batches, one state per (host, drive), whose episodes do not depend on the order or the batches
//! in which the observations arrive.
//!
//! Rule (issue 5; Zhang et al. in docs/sources-and-drives.md §8.2: a self-throttling SSD drops power ~15 % and
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
//! **Event time, incrementally.** Each drive keeps its thermal observations in a log ordered by
//! (time, stream) and folds them into a running state as they arrive (`thermal.rs`): one in order
//! costs O(1), one out of order marks the state for one replay of the log, and the log keeps only
//! the observations that change the state (crossings, moved counters) plus each stream's newest,
//! so it stays a few entries per stream however fast readings come. Runs and drive power are kept
//! in time order, and each hot period has a running judgement that every batch advances over the
//! signals that are new (`drive.rs`); a period is judged again from its onset only when something
//! before its onset changed. The lateness bound is [`Bounds::lateness_ns`] (2 minutes) behind the
//! newest observation of the drive:
//! - a signal is judged once the thermal side has reached its timestamp (a thermal observation at
//!   or after it), or once it is behind the lateness bound (a drive whose temperatures stopped);
//! - an episode is first emitted once its onset is behind the lateness bound, so a temperature
//!   arriving out of order within the bound (another stream, a resend) can still move the onset;
//!   after that, every change re-emits it (same onset, so it replaces the stored point).
//!
//! An agent streams temperatures live and sends a probe's runs after the probe, so runs are
//! normally judged as they arrive, and runs that arrive first wait for the temperatures. Data up
//! to [`Bounds::retention_ns`] behind the newest observation still changes its episode: a late
//! run, a late baseline or a late temperature re-emits it (a late event rather than none). What
//! this cannot repair: a temperature arriving more than the lateness bound out of order after its
//! onset was emitted (the old onset stays stored next to the new one; points are never
//! retracted), and data older than the retention, or than what the per-drive caps forced out of
//! the log: it is **counted** (`late_readings`, the metric
//! `wattflip_collector_throttle_late_readings_total` and a WARN), never placed. Resent batches
//! change nothing (every observation is keyed by its stream and timestamp).
//!
//! **Bounded state.** Per drive: at most [`Bounds::max_thermal`] logged thermal observations,
//! [`Bounds::max_runs`] runs (plus the last run of each pattern), and the episodes of the periods
//! within the retention. Drive power is kept as sent only within the lateness bound; behind it
//! only the samples a judgement can still use (`power.rs`: the baselines before each onset and
//! the lowest-so-far samples of each hot period), so a drive sending power at 1 Hz keeps ~130
//! samples instead of the 6-hour retention's 16,384 (at most [`Bounds::max_power`] in any case). Per host: its drives. The
//! detector is sharded by host ([`Sharded`]): streams of different hosts never wait for each other.
//!
//! Thresholds are compared with a tolerance ([`PCT_TOLERANCE`], [`CELSIUS_TOLERANCE`]): a drop of
//! exactly 10 % computed as 9.999999999999998 % is a 10 % drop.
//!
//! To add a trigger, add a `Thermal` variant and handle it in `ThermalState::apply`; to add a
//! signal, add an [`Obs`] variant, store it in `Drive` and fold it in `Drive::judge`.

mod drive;
mod power;
mod thermal;

use drive::Drive;
pub use drive::Retained;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
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
pub use thermal::CELSIUS_TOLERANCE;
/// Normal-state power samples averaged into the power baseline.
pub const POWER_BASELINE_SAMPLES: usize = 10;
/// The default lateness bound (2 minutes).
pub const LATENESS_NS: i64 = 120 * 1_000_000_000;
/// The default retention (6 hours: a long probe's runs arrive after it ends).
pub const RETENTION_NS: i64 = 6 * 3600 * 1_000_000_000;

/// What the detector keeps per drive, and for how long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// A signal this much older than the drive's newest observation is judged even if no thermal
    /// observation has reached its timestamp yet; an onset is emitted once this far behind.
    pub lateness_ns: i64,
    /// How far behind the drive's newest observation data is kept and can still change an episode.
    pub retention_ns: i64,
    /// Logged thermal observations per drive (crossings, state-changing SMART records, each
    /// stream's newest); beyond it the oldest are folded into the settled state early.
    pub max_thermal: usize,
    /// Runs per drive (the last run of each pattern is kept beyond it).
    pub max_runs: usize,
    /// Drive power samples per drive.
    pub max_power: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds { lateness_ns: LATENESS_NS, retention_ns: RETENTION_NS, max_thermal: 4096, max_runs: 16_384, max_power: 16_384 }
    }
}

fn drop_pct(base: f64, now: f64) -> f64 {
    // (b − v) · 100 / b keeps round numbers exact (1000 → 850 MiB/s is exactly 15 %).
    (base - now) * 100.0 / base
}

fn is_drop(pct: f64, threshold: f64) -> bool {
    pct >= threshold - PCT_TOLERANCE
}

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

/// One host's drives (sorted, so a batch's episodes come out in device order) and its
/// namespace → drive mapping from the inventory.
#[derive(Debug, Default)]
struct Host {
    /// Boxed: a map node holds 11 entries inline, and with one or two drives per host unboxed
    /// `Drive`s made each host's first node ~9 KiB (heaptrack at 2,000 agents, docs/benchmarks.md).
    drives: BTreeMap<String, Box<Drive>>,
    namespaces: BTreeMap<String, String>,
    /// Scratch: a batch's composite temperatures in (device, time, source) order, reused.
    order: Vec<u32>,
}

impl Host {
    fn drive(&mut self, device: &str) -> &mut Drive {
        // Looked up by &str: a known drive costs no allocation.
        if !self.drives.contains_key(device) {
            self.drives.insert(device.to_string(), Box::default());
        }
        match self.drives.get_mut(device) {
            Some(d) => d,
            None => unreachable!("inserted above"),
        }
    }

    /// The drive a block device belongs to: the inventory's mapping, else `nvme0n1` → `nvme0`.
    fn drive_of<'a>(&'a self, device: &'a str) -> &'a str {
        if let Some(d) = self.namespaces.get(device) {
            return d;
        }
        if let Some(rest) = device.strip_prefix("nvme") {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0 && rest[digits..].starts_with('n') {
                return &device[..4 + digits];
            }
        }
        device
    }

    fn observe(&mut self, device: &str, obs: Obs, b: &Bounds) {
        let d = self.drive(device);
        match obs {
            Obs::Temperature { time_ns, source, celsius } => d.temperature(time_ns, &source, celsius, b),
            Obs::Smart { time_ns, critical_warning, counters, composite_celsius } => d.smart(time_ns, critical_warning, counters, composite_celsius, b),
            Obs::Run { start_ns, end_ns, pattern, mib_per_s } => d.run(start_ns, end_ns, &pattern, mib_per_s, b),
            Obs::Power { time_ns, watts } => d.power(time_ns, watts, b),
        }
    }

    /// Feeds every relevant record of a batch without copying it.
    fn feed(&mut self, batch: &Batch, b: &Bounds) {
        // Thresholds are defined on the composite temperature (docs/sources-and-drives.md §5.4). An agent sends
        // each source's readings together; in time order per drive they apply to the running
        // state one by one instead of making it replay.
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        order.extend((0..batch.temperature.len() as u32).filter(|&i| batch.temperature[i as usize].sensor == "Composite"));
        let key = |i: &u32| {
            let t = &batch.temperature[*i as usize];
            (t.device.as_str(), t.time.0, t.source.as_str())
        };
        // Readings already in strictly increasing time (a sampler's batch) are in order per drive.
        if !order.windows(2).all(|w| batch.temperature[w[0] as usize].time.0 < batch.temperature[w[1] as usize].time.0) {
            order.sort_unstable_by(|x, y| key(x).cmp(&key(y)));
        }
        for &i in &order {
            let t = &batch.temperature[i as usize];
            self.drive(&t.device).temperature(t.time.0, &t.source, t.celsius.0, b);
        }
        self.order = order;
        for s in &batch.nvme_smart {
            let counters = [s.thm_temp1_trans_count, s.thm_temp2_trans_count, s.thm_temp1_total_time_s, s.thm_temp2_total_time_s, s.warning_temp_time_min];
            self.drive(&s.device).smart(s.time_ns, s.critical_warning, counters, s.composite_celsius, b);
        }
        for r in &batch.probe_runs {
            let drive = self.drive_of(&r.device).to_string();
            let d = self.drive(&drive);
            d.run(r.start_ns, r.end_ns, &format!("{}/{}", r.pattern, r.io_size_bytes), r.mib_per_s, b);
            let secs = (r.end_ns - r.start_ns) as f64 / 1e9;
            if let (Some(j), true) = (r.energy_j, secs > 0.0) {
                d.power(r.end_ns, j / secs, b);
            }
        }
        for p in batch.power.iter().filter(|p| p.scope == "drive") {
            if let Some(w) = p.watts {
                let drive = self.drive_of(&p.zone).to_string();
                self.drive(&drive).power(p.time.0, w.0, b);
            }
        }
    }

    fn update(&mut self, b: &Bounds, late: &mut u64) -> Vec<ThrottleEvent> {
        let mut out = Vec::new();
        for (device, d) in self.drives.iter_mut().filter(|(_, d)| d.touched) {
            *late += std::mem::take(&mut d.late);
            out.extend(d.update(device, b));
        }
        out
    }
}

/// The detector: per (host, device) state. Not thread-safe by itself; [`Sharded`] puts hosts
/// behind separate locks (it is pure computation, no I/O under a lock).
#[derive(Debug, Default)]
pub struct ThrottleDetector {
    hosts: HashMap<String, Host>,
    bounds: Bounds,
    /// Observations counted as too late to place (older than the retention or the settled log).
    pub late_readings: u64,
}

impl ThrottleDetector {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_bounds(bounds: Bounds) -> Self {
        ThrottleDetector { bounds, ..Default::default() }
    }

    fn host(&mut self, host: &str) -> &mut Host {
        if !self.hosts.contains_key(host) {
            self.hosts.insert(host.to_string(), Host::default());
        }
        match self.hosts.get_mut(host) {
            Some(h) => h,
            None => unreachable!("inserted above"),
        }
    }

    /// Thresholds and namespace → drive mapping from an agent's Hello inventory.
    pub fn set_inventory(&mut self, host: &str, inv: &v1::Inventory) {
        let h = self.host(host);
        for l in &inv.drive_thermal_limits {
            for n in &l.namespaces {
                h.namespaces.insert(n.clone(), l.device.clone());
            }
            let d = h.drive(&l.device);
            d.set_limits((l.warning_celsius > 0.0).then_some(l.warning_celsius), (l.critical_celsius > 0.0).then_some(l.critical_celsius));
        }
        for s in &inv.storage_devices {
            if !s.controller.is_empty() && s.controller != s.name {
                h.namespaces.insert(s.name.clone(), s.controller.clone());
            }
        }
    }

    /// Feeds one observation of `device` on `host`; the episodes it created or changed.
    pub fn observe(&mut self, host: &str, device: &str, obs: Obs) -> Vec<ThrottleEvent> {
        let b = self.bounds;
        let h = self.host(host);
        h.observe(device, obs, &b);
        let mut late = 0;
        let out = h.update(&b, &mut late);
        self.late_readings += late;
        out
    }

    /// Feeds every relevant record of a batch; the episodes it created or changed.
    pub fn observe_batch(&mut self, host: &str, batch: &Batch) -> Vec<ThrottleEvent> {
        let b = self.bounds;
        let h = self.host(host);
        h.feed(batch, &b);
        let mut late = 0;
        let out = h.update(&b, &mut late);
        self.late_readings += late;
        out
    }

    /// Every episode of `host` as last emitted, by (device, onset): what InfluxDB holds.
    pub fn episodes(&self, host: &str) -> BTreeMap<(String, i64), ThrottleEvent> {
        let Some(h) = self.hosts.get(host) else { return BTreeMap::new() };
        h.drives.iter().flat_map(|(dev, d)| d.emitted().iter().map(move |(t, e)| ((dev.clone(), *t), e.clone()))).collect()
    }

    /// What the detector holds, summed over every drive.
    pub fn retained(&self) -> Retained {
        let mut r = Retained::default();
        for d in self.hosts.values().flat_map(|h| h.drives.values()) {
            let x = d.retained();
            r.drives += x.drives;
            r.thermal += x.thermal;
            r.runs += x.runs;
            r.power += x.power;
            r.episodes += x.episodes;
        }
        r
    }

    /// Observations applied to a thermal state plus signals visited while judging, summed over
    /// every drive: the detector's work, which the bound tests hold against the samples fed.
    pub fn work(&self) -> u64 {
        self.hosts.values().flat_map(|h| h.drives.values()).map(|d| d.work()).sum()
    }
}

/// The detector sharded by host behind [`SHARDS`] locks: one stream holds only its host's shard,
/// for the few microseconds its batch takes, so streams of different hosts proceed in parallel.
#[derive(Debug)]
pub struct Sharded {
    shards: Vec<Mutex<ThrottleDetector>>,
}

/// Shards of [`Sharded`]: well above the cores a collector has, so two busy hosts rarely share one.
pub const SHARDS: usize = 64;

impl Default for Sharded {
    fn default() -> Self {
        Self::with_bounds(Bounds::default())
    }
}

impl Sharded {
    pub fn with_bounds(bounds: Bounds) -> Self {
        Sharded { shards: (0..SHARDS).map(|_| Mutex::new(ThrottleDetector::with_bounds(bounds))).collect() }
    }

    /// The shard of `host`; a panic elsewhere must not stop ingestion, so a poisoned lock is taken
    /// as is.
    pub fn lock(&self, host: &str) -> std::sync::MutexGuard<'_, ThrottleDetector> {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let i = BuildHasherDefault::<DefaultHasher>::default().hash_one(host) as usize % self.shards.len();
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Observations counted as too late to place, over every shard.
    pub fn late_readings(&self) -> u64 {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).late_readings).sum()
    }
}

#[cfg(test)]
mod tests;
