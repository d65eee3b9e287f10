//! What `run` does on each tick and beside it: reads the sensors read on the tick (each failing
//! one degrades only itself: its error becomes an event once per distinct error), splits power
//! sources into those read on the tick and those the fast sampler threads read
//! (`sensors::sampler`), and polls drive health on its own interval. Every read is timed into the
//! agent's metrics. A new kind of reading read on the tick is one loop in [`sample`].

use crate::clock::Clock;
use crate::config::Config;
use crate::drives::monitor::DriveMonitor;
use crate::drives::pool::{HealthPool, UtcClock};
use crate::events::event;
use crate::export::grpc::ExportSummary;
use crate::export::telemetry::AgentMetrics;
use crate::sensors::{Discovered, PowerSensor};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wattflip_proto::v1;

#[derive(Debug, Default, Clone)]
pub struct RunSummary {
    pub ticks: u64,
    pub power_samples: u64,
    pub temperature_samples: u64,
    pub electrical_samples: u64,
    pub sensor_errors: u64,
    pub export: ExportSummary,
}

/// Reads drive health through a [`HealthPool`]: every drive on its own `interval` on one of
/// `workers` threads, so a hung drive delays only itself; what finished goes out as its own batch,
/// a few times per interval. Runs until `stop` turns true; reads still running then are waited for
/// (up to `wait`, the tool deadline) and sent. Every run reads each drive at least once. Returns
/// (temperature samples, failed tool calls).
pub async fn monitor_loop(
    mut monitor: DriveMonitor,
    (interval, workers, wait): (Duration, usize, Duration),
    clock: Clock,
    tx: tokio::sync::mpsc::Sender<v1::Batch>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> (u64, u64) {
    let utc: UtcClock = Arc::new(move || clock.utc_now());
    let mut pool = match HealthPool::new(&monitor, interval, workers, utc, Instant::now()) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!("cannot start the drive reader threads ({e}); drive temperatures are not read");
            return (0, 0);
        }
    };
    // Often enough that a read starts within a small part of its interval, rarely enough to cost
    // nothing (a step only looks at clocks and channels).
    let mut ticker = tokio::time::interval((interval / 20).clamp(Duration::from_millis(10), Duration::from_millis(500)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut samples, mut errors) = (0, 0);
    loop {
        tokio::select! {
            // The first tick is immediate and wins over a stop that is already set, so every run
            // reads the drives at least once.
            biased;
            _ = ticker.tick() => {}
            _ = stop.changed() => {}
        }
        let stopping = *stop.borrow();
        let mut poll = pool.step(&mut monitor, Instant::now());
        if stopping {
            poll.merge(tokio::task::block_in_place(|| pool.finish(&mut monitor, Instant::now() + wait)));
        }
        samples += poll.temperature.len() as u64;
        errors += poll.errors;
        let mut batch = v1::Batch::default();
        poll.into_batch(&mut batch);
        if batch != v1::Batch::default() && tx.send(batch).await.is_err() {
            break;
        }
        if stopping {
            break;
        }
    }
    (samples, errors)
}

/// Per-sensor memory of the sampler.
#[derive(Default)]
pub struct SamplerState {
    /// Each sensor's last error text, so a persistent failure is reported once, not every tick.
    pub last_error: HashMap<String, String>,
    /// Monotonic time of the last read of sources read less often than every tick.
    pub last_read: HashMap<String, u64>,
    /// Read interval of each sensor left in `found.power` (same order).
    pub periods: Vec<Duration>,
    /// The tick (`sampling.interval`).
    pub tick: Duration,
    /// Where and how often to look for power sources that appeared after start-up.
    pub rediscovery: Option<Rediscovery>,
}

/// Sysfs sources found after start-up (a driver loaded late, a zone unreadable at start) are
/// sampled like those found at start (`samplers::place`): every `every`, the sysfs tree is scanned
/// again for zones not sampled yet.
pub struct Rediscovery {
    pub sysfs_root: std::path::PathBuf,
    pub kinds: crate::sensors::SensorKinds,
    pub every: Duration,
    /// `(source, zone)` of every source sampled (on the tick or by a fast sampler).
    pub known: std::collections::HashSet<(String, String)>,
    pub last_ns: u64,
}

/// How often sysfs is scanned again for new power sources.
pub const REDISCOVER_EVERY: Duration = Duration::from_secs(30);

