//! Collector configuration: a strict TOML file (unknown keys rejected, every problem reported at
//! once with its dotted path) overlaid by command-line flags. Add a setting as a field of a `Raw*`
//! struct, a check in `Config::from_loader`, and a line in `collector.example.toml`; a sink's own
//! settings go in its configuration type (`[influx]`: `sinks/influx/config.rs`; every other
//! sink's table, `[otlp]` among them, is read by its entry in `sinks::registry`), composed here.

use serde::Deserialize;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::CertificateRevocationListDer;
use wattflip_infra::tls::{RawTls, TlsMode};

// The InfluxDB sink owns its configuration types and their checks; the service configuration
// composes them (and re-exports them here, where they were).
use crate::sinks::influx::config::RawInflux;
pub use crate::sinks::influx::config::{InfluxApi, InfluxConfig, Secret, DEFAULT_DEAD_LETTER_DIR};
pub use crate::sinks::otlp::config::OtlpConfig;
use crate::sinks::{registry, Configured, Registration};
use wattflip_infra::duration::Bounded;
use wattflip_infra::tomlcfg::{ConfigError, Loader};

/// Where accepted lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkKind {
    InfluxDb,
    /// Discards lines and acknowledges at once: for benchmarking the gRPC side alone.
    Null,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Largest gRPC message accepted from an agent.
    pub max_message_bytes: usize,
    /// Token bucket per agent id: sustained points per second and burst size.
    pub agent_points_per_second: f64,
    pub agent_burst_points: f64,
    /// Sequences remembered per agent to acknowledge duplicates without rewriting them.
    pub dedup_window: usize,
    /// A stream that sends no Hello within this long after it opened is closed.
    pub hello_timeout: Duration,
    /// A point stamped further ahead of the collector's clock than this is refused (`time_ahead`).
    pub max_time_ahead: Duration,
    /// A point stamped further behind the collector's clock than this is refused (`time_behind`).
    pub max_time_behind: Duration,
    /// Connections held at once; None: as many as the open-file limit allows.
    pub max_connections: Option<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub listen: SocketAddr,
    pub influx: InfluxConfig,
    pub sink: SinkKind,
    /// The sinks besides InfluxDB whose tables are configured (`[otlp]`), in registration order.
    pub sinks: Configured,
    pub limits: Limits,
    pub tls: TlsMode,
    /// `GET /metrics` (Prometheus text format) is served here when set.
    pub metrics_listen: Option<SocketAddr>,
    /// `tls.crl_file` and `tls.deny_file`: revoked agents, reloaded while running.
    pub revocation: RevocationFiles,
}

#[derive(Debug, Default, Deserialize)]
struct RawLimits {
    max_message_bytes: Option<usize>,
    agent_points_per_second: Option<f64>,
    agent_burst_points: Option<f64>,
    dedup_window: Option<usize>,
    hello_timeout: Option<String>,
    max_time_ahead: Option<String>,
    max_time_behind: Option<String>,
    max_connections: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
struct RawMetrics {
    listen: Option<String>,
}

/// Command-line values that override the file.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<String>,
    pub influx_url: Option<String>,
    pub influx_db: Option<String>,
    /// `--insecure-loopback`: same as `tls.insecure_plaintext_loopback_only = true`.
    pub insecure_loopback: bool,
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:50051";
pub const DEFAULT_HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Half the throttling detector's lateness bound (2 min): a reading accepted this far ahead can
/// never make a drive's real readings late for the analyses (docs/schema.md, *Timestamps*).
pub const DEFAULT_MAX_TIME_AHEAD: Duration = Duration::from_secs(60);
/// An agent's spool may replay a month-long outage; older points are refused.
pub const DEFAULT_MAX_TIME_BEHIND: Duration = Duration::from_secs(30 * 86_400);

impl Config {
    /// Loads `file` (if any) and applies `ov`. Errors list every problem with its key.
    pub fn load(file: Option<&Path>, ov: &Overrides) -> Result<Config, ConfigError> {
        let loader = match file {
            Some(f) => Loader::from_file(f)?,
            None => Loader::from_str(Path::new("<command line>"), "")?,
        };
        Self::from_loader(loader, ov, &registry())
    }

    /// Parses `text` as if it were the contents of `file` (which only names errors).
    pub fn from_str(file: &Path, text: &str, ov: &Overrides) -> Result<Config, ConfigError> {
        Self::from_str_with(file, text, ov, &registry())
    }

    /// [`Config::from_str`] with the sinks of `sinks` (a registry with more entries).
    pub fn from_str_with(file: &Path, text: &str, ov: &Overrides, sinks: &[Registration]) -> Result<Config, ConfigError> {
        Self::from_loader(Loader::from_str(file, text)?, ov, sinks)
    }

