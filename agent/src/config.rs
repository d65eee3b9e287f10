//! Agent configuration: strict TOML (unknown keys rejected, every problem reported at once with
//! its dotted path), composed of each component's own config type and checks: `[drives]` in
//! `drives::config`, `[collector]`/`[spool]` in `export::config`, `[sources]` and
//! `[sampling.power_intervals]` in `sensors::config`, `[[probes]]` in `probes::config`. What is
//! left here is the agent's identity, sampling, buffer, TLS and metrics. Add a component's
//! setting in its own config module; a new table is one `l.take` in [`Config::from_loader`] (in
//! the order problems should be listed), and a line in `agent/agent.example.toml`.

pub use crate::drives::config::DrivesConfig;
use crate::drives::config::RawDrives;
pub use crate::export::config::CollectorConfig;
use crate::export::config::{collector_config, spool_config, RawCollector, RawSpool};
use crate::export::spool::SpoolConfig;
use crate::probes::config::{probe_jobs, ProbeJob, RawProbe};
pub use crate::sensors::config::PowerIntervals;
use crate::sensors::config::{power_intervals, recheck_interval, sensor_kinds, RawPowerIntervals, RawSources};
use crate::sensors::SensorKinds;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use wattflip_infra::duration::{Bounded, HOUR};
use wattflip_infra::tls::{RawTls, TlsMode};
use wattflip_infra::tomlcfg::{ConfigError, Loader};
use wattflip_proto::domain::{check_agent_id, check_label, MAX_LABELS};

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

#[derive(Debug, Default, Deserialize)]
struct RawSampling {
    interval: Option<String>,
    power_interval: Option<String>,
    recheck_interval: Option<String>,
    #[serde(default)]
    power_intervals: RawPowerIntervals,
}

#[derive(Debug, Default, Deserialize)]
struct RawBuffer {
    max_batches: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
struct RawMetrics {
    listen: Option<String>,
}

/// The host name from the kernel (no libc call, no extra crate).
pub fn system_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "localhost".into())
}

impl Config {
    /// Reads `file` (a regular file of at most 1 MiB; see [`wattflip_infra::tomlcfg::read_bounded`]).
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

    /// Takes every table in turn and checks it; problems are listed in this order.
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

        let (agent_id, hostname) = identity(agent_id, hostname_cfg, &labels, &mut l);
        let tls = match raw_tls {
            Some(raw) => TlsMode::from_raw("tls", raw, &mut l),
            None if require_tls => TlsMode::from_raw("tls", RawTls::default(), &mut l),
            None => None,
        };
        let collector = collector_config(collector, &tls, &mut l);
        // 1 kHz is the RAPL update rate; faster polling only reads the same value again.
        let interval = Bounded::new(Duration::from_millis(1), HOUR).read("sampling.interval", sampling.interval.as_deref(), Duration::from_secs(1), &mut l);
        let power_interval = Bounded::new(Duration::from_millis(1), interval).because("at most sampling.interval").read(
            "sampling.power_interval",
            sampling.power_interval.as_deref(),
            interval,
            &mut l,
        );
        let power_intervals = power_intervals(sampling.power_intervals, &mut l);
        let drives = DrivesConfig::from_raw(raw_drives, &mut l);
        let max_batches = buffer.max_batches.unwrap_or(3600);
        if max_batches == 0 {
            l.problem("buffer.max_batches", "must be at least 1");
        }
        let (mut kinds, sysfs_root) = sensor_kinds(sources, &mut l);
        kinds.recheck = recheck_interval(sampling.recheck_interval, interval, &mut l);
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
            collector,
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

/// The agent id (default: the host name) and host name, with the id and the labels checked.
fn identity(agent_id: Option<String>, hostname: Option<String>, labels: &BTreeMap<String, String>, l: &mut Loader) -> (String, String) {
    let hostname = hostname.unwrap_or_else(system_hostname);
    let agent_id = agent_id.unwrap_or_else(|| hostname.clone());
    if let Err(e) = check_agent_id("agent_id", &agent_id) {
        l.problem(e.field, e.reason);
    }
    if labels.len() > MAX_LABELS {
        l.problem("labels", format!("{} labels; at most {MAX_LABELS} (labels become tags)", labels.len()));
    }
    for (k, v) in labels {
        if let Err(e) = check_label(k, v) {
            l.problem(e.field, e.reason);
        }
    }
    (agent_id, hostname)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::spool::SyncPolicy;
    use crate::probes::{PlanOverrides, ValuesProfile};

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_str(Path::new("agent.toml"), text)
    }