/// The sysfs power sources that appeared since the last scan (when a scan is due), each announced
/// by a `sensor_available` event in `batch` that says how often it is read; the caller places them
/// (`samplers::place`). New sources reach the inventory at the next Hello.
pub fn rediscover(cfg: &Config, clock: &Clock, batch: &mut v1::Batch, state: &mut SamplerState) -> Vec<Box<dyn PowerSensor>> {
    let Some(r) = state.rediscovery.as_mut() else { return Vec::new() };
    let (mono, utc) = clock.now();
    if mono.saturating_sub(r.last_ns) < u64::try_from(r.every.as_nanos()).unwrap_or(u64::MAX) {
        return Vec::new();
    }
    r.last_ns = mono;
    let new = crate::sensors::rediscover(&r.sysfs_root, &r.kinds, &r.known);
    for s in &new {
        let d = s.describe();
        tracing::info!(zone = %d.zone, path = %d.path, "new power source");
        let every = power_period(cfg, s.as_ref());
        let msg = format!("new {} power source {} ({}), read every {every:?} from now on", d.source, d.zone, d.path);
        batch.events.push(crate::events::event(utc, "sensor_available", v1::Severity::Info, &d.zone, msg));
        r.known.insert((d.source, d.zone));
    }
    new
}

/// The read interval of a power source: its `[sampling.power_intervals]` override, else
/// `sampling.power_interval` but no faster than the source allows (a BMC updates about once a
/// second; the NVMe estimate costs an admin command per read).
pub fn power_period(cfg: &Config, sensor: &dyn PowerSensor) -> Duration {
    let source = sensor.describe().source;
    cfg.power_intervals.get(&source).unwrap_or_else(|| cfg.power_interval.max(sensor.min_interval()))
}

pub type Timed = (Box<dyn PowerSensor>, Duration);

/// Splits the power sensors into those read faster than the tick, grouped by source (one sampler
/// thread each, so a slow `ipmitool` call never delays the 1 kHz grid of RAPL or hwmon), and those
/// read on the tick itself (raw samples, as without fast sampling).
pub fn split_by_rate(cfg: &Config, sensors: Vec<Box<dyn PowerSensor>>) -> (Vec<(String, Vec<Timed>)>, Vec<Timed>) {
    let mut fast: Vec<(String, Vec<Timed>)> = Vec::new();
    let mut slow = Vec::new();
    for s in sensors {
        let period = power_period(cfg, s.as_ref());
        if period >= cfg.sampling_interval {
            slow.push((s, period));
            continue;
        }
        let source = s.describe().source;
        match fast.iter_mut().find(|(name, _)| *name == source) {
            Some((_, group)) => group.push((s, period)),
            None => fast.push((source, vec![(s, period)])),
        }
    }
    (fast, slow)
}

/// Samples every sensor once into `batch`.
pub fn sample(found: &mut Discovered, clock: &Clock, batch: &mut v1::Batch, state: &mut SamplerState, summary: &mut RunSummary, metrics: &AgentMetrics) {
    let last_error = &mut state.last_error;
    for (i, s) in found.power.iter_mut().enumerate() {
        let d = s.describe();
        let key = format!("power:{}:{}", d.source, d.zone);
        let (mono, utc) = clock.now();
        // Sources slower than the tick are read on the tick that reaches their interval; half a
        // tick of slack keeps timer jitter from pushing a read to the tick after.
        let period = state.periods.get(i).copied().unwrap_or_default();
        if period > state.tick {
            let wait = u64::try_from((period - state.tick / 2).as_nanos()).unwrap_or(u64::MAX);
            if state.last_read.get(&key).is_some_and(|&t| mono.saturating_sub(t) < wait) {
                continue;
            }
            state.last_read.insert(key.clone(), mono);
        }
        let started = Instant::now();
        // Stamped at the read's own instant: counters time themselves around their read.
        let (at, r) = s.read_timed(&mut || clock.now().0);
        let utc = utc.saturating_add(i64::try_from(at.saturating_sub(mono)).unwrap_or(i64::MAX));
        metrics.sensor_reads.record(&key, started.elapsed(), r.is_ok());
        batch.events.extend(s.take_notices().into_iter().map(|n| crate::sensors::sampler::notice_event(n, &d.zone, utc)));
        match r {
            Ok(Some(r)) => {
                last_error.remove(&key);
                summary.power_samples += 1;
                batch.power.push(r.sample(d, utc));
            }
            Ok(None) => {}
            Err(e) => report(&key, &d.zone, e.to_string(), utc, batch, last_error, summary),
        }
    }
    for t in found.temperature.iter_mut() {
        let d = t.describe();
        let key = format!("temp:{}:{}:{}", d.source, d.device, d.sensor);
        let utc = clock.utc_now();
        let started = Instant::now();
        let r = t.read();
        metrics.sensor_reads.record(&key, started.elapsed(), r.is_ok());
        match r {
            Ok(c) => {
                last_error.remove(&key);
                summary.temperature_samples += 1;
                batch.temperature.push(v1::TemperatureSample { time_ns: utc, source: d.source, device: d.device, sensor: d.sensor, celsius: c.0 });
            }
            Err(e) => report(&key, &d.device, e.to_string(), utc, batch, last_error, summary),
        }
    }
    // Voltages and currents go with the temperatures, once per tick, not at the power rate: they
    // are context (PSU line voltage, rail droop, which rail draws) that moves slowly, the power
    // they multiply to is already sampled at up to 1 kHz, and a 1 kHz read of every in*/curr*
    // channel would multiply the sampler's reads and the points written for no new energy figure.
    for e in found.electrical.iter_mut() {
        let c = e.describe();
        let key = format!("electrical:{}:{}:{}", c.source, c.chip, c.channel);
        let utc = clock.utc_now();
        let started = Instant::now();
        let r = e.read();
        metrics.sensor_reads.record(&key, started.elapsed(), r.is_ok());
        match r {
            Ok(v) => {
                last_error.remove(&key);
                summary.electrical_samples += 1;
                batch.electrical.push(v.sample(c, utc));
            }
            Err(e) => report(&key, &c.chip, e.to_string(), utc, batch, last_error, summary),
        }
    }
}