    /// The OTLP sink's configuration, when `[otlp]` is configured.
    pub fn otlp(&self) -> Option<&OtlpConfig> {
        self.sinks.get::<OtlpConfig>()
    }

    fn from_loader(mut loader: Loader, ov: &Overrides, registered: &[Registration]) -> Result<Config, ConfigError> {
        let listen: Option<String> = loader.take("listen");
        let influx: RawInflux = loader.take("influx");
        let limits: RawLimits = loader.take("limits");
        let sink: Option<String> = loader.take("sink");
        // The collector's own keys of `[tls]`, taken before the section shared with the agent.
        let crl_file: Option<PathBuf> = loader.take_from("tls", "crl_file");
        let deny_file: Option<PathBuf> = loader.take_from("tls", "deny_file");
        let mut raw_tls: RawTls = loader.take("tls");
        let metrics: RawMetrics = loader.take("metrics");

        let listen_s = ov.listen.clone().or(listen).unwrap_or_else(|| DEFAULT_LISTEN.into());
        let listen = match listen_s.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                loader.problem("listen", format!("`{listen_s}` is not an address; write e.g. `127.0.0.1:50051`"));
                None
            }
        };
        let influx = InfluxConfig::from_raw(influx, ov.influx_url.clone(), ov.influx_db.clone(), &mut loader);
        let sinks = Configured(registered.iter().filter_map(|r| (r.configure)(&mut loader)).collect());
        let limits = limits_of(limits, &mut loader);
        let sink = match sink.as_deref().unwrap_or("influxdb") {
            "influxdb" => SinkKind::InfluxDb,
            "null" => SinkKind::Null,
            other => {
                loader.problem("sink", format!("`{other}` is not `influxdb` or `null`"));
                SinkKind::InfluxDb
            }
        };
        if ov.insecure_loopback {
            raw_tls.insecure_plaintext_loopback_only = Some(true);
        }
        let tls = TlsMode::from_raw("tls", raw_tls, &mut loader);
        if let (Some(TlsMode::InsecurePlaintextLoopback), Some(a)) = (&tls, listen) {
            if !a.ip().is_loopback() {
                loader.problem(
                    "listen",
                    format!("`{a}` is not a loopback address, and tls.insecure_plaintext_loopback_only refuses to serve plaintext beyond loopback; configure [tls] certificates"),
                );
            }
        }
        let metrics_listen = metrics.listen.and_then(|m| match m.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                loader.problem("metrics.listen", format!("`{m}` is not an address; write e.g. `127.0.0.1:9464`"));
                None
            }
        });
        // Read and parsed exactly as `run` loads them (service::revocation), every problem listed.
        if let Some(Err(e)) = crl_file.as_deref().map(read_crl) {
            loader.problem("tls.crl_file", e);
        }
        if let Some(Err(e)) = deny_file.as_deref().map(read_denied) {
            loader.problem("tls.deny_file", e);
        }
        loader.finish()?;
        Ok(Config {
            listen: listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 50051))),
            influx,
            sink,
            sinks,
            limits,
            // finish() succeeded, so from_raw returned a mode.
            tls: tls.unwrap_or(TlsMode::InsecurePlaintextLoopback),
            metrics_listen,
            revocation: RevocationFiles { crl_file, deny_file },
        })
    }
}

/// `[limits]`: every problem reported to `loader`, defaults where a value is refused.
fn limits_of(limits: RawLimits, loader: &mut Loader) -> Limits {
    let hello_timeout = Bounded::new(Duration::from_millis(100), Duration::from_secs(600)).read(
        "limits.hello_timeout",
        limits.hello_timeout.as_deref(),
        DEFAULT_HELLO_TIMEOUT,
        loader,
    );
    let window = Bounded::new(Duration::from_secs(1), Duration::from_secs(10 * 365 * 86_400))
        .because("the window is compared in i64 nanoseconds; a decade covers any real clock skew");
    let max_time_ahead = window.read("limits.max_time_ahead", limits.max_time_ahead.as_deref(), DEFAULT_MAX_TIME_AHEAD, loader);
    let max_time_behind = window.read("limits.max_time_behind", limits.max_time_behind.as_deref(), DEFAULT_MAX_TIME_BEHIND, loader);
    let max_message_bytes = limits.max_message_bytes.unwrap_or(4 << 20);
    if max_message_bytes < 1024 {
        loader.problem("limits.max_message_bytes", "must be at least 1024");
    }
    let agent_points_per_second = limits.agent_points_per_second.unwrap_or(50_000.0);
    let agent_burst_points = limits.agent_burst_points.unwrap_or(1_000_000.0);
    for (k, v) in [("limits.agent_points_per_second", agent_points_per_second), ("limits.agent_burst_points", agent_burst_points)] {
        if !(v.is_finite() && v >= 1.0) {
            loader.problem(k, format!("{v} must be a number of at least 1"));
        }
    }
    if limits.max_connections == Some(0) {
        loader.problem("limits.max_connections", "must be at least 1 (omit it to take what the open-file limit allows)");
    }
    let dedup_window = limits.dedup_window.unwrap_or(4096);
    if dedup_window == 0 {
        loader.problem("limits.dedup_window", "must be at least 1");
    }
    Limits {
        max_message_bytes,
        agent_points_per_second,
        agent_burst_points,
        dedup_window,
        hello_timeout,
        max_time_ahead,
        max_time_behind,
        max_connections: limits.max_connections,
    }
}