    /// A self-signed certificate (its own CA) and its key in `dir`: (ca, cert, key) paths.
    pub(super) fn tls_files(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["node".to_string()]).unwrap().self_signed(&key).unwrap();
        let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c.clone(), c, k)
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
        let (ca, cert, key) = tls_files(dir.path());
        let tls = format!("[tls]\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n", ca.display(), cert.display(), key.display());
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
                "`0s` is outside 1ms..=1h (`every_batch`, or a sync interval above zero)",
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
    fn recheck_interval_defaults_to_100ms_within_one_report_and_is_checked() {
        let recheck = |sampling: &str| parse(&format!("[sampling]\n{sampling}\n{TLS}")).map(|c| c.kinds.recheck);
        assert_eq!(recheck("").unwrap(), Duration::from_millis(100));
        assert_eq!(recheck("interval = \"20ms\"").unwrap(), Duration::from_millis(20), "never longer than a report interval");
        assert_eq!(recheck("recheck_interval = \"1s\"").unwrap(), Duration::from_secs(1));
        assert_eq!(recheck("interval = \"5s\"\nrecheck_interval = \"5ms\"").unwrap(), Duration::from_millis(5));
        let err = parse(&format!("[sampling]\ninterval = \"1s\"\nrecheck_interval = \"2s\"\nrecheck_every = \"1s\"\n{TLS}")).unwrap_err();
        let problems: Vec<(&str, &str)> = err.problems.iter().map(|p| (p.path.as_str(), p.message.as_str())).collect();
        assert_eq!(
            problems,
            vec![
                ("sampling.recheck_every", "unknown key (check the spelling; see the example config)"),
                ("sampling.recheck_interval", "`2s` is outside 1ms..=1s (every check is a stat() of each attribute, 1ms is already one per 1 kHz reading; a replaced file must be noticed within one report interval, sampling.interval)"),
            ]
        );
        for (value, message) in [
            ("500us", "`500us` is outside 1ms..=1s (every check is a stat() of each attribute, 1ms is already one per 1 kHz reading; a replaced file must be noticed within one report interval, sampling.interval)"),
            ("soon", "`soon` is not a duration (expected number at 0); write e.g. `500ms`, `5s` or `2m`"),
        ] {
            let err = recheck(&format!("recheck_interval = \"{value}\"")).unwrap_err();
            let problems: Vec<(&str, &str)> = err.problems.iter().map(|p| (p.path.as_str(), p.message.as_str())).collect();
            assert_eq!(problems, vec![("sampling.recheck_interval", message)]);
        }
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
                ("sampling.power_intervals.rapl", "`500us` is outside 1ms..=1s (1 kHz .. 1 Hz)"),
                ("sampling.power_intervals.hwmon", "`2s` is outside 1ms..=1s (1 kHz .. 1 Hz)"),
                (
                    "sampling.power_intervals.ipmi",
                    "`100ms` is outside 1s..=1s (a BMC updates its DCMI power reading about once per second, so IPMI is read at most at 1 Hz)"
                ),
                ("sampling.power_intervals.nvme_estimate", "`often` is not a duration (expected number at 0); write e.g. `500ms`, `5s` or `2m`"),
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
        assert_eq!(err.problems[0].message, "`100us` is outside 1ms..=1s");
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
                (
                    "probes[0].io_sizes[4]",
                    "`big` is not a size (couldn't parse \"big\" into a ByteSize, cannot parse float from empty string); write e.g. 1GiB or 512MiB"
                ),
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
                (
                    "probes[1].ignore_io.RW",
                    "IgnoreIO 128 is not below IOCount 128 for RW (counts not set here are the quick profile's); raise io_count.RW or lower ignore_io.RW"
                ),
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
        assert_eq!(paths, vec!["drives.bogus", "drives.smart_interval", "drives.nvme_path", "drives.sweep_patterns[0]", "drives.sweep_patterns[1]"]);
    }

    /// `drives.smart_nocheck` takes smartctl's `-n` words only; `drives.smart_workers` 1..=256.
    #[test]
    fn drives_power_check_and_workers() {
        let d = parse("[drives]\nsmart_nocheck = \"idle\"\nsmart_workers = 32\n[tls]\ninsecure_plaintext_loopback_only = true\n").unwrap().drives;
        assert_eq!((d.smart_nocheck, d.smart_workers), (wattflip_drives::PowerCheck::Idle, 32));
        let err = parse("[drives]\nsmart_nocheck = \"spun-down\"\nsmart_workers = 0\n[tls]\ninsecure_plaintext_loopback_only = true\n").unwrap_err();
        let paths: Vec<&str> = err.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, vec!["drives.smart_nocheck", "drives.smart_workers"]);
    }

    #[test]
    fn all_problems_at_once_with_dotted_paths() {
        let err = parse(
            "agent_id = \"bad id\"\n[labels]\nhost = \"x\"\n[collector]\nurll = \"x\"\n[sampling]\ninterval = \"often\"\n\
             [sources]\nrapl = \"yes\"\n[buffer]\nmax_batches = 0\n[extra]\n[tls]\ninsecure_plaintext_loopback_only = true\n",
        )
        .unwrap_err();
        let paths: Vec<&str> = err.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, vec!["collector.urll", "sources.rapl", "agent_id", "labels.host", "sampling.interval", "buffer.max_batches", "extra"]);
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
        let (ca, cert, key) = super::tests::tls_files(dir.path());
        let text = std::fs::read_to_string(&p)
            .unwrap()
            .replace("/etc/wattflip-agent/ca.pem", &ca.display().to_string())
            .replace("/etc/wattflip-agent/agent.pem", &cert.display().to_string())
            .replace("/etc/wattflip-agent/agent.key", &key.display().to_string());
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
