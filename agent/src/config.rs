//! Agent configuration: strict TOML (unknown keys rejected, every problem reported at once with
//! its dotted path). Add a setting as a field of a `Raw*` struct, its check in [`Config::from_file`]
//! and a line in `agent/agent.example.toml`.

use crate::probes::values::BASELINES;
use crate::probes::{parse_benches, parse_format, parse_size, EnergyOptions, PlanOverrides, ProbeArgs, ValuesProfile};
use crate::schedule::ProbeJob;
use crate::drives::sweep::SweepPattern;
use crate::export::spool::{SpoolConfig, SyncPolicy};
use crate::sensors::SensorKinds;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use wattflip_proto::domain::{check_agent_id, check_label, MAX_LABELS};
use wattflip_infra::tls::{is_loopback_host, url_host, RawTls, TlsMode};
use wattflip_infra::tomlcfg::{parse_duration, ConfigError, Loader};

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub agent_id: String,
    pub hostname: String,
    pub labels: BTreeMap<String, String>,
    pub collector: CollectorConfig,
    pub sampling_interval: Duration,
    /// How often power sources are read; readings are aggregated per `sampling_interval` window.
    pub power_interval: Duration,
    /// Per-source read intervals (`[sampling.power_intervals]`), overriding `power_interval`.
    pub power_intervals: PowerIntervals,
    pub sysfs_root: PathBuf,
    pub kinds: SensorKinds,
    pub backlog_max_batches: usize,
    pub probes: Vec<ProbeJob>,
    pub drives: DrivesConfig,
    /// None only for [`Config::defaults`] (inventory and local probes, which stream nothing).
    pub tls: Option<TlsMode>,
    /// Disk spool; None keeps unacknowledged batches in memory (`buffer.max_batches`).
    pub spool: Option<SpoolConfig>,
    /// `GET /metrics` (Prometheus text format) is served here when set.
    pub metrics_listen: Option<SocketAddr>,
}

/// `[drives]`: nvme-cli and smartctl (inventory, temperatures, SMART) and the power governor.
#[derive(Debug, Clone, PartialEq)]
pub struct DrivesConfig {
    /// Use nvme-cli (inventory, power states, `smart-log` temperatures, governor).
    pub nvme_cli: bool,
    /// Use smartctl (SATA/SAS inventory, temperatures of every drive).
    pub smartctl: bool,
    /// The nvme-cli executable (name on PATH or absolute path).
    pub nvme_path: String,
    /// The smartctl executable.
    pub smartctl_path: String,
    /// Deadline of one tool call; the child is killed after it (hardware.md §9: 10–15 s).
    pub timeout: Duration,
    /// How often SMART logs are read (temperatures from the tools, `nvme_smart`, critical warnings).
    pub smart_interval: Duration,
    /// Where the governor's restore state files live (must survive a crash; not tmpfs on reboot is fine).
    pub state_dir: PathBuf,
    /// Serials of block devices a governor sweep may write to.
    pub destroy_consent: Vec<String>,
    /// Patterns a governor sweep measures in each power state.
    pub sweep_patterns: Vec<SweepPattern>,
    /// Pause after each power-state change before measuring (entry latency, thermal settling).
    pub sweep_settle: Duration,
}