/// The two files, as configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RevocationFiles {
    pub crl_file: Option<PathBuf>,
    pub deny_file: Option<PathBuf>,
}

/// What to do about a `tls.crl_file` that cannot be used.
const CRL_FIX: &str =
    "give the certificate revocation list of the agents' CA, PEM (`-----BEGIN X509 CRL-----`) or DER, e.g. from `openssl ca -gencrl`, or remove tls.crl_file";

/// Reads a `tls.crl_file` as the collector uses it, at start, on every reload and in
/// `check-config`: its PEM `X509 CRL` blocks, else the whole file as DER, each parsed as a
/// certificate revocation list. Returns the lists and the serial numbers (DER content bytes)
/// they revoke; the error names the file and says what to do.
pub fn read_crl(p: &Path) -> Result<(Vec<CertificateRevocationListDer<'static>>, HashSet<Vec<u8>>), String> {
    use x509_parser::prelude::FromDer;
    let bytes = std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    let pem: Vec<_> = CertificateRevocationListDer::pem_slice_iter(&bytes).collect::<Result<_, _>>().map_err(|e| format!("{}: {e}; {CRL_FIX}", p.display()))?;
    let crls = if pem.is_empty() { vec![CertificateRevocationListDer::from(bytes)] } else { pem };
    let mut revoked = HashSet::new();
    for crl in &crls {
        let (_, parsed) = x509_parser::revocation_list::CertificateRevocationList::from_der(crl.as_ref())
            .map_err(|e| format!("{}: not a certificate revocation list ({e}); {CRL_FIX}", p.display()))?;
        revoked.extend(parsed.iter_revoked_certificates().map(|r| r.raw_serial().to_vec()));
    }
    Ok((crls, revoked))
}