fn report(key: &str, device: &str, msg: String, utc: i64, batch: &mut v1::Batch, last_error: &mut HashMap<String, String>, summary: &mut RunSummary) {
    summary.sensor_errors += 1;
    if last_error.get(key) != Some(&msg) {
        tracing::warn!(sensor = key, "{msg}");
        batch.events.push(event(utc, "sensor_error", v1::Severity::Warning, device, msg.clone()));
        last_error.insert(key.to_string(), msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sensors::{discover_all, PowerReading, PowerSensor, SensorError, SensorKinds};

    fn runner() -> std::sync::Arc<dyn wattflip_drives::CommandRunner> {
        std::sync::Arc::new(wattflip_drives::SystemRunner::new())
    }

    fn fixture(scenario: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs").join(scenario).join("sys")
    }

    /// A source with a BMC-like minimum interval (the IPMI sensor needs ipmitool to exist).
    struct Bmc;

    impl PowerSensor for Bmc {
        fn describe(&self) -> v1::PowerSource {
            v1::PowerSource { source: "ipmi".into(), zone: "dcmi".into(), ..Default::default() }
        }

        fn read(&mut self, _now_ns: u64) -> Result<Option<PowerReading>, SensorError> {
            Ok(None)
        }

        fn min_interval(&self) -> Duration {
            Duration::from_secs(1)
        }
    }

    fn config(sampling: &str) -> Config {
        let text = format!("[sampling]\n{sampling}\n[tls]\ninsecure_plaintext_loopback_only = true\n");
        Config::from_str(std::path::Path::new("agent.toml"), &text).unwrap()
    }

    /// (zone, period) of each sensor.
    type Zones = Vec<(String, Duration)>;

    fn layout(cfg: &Config) -> (Vec<(String, Zones)>, Zones) {
        let mut sensors = discover_all(&fixture("rapl-only"), &SensorKinds::default(), &runner()).power;
        sensors.retain(|s| s.describe().zone == "package-0");
        sensors.extend(discover_all(&fixture("ina226"), &SensorKinds::default(), &runner()).power);
        sensors.push(Box::new(Bmc));
        let (fast, slow) = split_by_rate(cfg, sensors);
        let named = |v: Vec<Timed>| v.into_iter().map(|(s, p)| (s.describe().zone, p)).collect::<Vec<_>>();
        (fast.into_iter().map(|(source, v)| (source, named(v))).collect(), named(slow))
    }

    #[test]
    fn each_source_gets_its_own_rate_and_thread() {
        let ms = Duration::from_millis;
        // One power_interval for all: the BMC still no faster than its 1 s.
        let (fast, slow) = layout(&config("interval = \"1s\"\npower_interval = \"10ms\""));
        assert_eq!(
            fast,
            vec![("rapl".to_string(), vec![("package-0".to_string(), ms(10))]), ("hwmon".to_string(), vec![("ina226-0-0040/power1".to_string(), ms(10))]),]
        );
        assert_eq!(slow, vec![("dcmi".to_string(), ms(1000))]);
        // Overrides: hwmon at 1 kHz, RAPL on the tick, IPMI at 1 Hz inside 5 s windows.
        let (fast, slow) = layout(&config("interval = \"5s\"\npower_interval = \"5s\"\n[sampling.power_intervals]\nhwmon = \"1ms\"\nipmi = \"1s\""));
        assert_eq!(
            fast,
            vec![("hwmon".to_string(), vec![("ina226-0-0040/power1".to_string(), ms(1))]), ("ipmi".to_string(), vec![("dcmi".to_string(), ms(1000))]),]
        );
        assert_eq!(slow, vec![("package-0".to_string(), ms(5000))]);
    }
}