impl Default for DrivesConfig {
    fn default() -> Self {
        DrivesConfig {
            nvme_cli: true,
            smartctl: true,
            nvme_path: "nvme".into(),
            smartctl_path: "smartctl".into(),
            timeout: wattflip_drives::DEFAULT_TIMEOUT,
            smart_interval: Duration::from_secs(60),
            state_dir: PathBuf::from("/var/lib/wattflip"),
            destroy_consent: Vec::new(),
            sweep_patterns: SweepPattern::defaults(),
            sweep_settle: Duration::from_secs(1),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct CollectorConfig {
    /// Endpoints in failover order (`collector.urls`, or the single `collector.url`).
    pub urls: Vec<String>,
    /// Name the collector certificate must carry; default: each URL's host.
    pub server_name: Option<String>,
    pub connect_timeout: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

#[derive(Debug, Default, Deserialize)]
struct RawCollector {
    url: Option<String>,
    urls: Option<Vec<String>>,
    server_name: Option<String>,
    connect_timeout: Option<String>,
    backoff_initial: Option<String>,
    backoff_max: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawSampling {
    interval: Option<String>,
    power_interval: Option<String>,
    #[serde(default)]
    power_intervals: RawPowerIntervals,
}

/// One optional interval per power source name (the `source` tag). A struct rather than a map, so
/// a misspelt source is an unknown key reported at `sampling.power_intervals.<name>`.
#[derive(Debug, Default, Deserialize)]
struct RawPowerIntervals {
    rapl: Option<String>,
    hwmon: Option<String>,
    ipmi: Option<String>,
    nvme_estimate: Option<String>,
}

/// `[sampling.power_intervals]`: how often each kind of power source is read when it should not
/// follow `sampling.power_interval` (1 Hz .. 1 kHz, the range).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PowerIntervals {
    pub rapl: Option<Duration>,
    pub hwmon: Option<Duration>,
    pub ipmi: Option<Duration>,
    pub nvme_estimate: Option<Duration>,
}

impl PowerIntervals {
    /// The override for a source by its `source` name, if any.
    pub fn get(&self, source: &str) -> Option<Duration> {
        match source {
            "rapl" => self.rapl,
            "hwmon" => self.hwmon,
            "ipmi" => self.ipmi,
            "nvme_estimate" => self.nvme_estimate,
            _ => None,
        }
    }
}

/// Checks one `[sampling.power_intervals]` entry: 1 ms ..= 1 s, and IPMI no faster than 1 s.
fn power_interval_override(name: &str, raw: Option<String>, l: &mut Loader) -> Option<Duration> {
    let key = format!("sampling.power_intervals.{name}");
    let d = parse_duration(&key, &raw?, l)?;
    if name == "ipmi" && d < Duration::from_secs(1) {
        l.problem(key, format!("{d:?} is shorter than 1s: a BMC updates its DCMI power reading about once per second, so IPMI is read at most at 1 Hz"));
        return None;
    }
    // 1 kHz is the RAPL update rate (faster reads return the same value); 1 Hz is the slowest
    // rate the window aggregates are meant for.
    if d < Duration::from_millis(1) || d > Duration::from_secs(1) {
        l.problem(key, format!("{d:?} is outside 1ms..=1s (1 kHz .. 1 Hz)"));
        return None;
    }
    Some(d)
}

#[derive(Debug, Default, Deserialize)]
struct RawSources {
    sysfs_root: Option<PathBuf>,
    rapl: Option<bool>,
    hwmon: Option<bool>,
    ipmi: Option<bool>,
    ipmitool: Option<String>,
    command_timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawProbe {
    name: Option<String>,
    schedule: Option<String>,
    jitter: Option<String>,
    target: Option<PathBuf>,
    size: Option<String>,
    bench: Option<String>,
    quick: Option<bool>,
    repetitions: Option<u32>,
    format: Option<String>,
    seed: Option<u64>,
    destroy_consent: Option<Vec<String>>,
    keep_results: Option<bool>,
    out: Option<PathBuf>,
    read_only: Option<bool>,
    values: Option<String>,
    power: Option<bool>,
    power_interval: Option<String>,
    idle: Option<String>,
    tail: Option<String>,
    power_zone: Option<String>,
    // Value lists and counts are taken as raw TOML and checked here, so a wrong item is reported
    // at its own path (`probes[0].io_sizes[1]`) next to every other problem of the file.
    io_sizes: Option<toml::Value>,
    io_shifts: Option<toml::Value>,
    target_size_ios: Option<toml::Value>,
    partitions: Option<toml::Value>,
    orders: Option<toml::Value>,
    parallel_degrees: Option<toml::Value>,
    mix_ratios: Option<toml::Value>,
    pause_io_us: Option<toml::Value>,
    burst_io: Option<toml::Value>,
    io_count: Option<toml::Value>,
    ignore_io: Option<toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
struct RawDrives {
    nvme_cli: Option<bool>,
    smartctl: Option<bool>,
    nvme_path: Option<String>,
    smartctl_path: Option<String>,
    timeout: Option<String>,
    smart_interval: Option<String>,
    state_dir: Option<PathBuf>,
    destroy_consent: Option<Vec<String>>,
    sweep_patterns: Option<Vec<String>>,
    sweep_settle: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawBuffer {
    max_batches: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
struct RawSpool {
    dir: Option<PathBuf>,
    max_bytes: Option<u64>,
    segment_bytes: Option<u64>,
    sync: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawMetrics {
    listen: Option<String>,
}

/// The host name from the kernel (no libc call, no extra crate).
pub fn system_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

impl Config {
    pub fn from_file(file: &Path) -> Result<Config, ConfigError> {
        Self::from_loader(Loader::from_file(file)?, true)
    }

    pub fn from_str(file: &Path, text: &str) -> Result<Config, ConfigError> {
        Self::from_loader(Loader::from_str(file, text)?, true)
    }

    /// The defaults, for commands that need no collector (inventory, a local probe): no `[tls]`.
    pub fn defaults() -> Result<Config, ConfigError> {
        Self::from_loader(Loader::from_str(Path::new("<defaults>"), "")?, false)
    }

    fn from_loader(mut l: Loader, require_tls: bool) -> Result<Config, ConfigError> {
        let agent_id: Option<String> = l.take("agent_id");
        let hostname_cfg: Option<String> = l.take("hostname");
        let labels: BTreeMap<String, String> = l.take("labels");
        let collector: RawCollector = l.take("collector");
        let sampling: RawSampling = l.take("sampling");
        let sources: RawSources = l.take("sources");
        let buffer: RawBuffer = l.take("buffer");
        let raw_probes: Vec<RawProbe> = l.take("probes");
        let raw_drives: RawDrives = l.take("drives");
        let raw_tls: Option<RawTls> = l.take("tls");
        let spool: RawSpool = l.take("spool");
        let metrics: RawMetrics = l.take("metrics");

        let hostname = hostname_cfg.unwrap_or_else(system_hostname);
        let agent_id = agent_id.unwrap_or_else(|| hostname.clone());
        if let Err(e) = check_agent_id("agent_id", &agent_id) {
            l.problem(e.field, e.reason);
        }
        if labels.len() > MAX_LABELS {
            l.problem("labels", format!("{} labels; at most {MAX_LABELS} (labels become tags)", labels.len()));
        }
        for (k, v) in &labels {
            if let Err(e) = check_label(k, v) {
                l.problem(e.field, e.reason);
            }
        }
        let tls = match raw_tls {
            Some(raw) => TlsMode::from_raw("tls", raw, &mut l),
            None if require_tls => TlsMode::from_raw("tls", RawTls::default(), &mut l),
            None => None,
        };
        let (urls, urls_key) = match (collector.url, collector.urls) {
            (Some(_), Some(_)) => {
                l.problem("collector.urls", "set either collector.url or collector.urls, not both");
                (vec![], "collector.urls")
            }
            (Some(u), None) => (vec![u], "collector.url"),
            (None, Some(us)) => (us, "collector.urls"),
            (None, None) => (vec![default_url(&tls)], "collector.url"),
        };
        if urls.is_empty() {
            l.problem(urls_key, "names no collector");
        }
        for u in &urls {
            check_url(urls_key, u, tls.as_ref(), &mut l);
        }
        let mut dur = |key: &str, v: Option<String>, default: Duration| match v {
            Some(s) => parse_duration(key, &s, &mut l).unwrap_or(default),
            None => default,
        };
        let connect_timeout = dur("collector.connect_timeout", collector.connect_timeout, Duration::from_secs(5));
        let backoff_initial = dur("collector.backoff_initial", collector.backoff_initial, Duration::from_millis(200));
        let backoff_max = dur("collector.backoff_max", collector.backoff_max, Duration::from_secs(30));
        let interval = dur("sampling.interval", sampling.interval, Duration::from_secs(1));
        let power_interval = dur("sampling.power_interval", sampling.power_interval, interval);
        // 1 kHz is the RAPL update rate; faster polling only reads the same value again.
        if interval < Duration::from_millis(1) || interval > Duration::from_secs(3600) {
            l.problem("sampling.interval", format!("{interval:?} is outside 1ms..1h"));
        }
        if power_interval < Duration::from_millis(1) || power_interval > interval {
            l.problem("sampling.power_interval", format!("{power_interval:?} is outside 1ms..=sampling.interval ({interval:?})"));
        }
        let raw_pi = sampling.power_intervals;
        let power_intervals = PowerIntervals {
            rapl: power_interval_override("rapl", raw_pi.rapl, &mut l),
            hwmon: power_interval_override("hwmon", raw_pi.hwmon, &mut l),
            ipmi: power_interval_override("ipmi", raw_pi.ipmi, &mut l),
            nvme_estimate: power_interval_override("nvme_estimate", raw_pi.nvme_estimate, &mut l),
        };
        let drives = drives_config(raw_drives, &mut l);
        let max_batches = buffer.max_batches.unwrap_or(3600);
        if max_batches == 0 {
            l.problem("buffer.max_batches", "must be at least 1");
        }
        let defaults = SensorKinds::default();
        let kinds = SensorKinds {
            rapl: sources.rapl.unwrap_or(defaults.rapl),
            hwmon: sources.hwmon.unwrap_or(defaults.hwmon),
            ipmi: sources.ipmi.unwrap_or(defaults.ipmi),
            ipmitool: sources.ipmitool.unwrap_or(defaults.ipmitool),
            command_timeout: match sources.command_timeout {
                Some(t) => parse_duration("sources.command_timeout", &t, &mut l).unwrap_or(defaults.command_timeout),
                None => defaults.command_timeout,
            },
        };
        let sysfs_root = sources.sysfs_root.unwrap_or_else(|| PathBuf::from("/sys"));
        let probes = probe_jobs(raw_probes, (&sysfs_root, &kinds, &drives), &mut l);
        let spool = spool_config(spool, &mut l);
        let metrics_listen = metrics.listen.and_then(|m| match m.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                l.problem("metrics.listen", format!("`{m}` is not an address; write e.g. `127.0.0.1:9465`"));
                None
            }
        });
        l.finish()?;
        Ok(Config {
            agent_id,
            hostname,
            labels,
            collector: CollectorConfig { urls, server_name: collector.server_name, connect_timeout, backoff_initial, backoff_max },
            sampling_interval: interval,
            power_interval,
            power_intervals,
            sysfs_root,
            kinds,
            backlog_max_batches: max_batches,
            probes,
            drives,
            tls,
            spool,
            metrics_listen,
        })
    }
}

/// Validates `[[probes]]` entries; problems are recorded with `probes[i].key` paths. `host` is where
/// the power sources are (sysfs root, enabled kinds, nvme-cli for the datasheet estimate).
fn probe_jobs(raw: Vec<RawProbe>, host: (&Path, &SensorKinds, &DrivesConfig), l: &mut Loader) -> Vec<ProbeJob> {
    let mut jobs = Vec::new();
    let mut names = std::collections::HashSet::new();
    for (i, mut r) in raw.into_iter().enumerate() {
        let key = |k: &str| format!("probes[{i}].{k}");
        let name = r.name.take().unwrap_or_else(|| format!("probe-{i}"));
        if !names.insert(name.clone()) {
            l.problem(key("name"), format!("`{name}` is used twice; names identify schedules"));
        }
        let schedule = match r.schedule.as_deref() {
            None => {
                l.problem(key("schedule"), "is required: a cron expression `sec min hour day month weekday`, e.g. \"0 30 2 * * *\"");
                None
            }
            Some(s) => match s.parse::<cron::Schedule>() {
                Ok(c) => Some(c),
                Err(e) => {
                    l.problem(key("schedule"), format!("`{s}` is not a cron expression ({e}); write `sec min hour day month weekday`"));
                    None
                }
            },
        };
        let jitter = match r.jitter.take() {
            Some(j) => parse_duration(&key("jitter"), &j, l).unwrap_or_default(),
            None => Duration::ZERO,
        };
        let Some(target) = r.target.take() else {
            l.problem(key("target"), "is required: a scratch file or a consented block device");
            continue;
        };
        let size = match parse_size(r.size.as_deref().unwrap_or("1GiB")) {
            Ok(s) => s,
            Err(e) => {
                l.problem(key("size"), e);
                0
            }
        };
        let benches = parse_benches(r.bench.as_deref().unwrap_or("all")).unwrap_or_else(|e| {
            l.problem(key("bench"), e);
            Vec::new()
        });
        let format = parse_format(r.format.as_deref().unwrap_or("none")).unwrap_or_else(|e| {
            l.problem(key("format"), e);
            None
        });
        let quick = r.quick.unwrap_or(false);
        let values = match r.values.as_deref() {
            None if quick => ValuesProfile::Quick,
            None => ValuesProfile::default(),
            Some(v) => match ValuesProfile::parse(v) {
                Ok(ValuesProfile::Quick) => ValuesProfile::Quick,
                Ok(_) if quick => {
                    l.problem(key("values"), format!("`{v}` contradicts quick = true (the quick plan has the quick values); remove one of them"));
                    ValuesProfile::Quick
                }
                Ok(p) => p,
                Err(e) => {
                    l.problem(key("values"), e);
                    ValuesProfile::default()
                }
            },
        };
        if r.repetitions == Some(0) {
            l.problem(key("repetitions"), "must be at least 1 (uFLIP's nbRun: runs per value)");
        }
        let effective = if quick { vec![wattflip_uflip::Bench::Granularity] } else { benches.clone() };
        let overrides = plan_overrides(&r, values, &effective, &key, l);
        let energy = probe_energy(&mut r, host, &key, l);
        let Some(schedule) = schedule else { continue };
        jobs.push(ProbeJob {
            name,
            schedule,
            jitter,
            keep_results: r.keep_results.unwrap_or(false),
            energy,
            args: ProbeArgs {
                target,
                size,
                benches,
                quick,
                values,
                overrides,
                format,
                repetitions: r.repetitions,
                out: r.out.unwrap_or_else(|| PathBuf::from("/var/lib/wattflip-agent/probes")),
                emit_fio_iolog: None,
                io_trace: None,
                destroy_consent: r.destroy_consent.unwrap_or_default(),
                seed: r.seed,
                read_only: r.read_only.unwrap_or(false),
                pause: crate::probes::PauseChoice::Plan,
                counts: None,
            },
        });
    }
    jobs
}

/// Power recording of a `[[probes]]` entry: on unless `power = false`, with the `probe` command's
/// defaults (5 ms between reads, 1 s idle before the first run and 1 s tail after the last).
fn probe_energy(r: &mut RawProbe, host: (&Path, &SensorKinds, &DrivesConfig), key: &dyn Fn(&str) -> String, l: &mut Loader) -> Option<EnergyOptions> {
    let mut dur = |k: &str, v: Option<String>, default: Duration, min: Duration, max: Duration| {
        let d = match v {
            Some(s) => parse_duration(&key(k), &s, l).unwrap_or(default),
            None => default,
        };
        if d < min || d > max {
            l.problem(key(k), format!("{d:?} is outside {min:?}..={max:?}"));
        }
        d
    };
    let set: Vec<&str> = [
        ("power_interval", r.power_interval.is_some()),
        ("idle", r.idle.is_some()),
        ("tail", r.tail.is_some()),
        ("power_zone", r.power_zone.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, on)| on.then_some(k))
    .collect();
    // The fast sampler's 1 kHz is RAPL's update rate; the idle window is the baseline's sample.
    let period = dur("power_interval", r.power_interval.take(), Duration::from_millis(5), Duration::from_millis(1), Duration::from_secs(1));
    let idle = dur("idle", r.idle.take(), Duration::from_secs(1), Duration::from_millis(10), Duration::from_secs(600));
    let tail = dur("tail", r.tail.take(), Duration::from_secs(1), Duration::ZERO, Duration::from_secs(600));
    if r.power == Some(false) {
        for k in set {
            l.problem(key(k), "has no effect with power = false; remove it or turn power recording on");
        }
        return None;
    }
    Some(EnergyOptions {
        sysfs_root: host.0.to_owned(),
        kinds: host.1.clone(),
        period,
        idle,
        tail,
        zone: r.power_zone.take(),
        drives: host.2.clone(),
    })
}

/// Checks a `[[probes]]` entry's value lists and counts. Every item is checked, so one entry can
/// report several problems, each at its own dotted path.
fn plan_overrides(r: &RawProbe, profile: ValuesProfile, benches: &[wattflip_uflip::Bench], key: &dyn Fn(&str) -> String, l: &mut Loader) -> PlanOverrides {
    let sizes = |name: &'static str, zero_ok: bool| {
        move |v: &toml::Value| -> Result<u64, String> {
            let b = match v {
                toml::Value::Integer(n) => u64::try_from(*n).map_err(|_| format!("{n} is negative; {name} are sizes in bytes"))?,
                toml::Value::String(s) => parse_size(s)?,
                other => return Err(format!("{other} is not a size; write e.g. \"4KiB\" or a number of bytes")),
            };
            if b == 0 && !zero_ok {
                return Err("0 bytes: an IO needs at least one 512-byte sector".into());
            }
            if b % 512 != 0 {
                return Err(format!("{b} bytes is not a multiple of 512 (a sector); O_DIRECT IO needs sector-aligned {name}"));
            }
            Ok(b)
        }
    };
    let int = |min: i64, max: i64, what: &'static str| {
        move |v: &toml::Value| -> Result<i64, String> {
            match v {
                toml::Value::Integer(n) if (min..=max).contains(n) => Ok(*n),
                toml::Value::Integer(n) => Err(format!("{n} is outside {min}..={max} ({what})")),
                other => Err(format!("{other} is not an integer ({what})")),
            }
        }
    };
    let unsigned = |v: Option<Vec<i64>>| v.map(|v| v.into_iter().map(|x| x as u64).collect::<Vec<u64>>());
    let max_par = i64::from(wattflip_uflip::pattern::MAX_PARALLEL);
    let o = PlanOverrides {
        io_sizes: value_list(l, &key("io_sizes"), &r.io_sizes, sizes("IO sizes", false)),
        io_shifts: value_list(l, &key("io_shifts"), &r.io_shifts, sizes("IO shifts", true)),
        target_size_ios: unsigned(value_list(l, &key("target_size_ios"), &r.target_size_ios, int(1, 1 << 40, "TargetSize in IOs"))),
        partitions: unsigned(value_list(l, &key("partitions"), &r.partitions, int(1, 1 << 20, "number of partitions"))),
        orders: value_list(l, &key("orders"), &r.orders, int(-(1 << 20), 1 << 20, "increment: -1 reverse, 0 in place, k strided")),
        parallel_degrees: value_list(l, &key("parallel_degrees"), &r.parallel_degrees, int(1, max_par, "threads"))
            .map(|v| v.into_iter().map(|x| x as u32).collect()),
        mix_ratios: value_list(l, &key("mix_ratios"), &r.mix_ratios, int(-(1 << 20), 1 << 20, "IOs of one pattern per IO of the other; negative swaps them")),
        pause_io_us: unsigned(value_list(l, &key("pause_io_us"), &r.pause_io_us, int(0, 60_000_000, "microseconds after every IO"))),
        burst_io: unsigned(value_list(l, &key("burst_io"), &r.burst_io, int(1, 1 << 30, "IOs per burst"))),
        io_count: baseline_counts(l, &key("io_count"), &r.io_count, 1),
        ignore_io: baseline_counts(l, &key("ignore_io"), &r.ignore_io, 0),
    };
    for (k, bench) in o.overridden_lists() {
        if !benches.contains(&bench) {
            l.problem(key(k), format!("has no effect: it is the value list of {bench}, which this probe does not run (add it to bench)"));
        }
    }
    // IgnoreIO is the start-up phase, IOCount the whole run: a run must have a running phase.
    let table = profile.options(0).counts;
    for (i, (_, name)) in BASELINES.iter().enumerate() {
        if o.io_count[i].is_none() && o.ignore_io[i].is_none() {
            continue;
        }
        let (count, ignore) = (o.io_count[i].unwrap_or(table.io_count[i]), o.ignore_io[i].unwrap_or(table.ignore_io[i]));
        if ignore >= count {
            let at = if o.ignore_io[i].is_some() { key(&format!("ignore_io.{name}")) } else { key(&format!("io_count.{name}")) };
            l.problem(at, format!("IgnoreIO {ignore} is not below IOCount {count} for {name} (counts not set here are the {} profile's); raise io_count.{name} or lower ignore_io.{name}", profile.as_str()));
        }
    }
    o
}

/// One value list: a non-empty TOML array whose items `item` accepts, without repeats. `None`
/// (and a problem) when anything is wrong, so the profile's list stands in while checking goes on.
fn value_list<T: PartialEq + std::fmt::Display>(
    l: &mut Loader,
    key: &str,
    raw: &Option<toml::Value>,
    item: impl Fn(&toml::Value) -> Result<T, String>,
) -> Option<Vec<T>> {
    let raw = raw.as_ref()?;
    let Some(items) = raw.as_array() else {
        l.problem(key, format!("{raw} is not a list; write e.g. [1, 4, 16]"));
        return None;
    };
    if items.is_empty() {
        l.problem(key, "is empty: list at least one value, or leave the key out to keep the profile's list");
        return None;
    }
    let mut out: Vec<T> = Vec::new();
    let mut ok = true;
    for (j, v) in items.iter().enumerate() {
        match item(v) {
            Ok(x) if out.contains(&x) => {
                l.problem(format!("{key}[{j}]"), format!("{x} is listed twice; each value is one point of the experiment"));
                ok = false;
            }
            Ok(x) => out.push(x),
            Err(e) => {
                l.problem(format!("{key}[{j}]"), e);
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// A per-baseline table such as `io_count = { SR = 128, RW = 512 }` (keys SR, RR, SW, RW).
fn baseline_counts(l: &mut Loader, key: &str, raw: &Option<toml::Value>, min: i64) -> [Option<u64>; 4] {
    let mut out = [None; 4];
    let Some(raw) = raw else { return out };
    let Some(table) = raw.as_table() else {
        l.problem(key, format!("{raw} is not a table; write e.g. {{ SR = 128, RR = 256, SW = 128, RW = 512 }}"));
        return out;
    };
    for (k, v) in table {
        let at = format!("{key}.{k}");
        let Some(i) = BASELINES.iter().position(|(_, n)| n == k) else {
            l.problem(at, "unknown baseline; use SR, RR, SW or RW");
            continue;
        };
        match v {
            toml::Value::Integer(n) if *n >= min => out[i] = Some(*n as u64),
            toml::Value::Integer(n) => l.problem(at, format!("{n} is below {min}")),
            other => l.problem(at, format!("{other} is not a number of IOs")),
        }
    }
    out
}

fn drives_config(r: RawDrives, l: &mut Loader) -> DrivesConfig {
    let d = DrivesConfig::default();
    let mut dur = |key: &str, v: Option<String>, default: Duration, min: Duration, max: Duration| {
        let v = match v {
            Some(s) => parse_duration(key, &s, l).unwrap_or(default),
            None => default,
        };
        if v < min || v > max {
            l.problem(key, format!("{v:?} is outside {min:?}..{max:?}"));
        }
        v
    };
    let timeout = dur("drives.timeout", r.timeout, d.timeout, Duration::from_millis(100), Duration::from_secs(600));
    // SMART reads are admin commands: more often than every second only perturbs the drive.
    let smart_interval =
        dur("drives.smart_interval", r.smart_interval, d.smart_interval, Duration::from_secs(1), Duration::from_secs(86_400));
    let sweep_settle = dur("drives.sweep_settle", r.sweep_settle, d.sweep_settle, Duration::ZERO, Duration::from_secs(3600));
    let mut tool = |key: &str, v: Option<String>, default: String| match v {
        Some(p) if p.trim().is_empty() || p.contains(char::is_whitespace) => {
            l.problem(key, format!("`{p}` is not an executable name or path"));
            default
        }
        Some(p) => p,
        None => default,
    };
    let nvme_path = tool("drives.nvme_path", r.nvme_path, d.nvme_path);
    let smartctl_path = tool("drives.smartctl_path", r.smartctl_path, d.smartctl_path);
    let destroy_consent = r.destroy_consent.unwrap_or_default();
    for (i, s) in destroy_consent.iter().enumerate() {
        if s.trim().is_empty() {
            l.problem(format!("drives.destroy_consent[{i}]"), "empty serial: name the drive whose data may be destroyed");
        }
    }
    let sweep_patterns = match r.sweep_patterns {
        None => d.sweep_patterns,
        Some(list) if list.is_empty() => {
            l.problem("drives.sweep_patterns", "empty: list at least one pattern such as \"SW:128KiB\"");
            d.sweep_patterns
        }
        Some(list) => {
            let mut out = Vec::new();
            for (i, s) in list.iter().enumerate() {
                match s.parse::<SweepPattern>() {
                    Ok(p) => out.push(p),
                    Err(e) => l.problem(format!("drives.sweep_patterns[{i}]"), e),
                }
            }
            out
        }
    };
    DrivesConfig {
        nvme_cli: r.nvme_cli.unwrap_or(d.nvme_cli),
        smartctl: r.smartctl.unwrap_or(d.smartctl),
        nvme_path,
        smartctl_path,
        timeout,
        smart_interval,
        state_dir: r.state_dir.unwrap_or(d.state_dir),
        destroy_consent,
        sweep_patterns,
        sweep_settle,
    }
}

fn default_url(tls: &Option<TlsMode>) -> String {
    match tls {
        Some(TlsMode::Mutual(_)) => "https://127.0.0.1:50051".into(),
        _ => "http://127.0.0.1:50051".into(),
    }
}

/// TLS needs `https://` (tonic negotiates TLS by scheme); plaintext needs `http://` and loopback.
fn check_url(key: &str, url: &str, tls: Option<&TlsMode>, l: &mut Loader) {
    match tls {
        Some(TlsMode::Mutual(_)) if !url.starts_with("https://") => {
            l.problem(key, format!("`{url}` must start with https:// (mutual TLS is on)"));
        }
        Some(TlsMode::InsecurePlaintextLoopback) if !url.starts_with("http://") => {
            l.problem(key, format!("`{url}` must start with http:// in tls.insecure_plaintext_loopback_only mode"));
        }
        Some(TlsMode::InsecurePlaintextLoopback) if !url_host(url).is_some_and(is_loopback_host) => l.problem(
            key,
            format!("`{url}` is not a loopback address, and tls.insecure_plaintext_loopback_only refuses to send plaintext beyond loopback; configure [tls] certificates"),
        ),
        _ if !(url.starts_with("http://") || url.starts_with("https://")) => {
            l.problem(key, format!("`{url}` must start with http:// or https://"));
        }
        _ => {}
    }
}

fn spool_config(raw: RawSpool, l: &mut Loader) -> Option<SpoolConfig> {
    let max_bytes = raw.max_bytes.unwrap_or(256 << 20);
    let segment_bytes = raw.segment_bytes.unwrap_or(8 << 20);
    if segment_bytes < 4096 {
        l.problem("spool.segment_bytes", format!("{segment_bytes} is below 4096"));
    }
    // The newest segment is never dropped, so the bound needs room for one more.
    if max_bytes < 2 * segment_bytes {
        l.problem("spool.max_bytes", format!("{max_bytes} must be at least twice spool.segment_bytes ({segment_bytes})"));
    }
    let sync = match raw.sync.as_deref() {
        None | Some("every_batch") => SyncPolicy::EveryBatch,
        Some(s) => match parse_duration("spool.sync", s, l) {
            Some(d) if d > Duration::ZERO => SyncPolicy::Interval(d),
            Some(_) => {
                l.problem("spool.sync", "must be `every_batch` or a duration above zero such as `200ms`");
                SyncPolicy::EveryBatch
            }
            None => SyncPolicy::EveryBatch,
        },
    };
    Some(SpoolConfig { dir: raw.dir?, max_bytes, segment_bytes, sync })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_str(Path::new("agent.toml"), text)
    }

    #[test]
    fn full_config() {
        let c = parse(
            "agent_id = \"node-1\"\n[labels]\nsite = \"dc1\"\nrack = \"r12\"\n[collector]\nurl = \"http://127.0.0.1:50051\"\n\
             [sampling]\ninterval = \"250ms\"\n[sources]\nsysfs_root = \"/tmp/sys\"\nrapl = false\n[buffer]\nmax_batches = 10\n\
             [tls]\ninsecure_plaintext_loopback_only = true\n[spool]\ndir = \"/var/spool/w\"\nsync = \"200ms\"\n[metrics]\nlisten = \"127.0.0.1:9465\"\n",
        )
        .unwrap();
        assert_eq!(c.agent_id, "node-1");
        assert_eq!(c.labels.get("rack").map(String::as_str), Some("r12"));
        assert_eq!(c.sampling_interval, Duration::from_millis(250));
        assert_eq!(c.sysfs_root, PathBuf::from("/tmp/sys"));
        assert!(!c.kinds.rapl && c.kinds.hwmon);
        assert_eq!(c.backlog_max_batches, 10);
        assert_eq!(c.tls, Some(TlsMode::InsecurePlaintextLoopback));
        assert_eq!(
            c.spool,
            Some(SpoolConfig {
                dir: "/var/spool/w".into(),
                max_bytes: 256 << 20,
                segment_bytes: 8 << 20,
                sync: SyncPolicy::Interval(Duration::from_millis(200))
            })
        );
        assert_eq!(c.metrics_listen, Some("127.0.0.1:9465".parse().unwrap()));
    }

    #[test]
    fn tls_urls_and_spool_are_checked() {
        let err = parse("[collector]\nurls = [\"http://10.0.0.1:1\"]\n").unwrap_err();
        let paths: Vec<&str> = err.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, vec!["tls.ca_file", "tls.cert_file", "tls.key_file"], "mutual TLS is the default");
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("x.pem");
        std::fs::write(&pem, "-----BEGIN CERTIFICATE-----\n").unwrap();
        let tls = format!("[tls]\nca_file = \"{0}\"\ncert_file = \"{0}\"\nkey_file = \"{0}\"\n", pem.display());
        let err = parse(&format!("{tls}[collector]\nurls = [\"http://10.0.0.1:1\"]\n")).unwrap_err();
        assert_eq!(err.problems[0].message, "`http://10.0.0.1:1` must start with https:// (mutual TLS is on)");
        let c = parse(&format!("{tls}[collector]\nurls = [\"https://c1:1\", \"https://c2:1\"]\nserver_name = \"collector\"\n")).unwrap();
        assert_eq!(c.collector.urls, vec!["https://c1:1".to_string(), "https://c2:1".to_string()]);
        assert_eq!(c.collector.server_name.as_deref(), Some("collector"));
        let err = parse("[tls]\ninsecure_plaintext_loopback_only = true\n[collector]\nurls = [\"http://10.0.0.1:1\", \"https://127.0.0.1:2\"]\n[spool]\ndir = \"/s\"\nmax_bytes = 5000\nsync = \"0s\"\n").unwrap_err();
        let got: Vec<&str> = err.problems.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(
            got,
            vec![
                "`http://10.0.0.1:1` is not a loopback address, and tls.insecure_plaintext_loopback_only refuses to send plaintext beyond loopback; configure [tls] certificates",
                "`https://127.0.0.1:2` must start with http:// in tls.insecure_plaintext_loopback_only mode",
                "5000 must be at least twice spool.segment_bytes (8388608)",
                "must be `every_batch` or a duration above zero such as `200ms`",
            ]
        );
        let c = Config::defaults().unwrap();
        assert_eq!((c.tls, c.spool, c.collector.urls), (None, None, vec!["http://127.0.0.1:50051".to_string()]));
    }

    #[test]
    fn probe_schedules_are_checked() {
        let err = parse(
            "[[probes]]\nname = \"a\"\nschedule = \"every night\"\ntarget = \"/x\"\nsize = \"huge\"\nbench = \"speed\"\n\
             [[probes]]\nname = \"a\"\nschedule = \"0 0 3 * * *\"\n[tls]\ninsecure_plaintext_loopback_only = true\n",
        )
        .unwrap_err();
        let paths: Vec<&str> = err.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, vec!["probes[0].schedule", "probes[0].size", "probes[0].bench", "probes[1].name", "probes[1].target"]);
    }

    const TLS: &str = "[tls]\ninsecure_plaintext_loopback_only = true\n";

    #[test]
    fn per_source_power_intervals() {
        let c = parse(&format!(
            "[sampling]\ninterval = \"1s\"\npower_interval = \"5ms\"\n\
             [sampling.power_intervals]\nrapl = \"10ms\"\nhwmon = \"1ms\"\nipmi = \"1s\"\n{TLS}"
        ))
        .unwrap();
        assert_eq!(c.power_interval, Duration::from_millis(5));
        assert_eq!(
            c.power_intervals,
            PowerIntervals {
                rapl: Some(Duration::from_millis(10)),
                hwmon: Some(Duration::from_millis(1)),
                ipmi: Some(Duration::from_secs(1)),
                nvme_estimate: None,
            }
        );
        assert_eq!(c.power_intervals.get("hwmon"), Some(Duration::from_millis(1)));
        assert_eq!(c.power_intervals.get("nvme_estimate"), None);
        // Without the table every source follows power_interval (the old behaviour).
        assert_eq!(parse(TLS).unwrap().power_intervals, PowerIntervals::default());
    }

    #[test]
    fn bad_power_intervals_are_all_reported() {
        let err = parse(&format!(
            "[sampling.power_intervals]\nrapl = \"500us\"\nhwmon = \"2s\"\nipmi = \"100ms\"\n\
             nvme_estimate = \"often\"\nina226 = \"1ms\"\n{TLS}"
        ))
        .unwrap_err();
        let problems: Vec<(&str, &str)> = err.problems.iter().map(|p| (p.path.as_str(), p.message.as_str())).collect();
        assert_eq!(
            problems,
            vec![
                ("sampling.power_intervals.ina226", "unknown key (check the spelling; see the example config)"),
                ("sampling.power_intervals.rapl", "500µs is outside 1ms..=1s (1 kHz .. 1 Hz)"),
                ("sampling.power_intervals.hwmon", "2s is outside 1ms..=1s (1 kHz .. 1 Hz)"),
                (
                    "sampling.power_intervals.ipmi",
                    "100ms is shorter than 1s: a BMC updates its DCMI power reading about once per second, so IPMI is read at most at 1 Hz"
                ),
                (
                    "sampling.power_intervals.nvme_estimate",
                    "`often` is not a duration (expected number at 0); write e.g. `500ms`, `5s` or `2m`"
                ),
            ]
        );
    }

    #[test]
    fn probe_value_lists_and_counts() {
        let c = parse(&format!(
            "[[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/x\"\nbench = \"granularity,order,mix\"\nvalues = \"spec\"\n\
             io_sizes = [\"4KiB\", 32768]\norders = [-1, 0, 8]\nmix_ratios = [-2, 2]\nrepetitions = 2\n\
             io_count = {{ SR = 64, RW = 600 }}\nignore_io = {{ RW = 10 }}\n\
             [[probes]]\nschedule = \"0 0 4 * * *\"\ntarget = \"/y\"\nquick = true\n{TLS}"
        ))
        .unwrap();
        let a = &c.probes[0].args;
        assert_eq!(a.values, ValuesProfile::Spec);
        assert_eq!(a.repetitions, Some(2));
        assert_eq!(
            a.overrides,
            PlanOverrides {
                io_sizes: Some(vec![4096, 32768]),
                orders: Some(vec![-1, 0, 8]),
                mix_ratios: Some(vec![-2, 2]),
                io_count: [Some(64), None, None, Some(600)],
                ignore_io: [None, None, None, Some(10)],
                ..Default::default()
            }
        );
        // `quick = true` alone means the quick values; no overrides.
        assert_eq!((c.probes[1].args.values, &c.probes[1].args.overrides), (ValuesProfile::Quick, &PlanOverrides::default()));
    }

    #[test]
    fn scheduled_probes_record_power() {
        let c = parse(&format!(
            "[sources]\nsysfs_root = \"/tmp/sys\"\nrapl = false\n\
             [[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/x\"\npower_interval = \"2ms\"\nidle = \"300ms\"\ntail = \"2s\"\npower_zone = \"SSD 12V\"\n\
             [[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/y\"\n\
             [[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/z\"\npower = false\n{TLS}"
        ))
        .unwrap();
        let e = c.probes[0].energy.as_ref().unwrap();
        assert_eq!((e.sysfs_root.as_path(), e.kinds.rapl, e.kinds.hwmon), (Path::new("/tmp/sys"), false, true));
        assert_eq!((e.period, e.idle, e.tail), (Duration::from_millis(2), Duration::from_millis(300), Duration::from_secs(2)));
        assert_eq!(e.zone.as_deref(), Some("SSD 12V"));
        assert_eq!(e.drives, c.drives);
        // The `probe` command's defaults.
        let d = c.probes[1].energy.as_ref().unwrap();
        assert_eq!((d.period, d.idle, d.tail, d.zone.as_deref()), (Duration::from_millis(5), Duration::from_secs(1), Duration::from_secs(1), None));
        assert!(c.probes[2].energy.is_none());

        let err = parse(&format!(
            "[[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/x\"\npower_interval = \"100us\"\nidle = \"a while\"\ntail = \"20m\"\n\
             [[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/y\"\npower = false\ntail = \"1s\"\npower_zone = \"SSD 12V\"\n{TLS}"
        ))
        .unwrap_err();
        let paths: Vec<&str> = err.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, vec!["probes[0].power_interval", "probes[0].idle", "probes[0].tail", "probes[1].tail", "probes[1].power_zone"]);
        assert_eq!(err.problems[0].message, "100µs is outside 1ms..=1s");
        assert_eq!(err.problems[3].message, "has no effect with power = false; remove it or turn power recording on");
    }

    #[test]
    fn an_override_gives_exactly_its_runs() {
        let c = parse(&format!(
            "[[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/x\"\nbench = \"granularity\"\n\
             io_sizes = [\"4KiB\", \"32KiB\"]\nrepetitions = 2\nio_count = {{ SR = 64, RW = 600 }}\nignore_io = {{ RW = 10 }}\n{TLS}"
        ))
        .unwrap();
        let plan = wattflip_uflip::plan(&crate::probes::plan_options(&c.probes[0].args, 1 << 30));
        let runs: Vec<(String, f64, u32, u64, u64, u64)> = plan
            .runs
            .iter()
            .map(|r| match &r.work {
                wattflip_uflip::plan::Work::Pattern(p) => (r.experiment.clone(), r.value, r.repetition, p[0].io_size, p[0].io_count, p[0].ignore_io),
                other => panic!("{other:?}"),
            })
            .collect();
        let mut expect = Vec::new();
        // uFLIP's order: the read-only experiments, then random writes (16), then sequential (23).
        // Counts: SR and RW from the override, RR and SW (and IgnoreIO but RW's) from `small`.
        for (base, count, ignore) in [("SR", 64, 0), ("RR", 256, 0), ("RW", 600, 10), ("SW", 128, 0)] {
            for size in [4096u64, 32768] {
                for rep in 0..2 {
                    expect.push((format!("granularity/{base}"), size as f64, rep, size, count, ignore));
                }
            }
        }
        assert_eq!(runs, expect);
    }

    #[test]
    fn every_bad_probe_value_is_named() {
        let err = parse(&format!(
            "[[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/x\"\nvalues = \"huge\"\nrepetitions = 0\n\
             io_sizes = [\"4KiB\", \"1000B\", 0, \"4KiB\", \"big\", -512, true]\nio_shifts = \"512\"\n\
             target_size_ios = [0]\npartitions = []\norders = [1.5]\nparallel_degrees = [0, 33]\nmix_ratios = [\"1\"]\n\
             pause_io_us = [-1]\nburst_io = [0]\nio_count = {{ SR = 0, XX = 5, RR = \"many\" }}\nignore_io = [1]\n\
             [[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/y\"\nbench = \"granularity\"\nquick = true\nvalues = \"spec\"\n\
             partitions = [4]\nignore_io = {{ RW = 128 }}\n{TLS}"
        ))
        .unwrap_err();
        let got: Vec<(&str, &str)> = err.problems.iter().map(|p| (p.path.as_str(), p.message.as_str())).collect();
        assert_eq!(
            got,
            vec![
                ("probes[0].values", "`huge` is not a value profile; use spec (ufip.md §4.3 lists), small or quick"),
                ("probes[0].repetitions", "must be at least 1 (uFLIP's nbRun: runs per value)"),
                ("probes[0].io_sizes[1]", "1000 bytes is not a multiple of 512 (a sector); O_DIRECT IO needs sector-aligned IO sizes"),
                ("probes[0].io_sizes[2]", "0 bytes: an IO needs at least one 512-byte sector"),
                ("probes[0].io_sizes[3]", "4096 is listed twice; each value is one point of the experiment"),
                ("probes[0].io_sizes[4]", "`big` is not a size (couldn't parse \"big\" into a ByteSize, cannot parse float from empty string); write e.g. 1GiB or 512MiB"),
                ("probes[0].io_sizes[5]", "-512 is negative; IO sizes are sizes in bytes"),
                ("probes[0].io_sizes[6]", "true is not a size; write e.g. \"4KiB\" or a number of bytes"),
                ("probes[0].io_shifts", "\"512\" is not a list; write e.g. [1, 4, 16]"),
                ("probes[0].target_size_ios[0]", "0 is outside 1..=1099511627776 (TargetSize in IOs)"),
                ("probes[0].partitions", "is empty: list at least one value, or leave the key out to keep the profile's list"),
                ("probes[0].orders[0]", "1.5 is not an integer (increment: -1 reverse, 0 in place, k strided)"),
                ("probes[0].parallel_degrees[0]", "0 is outside 1..=32 (threads)"),
                ("probes[0].parallel_degrees[1]", "33 is outside 1..=32 (threads)"),
                ("probes[0].mix_ratios[0]", "\"1\" is not an integer (IOs of one pattern per IO of the other; negative swaps them)"),
                ("probes[0].pause_io_us[0]", "-1 is outside 0..=60000000 (microseconds after every IO)"),
                ("probes[0].burst_io[0]", "0 is outside 1..=1073741824 (IOs per burst)"),
                ("probes[0].io_count.RR", "\"many\" is not a number of IOs"),
                ("probes[0].io_count.SR", "0 is below 1"),
                ("probes[0].io_count.XX", "unknown baseline; use SR, RR, SW or RW"),
                ("probes[0].ignore_io", "[1] is not a table; write e.g. { SR = 128, RR = 256, SW = 128, RW = 512 }"),
                ("probes[1].values", "`spec` contradicts quick = true (the quick plan has the quick values); remove one of them"),
                ("probes[1].partitions", "has no effect: it is the value list of partitioning, which this probe does not run (add it to bench)"),
                ("probes[1].ignore_io.RW", "IgnoreIO 128 is not below IOCount 128 for RW (counts not set here are the quick profile's); raise io_count.RW or lower ignore_io.RW"),
            ]
        );
    }

    #[test]
    fn drives_section() {
        let c = parse("[drives]\nnvme_path = \"/opt/nvme\"\nsmartctl = false\nsmart_interval = \"5m\"\ntimeout = \"3s\"\n\
                       state_dir = \"/tmp/wf\"\ndestroy_consent = [\"S1\"]\nsweep_patterns = [\"RW:4KiB\", \"sw:1MiB\"]\n[tls]\ninsecure_plaintext_loopback_only = true\n")
            .unwrap();
        let d = &c.drives;
        assert_eq!((d.nvme_cli, d.smartctl), (true, false));
        assert_eq!(d.nvme_path, "/opt/nvme");
        assert_eq!(d.smartctl_path, "smartctl");
        assert_eq!(d.smart_interval, Duration::from_secs(300));
        assert_eq!(d.timeout, Duration::from_secs(3));
        assert_eq!(d.state_dir, PathBuf::from("/tmp/wf"));
        assert_eq!(d.destroy_consent, vec!["S1".to_string()]);
        let pats: Vec<String> = d.sweep_patterns.iter().map(|p| p.to_string()).collect();
        assert_eq!(pats, vec!["RW:4KiB", "SW:1024KiB"]);
        let defaults = parse("[tls]\ninsecure_plaintext_loopback_only = true\n").unwrap().drives;
        assert_eq!(defaults, DrivesConfig::default());
        let pats: Vec<String> = defaults.sweep_patterns.iter().map(|p| p.to_string()).collect();
        assert_eq!(pats, vec!["SW:128KiB", "SR:128KiB", "RR:4KiB", "RW:4KiB"]);
    }

    #[test]
    fn drives_problems_name_the_key() {
        let err = parse("[drives]\nsmart_interval = \"10ms\"\nnvme_path = \"\"\nsweep_patterns = [\"XX:4KiB\", \"SR\"]\nbogus = 1\n[tls]\ninsecure_plaintext_loopback_only = true\n")
            .unwrap_err();
        let paths: Vec<&str> = err.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            vec!["drives.bogus", "drives.smart_interval", "drives.nvme_path", "drives.sweep_patterns[0]", "drives.sweep_patterns[1]"]
        );
    }

    #[test]
    fn all_problems_at_once_with_dotted_paths() {
        let err = parse(
            "agent_id = \"bad id\"\n[labels]\nhost = \"x\"\n[collector]\nurll = \"x\"\n[sampling]\ninterval = \"often\"\n\
             [sources]\nrapl = \"yes\"\n[buffer]\nmax_batches = 0\n[extra]\n[tls]\ninsecure_plaintext_loopback_only = true\n",
        )
        .unwrap_err();
        let paths: Vec<&str> = err.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            vec!["collector.urll", "sources.rapl", "agent_id", "labels.host", "sampling.interval", "buffer.max_batches", "extra"]
        );
        assert!(err.to_string().starts_with("agent.toml: 7 problem(s):"));
    }
}

#[cfg(test)]
mod example {
    #[test]
    fn the_example_config_is_valid() {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("agent.example.toml");
        // The certificate paths are where a deployment puts them; a build machine has none.
        let err = super::Config::from_file(&p).unwrap_err();
        let paths: Vec<_> = err.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, vec!["tls.ca_file", "tls.cert_file", "tls.key_file"]);
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("x.pem");
        std::fs::write(&pem, "-----BEGIN CERTIFICATE-----\n").unwrap();
        let text = std::fs::read_to_string(&p).unwrap().replace("/etc/wattflip-agent/ca.pem", &pem.display().to_string())
            .replace("/etc/wattflip-agent/agent.pem", &pem.display().to_string())
            .replace("/etc/wattflip-agent/agent.key", &pem.display().to_string());
        let c = super::Config::from_str(&p, &text).unwrap();
        assert_eq!(c.collector.urls.len(), 2);
        assert!(c.spool.is_some());
        assert_eq!(c.agent_id, "storage-node-17");
        assert_eq!(c.labels.len(), 3);
        assert_eq!(c.power_interval, std::time::Duration::from_millis(10));
        assert_eq!(c.probes.len(), 1);
        assert_eq!(c.probes[0].jitter, std::time::Duration::from_secs(1200));
        // The example spells out every [drives] default.
        assert_eq!(c.drives, super::DrivesConfig::default());
    }
}
