//! Agent configuration: strict TOML (unknown keys rejected, every problem reported at once with
//! its dotted path). Add a setting as a field of a `Raw*` struct, its check in [`Config::from_file`]
//! and a line in `agent/agent.example.toml`.

use crate::probes::{parse_benches, parse_format, parse_size, ProbeArgs};
use crate::schedule::ProbeJob;
use crate::sensors::SensorKinds;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use wattflip_proto::domain::{check_agent_id, check_label, MAX_LABELS};
use wattflip_proto::tomlcfg::{parse_duration, ConfigError, Loader};

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub agent_id: String,
    pub hostname: String,
    pub labels: BTreeMap<String, String>,
    pub collector: CollectorConfig,
    pub sampling_interval: Duration,
    /// How often power sources are read; readings are aggregated per `sampling_interval` window.
    pub power_interval: Duration,
    pub sysfs_root: PathBuf,
    pub kinds: SensorKinds,
    pub backlog_max_batches: usize,
    pub probes: Vec<ProbeJob>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CollectorConfig {
    pub url: String,
    pub connect_timeout: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

#[derive(Debug, Default, Deserialize)]
struct RawCollector {
    url: Option<String>,
    connect_timeout: Option<String>,
    backoff_initial: Option<String>,
    backoff_max: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawSampling {
    interval: Option<String>,
    power_interval: Option<String>,
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
}

#[derive(Debug, Default, Deserialize)]
struct RawBuffer {
    max_batches: Option<usize>,
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
        Self::from_loader(Loader::from_file(file)?)
    }

    pub fn from_str(file: &Path, text: &str) -> Result<Config, ConfigError> {
        Self::from_loader(Loader::from_str(file, text)?)
    }

    fn from_loader(mut l: Loader) -> Result<Config, ConfigError> {
        let agent_id: Option<String> = l.take("agent_id");
        let hostname_cfg: Option<String> = l.take("hostname");
        let labels: BTreeMap<String, String> = l.take("labels");
        let collector: RawCollector = l.take("collector");
        let sampling: RawSampling = l.take("sampling");
        let sources: RawSources = l.take("sources");
        let buffer: RawBuffer = l.take("buffer");
        let raw_probes: Vec<RawProbe> = l.take("probes");

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
        let url = collector.url.unwrap_or_else(|| "http://127.0.0.1:50051".into());
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            l.problem("collector.url", format!("`{url}` must start with http:// or https://"));
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
        let max_batches = buffer.max_batches.unwrap_or(3600);
        if max_batches == 0 {
            l.problem("buffer.max_batches", "must be at least 1");
        }
        let probes = probe_jobs(raw_probes, &mut l);
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
        l.finish()?;
        Ok(Config {
            agent_id,
            hostname,
            labels,
            collector: CollectorConfig { url, connect_timeout, backoff_initial, backoff_max },
            sampling_interval: interval,
            power_interval,
            sysfs_root: sources.sysfs_root.unwrap_or_else(|| PathBuf::from("/sys")),
            kinds,
            backlog_max_batches: max_batches,
            probes,
        })
    }
}

/// Validates `[[probes]]` entries; problems are recorded with `probes[i].key` paths.
fn probe_jobs(raw: Vec<RawProbe>, l: &mut Loader) -> Vec<ProbeJob> {
    let mut jobs = Vec::new();
    let mut names = std::collections::HashSet::new();
    for (i, r) in raw.into_iter().enumerate() {
        let key = |k: &str| format!("probes[{i}].{k}");
        let name = r.name.unwrap_or_else(|| format!("probe-{i}"));
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
        let jitter = match r.jitter {
            Some(j) => parse_duration(&key("jitter"), &j, l).unwrap_or_default(),
            None => Duration::ZERO,
        };
        let Some(target) = r.target else {
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
        let Some(schedule) = schedule else { continue };
        jobs.push(ProbeJob {
            name,
            schedule,
            jitter,
            keep_results: r.keep_results.unwrap_or(false),
            args: ProbeArgs {
                target,
                size,
                benches,
                quick: r.quick.unwrap_or(false),
                format,
                repetitions: r.repetitions,
                out: r.out.unwrap_or_else(|| PathBuf::from("/var/lib/wattflip-agent/probes")),
                emit_fio_iolog: None,
                destroy_consent: r.destroy_consent.unwrap_or_default(),
                seed: r.seed,
                read_only: r.read_only.unwrap_or(false),
                pause: None,
            },
        });
    }
    jobs
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
            "agent_id = \"node-1\"\n[labels]\nsite = \"dc1\"\nrack = \"r12\"\n[collector]\nurl = \"http://10.0.0.1:50051\"\n\
             [sampling]\ninterval = \"250ms\"\n[sources]\nsysfs_root = \"/tmp/sys\"\nrapl = false\n[buffer]\nmax_batches = 10\n",
        )
        .unwrap();
        assert_eq!(c.agent_id, "node-1");
        assert_eq!(c.labels.get("rack").map(String::as_str), Some("r12"));
        assert_eq!(c.sampling_interval, Duration::from_millis(250));
        assert_eq!(c.sysfs_root, PathBuf::from("/tmp/sys"));
        assert!(!c.kinds.rapl && c.kinds.hwmon);
        assert_eq!(c.backlog_max_batches, 10);
    }

    #[test]
    fn probe_schedules_are_checked() {
        let err = parse(
            "[[probes]]\nname = \"a\"\nschedule = \"every night\"\ntarget = \"/x\"\nsize = \"huge\"\nbench = \"speed\"\n\
             [[probes]]\nname = \"a\"\nschedule = \"0 0 3 * * *\"\n",
        )
        .unwrap_err();
        let paths: Vec<&str> = err.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, vec!["probes[0].schedule", "probes[0].size", "probes[0].bench", "probes[1].name", "probes[1].target"]);
    }

    #[test]
    fn all_problems_at_once_with_dotted_paths() {
        let err = parse(
            "agent_id = \"bad id\"\n[labels]\nhost = \"x\"\n[collector]\nurll = \"x\"\n[sampling]\ninterval = \"often\"\n\
             [sources]\nrapl = \"yes\"\n[buffer]\nmax_batches = 0\n[extra]\n",
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
        let c = super::Config::from_file(&p).unwrap();
        assert_eq!(c.agent_id, "storage-node-17");
        assert_eq!(c.labels.len(), 3);
        assert_eq!(c.power_interval, std::time::Duration::from_millis(10));
        assert_eq!(c.probes.len(), 1);
        assert_eq!(c.probes[0].jitter, std::time::Duration::from_secs(1200));
    }
}