/// The agent ids of a `tls.deny_file` (one a line, `#` comments).
pub fn read_denied(p: &Path) -> Result<HashSet<String>, String> {
    let text = std::fs::read_to_string(p)
        .map_err(|e| format!("cannot read {}: {e}; give a UTF-8 text file of agent ids, one a line, or remove tls.deny_file", p.display()))?;
    Ok(text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()).map(str::to_owned).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn load(text: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("collector.toml");
        std::fs::write(&f, text).unwrap();
        Config::load(Some(&f), &Overrides::default())
    }

    #[test]
    fn defaults_and_overrides() {
        let c = Config::load(None, &Overrides { influx_db: Some("x".into()), insecure_loopback: true, ..Default::default() }).unwrap();
        assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(c.influx.database, "x");
        assert_eq!(c.influx.batch_lines, 5000);
        assert_eq!(c.influx.flush_interval, Duration::from_secs(1));
        assert_eq!(c.tls, TlsMode::InsecurePlaintextLoopback);
        assert_eq!(c.limits.dedup_window, 4096);
        assert_eq!(c.limits.hello_timeout, Duration::from_secs(10));
        assert_eq!((c.limits.max_time_ahead, c.limits.max_time_behind), (Duration::from_secs(60), Duration::from_secs(2_592_000)));
        assert_eq!(c.influx.dead_letter_dir, PathBuf::from("/var/lib/wattflip-collector/dead-letter"));
        assert_eq!(c.sink, SinkKind::InfluxDb);
        assert_eq!(c.metrics_listen, None);
    }

    #[test]
    fn tls_is_required_and_plaintext_only_on_loopback() {
        let err = Config::load(None, &Overrides::default()).unwrap_err();
        let paths: Vec<_> = err.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, vec!["tls.ca_file", "tls.cert_file", "tls.key_file"]);
        let err = load("listen = \"0.0.0.0:50051\"\n[tls]\ninsecure_plaintext_loopback_only = true\n").unwrap_err();
        assert_eq!(err.problems.len(), 1);
        assert_eq!(err.problems[0].path, "listen");
        assert!(err.problems[0].message.starts_with("`0.0.0.0:50051` is not a loopback address"));
        let c =
            load("listen = \"[::1]:1\"\nsink = \"null\"\n[tls]\ninsecure_plaintext_loopback_only = true\n[metrics]\nlisten = \"127.0.0.1:9464\"\n").unwrap();
        assert_eq!(c.sink, SinkKind::Null);
        assert_eq!(c.metrics_listen, Some("127.0.0.1:9464".parse().unwrap()));
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let err = load(
            "listen = \"nowhere\"\nbogus = 1\n[tls]\ninsecure_plaintext_loopback_only = true\n[influx]\nurl = \"ftp://x\"\nbatch_lines = 9000\nflush_interval = \"soon\"\ndatabse = \"x\"\n",
        )
        .unwrap_err();
        let paths: Vec<_> = err.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, vec!["influx.databse", "listen", "influx.url", "influx.batch_lines", "influx.flush_interval", "bogus"]);
    }

    #[test]
    fn retention_is_off_by_default_and_checked_when_set() {
        const TLS: &str = "[tls]\ninsecure_plaintext_loopback_only = true\n";
        assert_eq!(load(TLS).unwrap().influx.retention, None);
        let c = load(&format!("{TLS}[influx]\nraw_retention = \"7d\"\n")).unwrap();
        let r = c.influx.retention.unwrap();
        assert_eq!((r.raw, r.rollup, r.settle, r.max_dirty), (Duration::from_secs(604_800), Duration::from_secs(34_560_000), Duration::from_secs(30), 200_000));
        let s = r.setup_statements("wf");
        assert_eq!(s[1].0, "CREATE RETENTION POLICY \"raw\" ON \"wf\" DURATION 604800s REPLICATION 1 SHARD DURATION 86400s DEFAULT");
        assert_eq!(s[2].0, "ALTER RETENTION POLICY \"raw\" ON \"wf\" DURATION 604800s SHARD DURATION 86400s DEFAULT");
        assert_eq!(s[4].0, "ALTER RETENTION POLICY \"rollup_1m\" ON \"wf\" DURATION 34560000s SHARD DURATION 604800s");
        assert_eq!(s[6].0, "ALTER RETENTION POLICY \"rollup_1h\" ON \"wf\" DURATION 34560000s SHARD DURATION 604800s");
        // InfluxDB's own choice per duration (1 h below 2 days, 1 day below 180 days, else 7 days).
        let shard = |secs: u64| crate::sinks::influx::config::shard_duration(Duration::from_secs(secs)).as_secs();
        assert_eq!(
            [3_600, 7_200, 172_799, 172_800, 604_800, 2_592_000, 15_551_999, 15_552_000].map(shard),
            [3_600, 3_600, 3_600, 86_400, 86_400, 86_400, 86_400, 604_800]
        );
        let err = load(&format!("{TLS}[influx]\nraw_retention = \"30m\"\nrollup_retention = \"10m\"\nrollup_max_dirty = 0\n")).unwrap_err();
        let paths: Vec<_> = err.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, vec!["influx.raw_retention", "influx.rollup_retention", "influx.rollup_max_dirty"], "{err}");
        let err = load(&format!("{TLS}[influx]\nrollup_settle = \"5s\"\n")).unwrap_err();
        assert!(err.problems[0].message.contains("need raw_retention"), "{err}");
        let err = load(&format!("{TLS}[influx]\nraw_retention = \"7d\"\napi = \"v2\"\norg = \"o\"\nsecret_env = \"PATH\"\n")).unwrap_err();
        assert_eq!(err.problems.iter().map(|p| p.path.as_str()).collect::<Vec<_>>(), vec!["influx.raw_retention"], "{err}");
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret("hunter2".into());
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
    }
}

#[cfg(test)]
mod example {
    #[test]
    fn the_example_config_is_valid() {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("collector.example.toml");
        // The certificate paths are where a deployment puts them; none exist on a build machine,
        // so those three are the only problems, and with the plaintext flag the file is valid.
        let err = super::Config::load(Some(&p), &super::Overrides::default()).unwrap_err();
        let paths: Vec<_> = err.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, vec!["tls.ca_file", "tls.cert_file", "tls.key_file"]);
        assert!(err.problems[0].message.starts_with("cannot read /etc/wattflip-collector/ca.pem"));
        let text = std::fs::read_to_string(&p).unwrap().replace("0.0.0.0:", "127.0.0.1:");
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(&f, text).unwrap();
        let ov = super::Overrides { insecure_loopback: true, ..Default::default() };
        let e = super::Config::load(Some(&f), &ov).unwrap_err();
        assert_eq!(e.problems.len(), 3, "{e}"); // the files cannot be combined with the flag
        let text = std::fs::read_to_string(&f).unwrap();
        let text: String = text.lines().filter(|l| !l.contains("_file =")).map(|l| format!("{l}\n")).collect();
        std::fs::write(&f, text).unwrap();
        let c = super::Config::load(Some(&f), &ov).unwrap();
        assert_eq!(c.influx.database, "wattflip");
        assert_eq!(c.limits.max_message_bytes, 4194304);
        assert_eq!(c.limits.agent_points_per_second, 50000.0);
    }
}
