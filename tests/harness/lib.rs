//! End-to-end harness: starts real servers (a private `influxd` on free loopback ports with a temp
//! data dir and a query-bounded config, the real `wattflip-collector` binary) and runs the real
//! `wattflip-agent` binary. Everything is stopped on drop. Add a server as a struct with a
//! `start` that waits for readiness and a `Drop` that stops it. Connections use mutual TLS with a
//! test PKI generated here ([`pki`]); no private key is checked in.

// The end-to-end harness is test-only code (no binary ships it): a panic with a message is the
// calling test's failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod bins;
pub mod fleet;
pub mod fleet_efficiency;
pub mod prometheus;
pub mod thanos;

pub use bins::bin;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A certificate authority for tests, with the collector's certificate (valid for 127.0.0.1
/// and localhost) and agent certificates made on demand, all as PEM files in a temp dir.
pub struct Pki {
    pub dir: tempfile::TempDir,
    ca: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Pki {
    /// A fresh CA. `name` tells CAs apart in their subject (for "another CA" tests).
    pub fn new(name: &str) -> Pki {
        let dir = tempfile::Builder::new().prefix("wf-pki-").tempdir().expect("tempdir");
        let key = rcgen::KeyPair::generate().expect("CA key");
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(rcgen::DnType::CommonName, format!("wattflip test CA {name}"));
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        let cert = p.self_signed(&key).expect("CA cert");
        std::fs::write(dir.path().join("ca.pem"), cert.pem()).expect("write ca.pem");
        let pki = Pki { dir, ca: rcgen::Issuer::new(p, key) };
        pki.issue("collector", &["127.0.0.1", "localhost"], None);
        pki
    }

    /// Issues `<file>.pem` and `<file>.key` for the given SANs (and CN); returns their paths.
    pub fn issue(&self, file: &str, sans: &[&str], cn: Option<&str>) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut p = rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).expect("params");
        p.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        }
        let cert = p.signed_by(&key, &self.ca).expect("sign");
        let (c, k) = (self.dir.path().join(format!("{file}.pem")), self.dir.path().join(format!("{file}.key")));
        std::fs::write(&c, cert.pem()).expect("write cert");
        std::fs::write(&k, key.serialize_pem()).expect("write key");
        (c, k)
    }

    /// Issues `<file>.pem` and `<file>.key` for `sans` with the serial number `serial` (to revoke).
    pub fn issue_serial(&self, file: &str, sans: &[&str], serial: u64) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut p = rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).expect("params");
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.serial_number = Some(rcgen::SerialNumber::from(serial));
        let cert = p.signed_by(&key, &self.ca).expect("sign");
        let (c, k) = (self.dir.path().join(format!("{file}.pem")), self.dir.path().join(format!("{file}.key")));
        std::fs::write(&c, cert.pem()).expect("write cert");
        std::fs::write(&k, key.serialize_pem()).expect("write key");
        (c, k)
    }

    /// A certificate revocation list of this CA (PEM) revoking the certificates with `serials`.
    pub fn crl(&self, number: u64, serials: &[u64]) -> String {
        let params = rcgen::CertificateRevocationListParams {
            this_update: rcgen::date_time_ymd(2020, 1, 1),
            next_update: rcgen::date_time_ymd(2099, 1, 1),
            crl_number: rcgen::SerialNumber::from(number),
            issuing_distribution_point: None,
            revoked_certs: serials
                .iter()
                .map(|&s| rcgen::RevokedCertParams {
                    serial_number: rcgen::SerialNumber::from(s),
                    revocation_time: rcgen::date_time_ymd(2021, 1, 1),
                    reason_code: Some(rcgen::RevocationReason::KeyCompromise),
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        };
        params.signed_by(&self.ca).expect("sign the CRL").pem().expect("CRL PEM")
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The collector config's `[tls]` section.
    pub fn collector_tls(&self) -> String {
        let d = self.dir.path();
        format!(
            "[tls]\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            self.ca().display(),
            d.join("collector.pem").display(),
            d.join("collector.key").display()
        )
    }

    /// An agent config's `[tls]` section with a certificate for `agent_id` (its DNS SAN).
    pub fn agent_tls(&self, agent_id: &str) -> String {
        let (c, k) = self.issue(&format!("agent-{agent_id}"), &[agent_id], None);
        format!("[tls]\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n", self.ca().display(), c.display(), k.display())
    }

    /// A tonic client channel to `url` that trusts this CA and presents `identity` (certificate
    /// and key files, e.g. from [`Pki::issue`] of this or another CA), or no certificate.
    pub async fn channel(&self, url: &str, identity: Option<(PathBuf, PathBuf)>) -> Result<tonic::transport::Channel, tonic::transport::Error> {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        let read = |p: &Path| std::fs::read(p).expect("read PEM");
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(&self.ca())));
        if let Some((c, k)) = identity {
            tls = tls.identity(Identity::from_pem(read(&c), read(&k)));
        }
        tonic::transport::Endpoint::from_shared(url.to_string()).expect("url").tls_config(tls)?.connect().await
    }
}

/// The PKI shared by the tests of this process (the collector trusts it by default).
pub fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(|| Pki::new("main"))
}

/// Sends a signal through the `kill` command (keeps this crate free of unsafe code).
pub fn signal(child: &Child, sig: &str) {
    let st = Command::new("kill").arg(format!("-{sig}")).arg(child.id().to_string()).status().expect("kill");
    assert!(st.success(), "kill -{sig} {}", child.id());
}

/// A free TCP port on 127.0.0.1 for a server a test starts (possibly seconds later). Taken below
/// the kernel's ephemeral range (32768–60999 by default), so no outgoing connection of a
/// concurrent test can grab it in the meantime, and never handed out twice in one test process.
/// A whole second two minutes ago: an origin for synthetic data that the collector's clock bounds
/// (`limits.max_time_behind`, 30 days) accept on any day the tests run; a fixed date ages out.
pub fn recent_origin_ns() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970").as_secs();
    (now as i64 - 120) * 1_000_000_000
}

pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Start at a per-process offset so parallel test binaries rarely probe the same ports.
    let base = 20_000 + (std::process::id() % 500) * 20;
    for _ in 0..12_000 {
        let port = 20_000 + (base - 20_000 + NEXT.fetch_add(1, Ordering::Relaxed)) % 12_000;
        let port = u16::try_from(port).expect("port fits");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000..32000 on 127.0.0.1");
}

/// Polls `f` every 20 ms until it returns Some or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How long a server may take to stop on SIGTERM. The collector's own bound is 21 s (two 10 s
/// phases, collector/src/service/server.rs); influxd stops in about a second.
pub const GRACEFUL_STOP: Duration = Duration::from_secs(30);

/// Stops `child` with SIGTERM and waits for it; a server that needs SIGKILL (not gone within
/// [`GRACEFUL_STOP`]) is killed and the test fails, unless it is failing already. `log` says what
/// it logged, for the failure message.
fn stop(child: &mut Child, what: &str, log: impl FnOnce() -> String) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    if let Ok(pid) = i32::try_from(child.id()) {
        // Through the `kill` command, which keeps this crate free of unsafe code.
        let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
    }
    let started = Instant::now();
    while started.elapsed() < GRACEFUL_STOP {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    if !std::thread::panicking() {
        let log = log();
        let tail = &log[log.len() - log.len().min(4000)..];
        panic!("{what} did not stop within {GRACEFUL_STOP:?} of SIGTERM and needed SIGKILL; the end of its log:\n{tail}");
    }
}

/// A private InfluxDB 1.x server.
pub struct Influx {
    pub url: String,
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
    /// Lines added to the `[data]` section (limits such as `max-values-per-tag`).
    data: String,
}

pub fn influxd_path() -> PathBuf {
    for p in ["/usr/bin/influxd", "/usr/local/bin/influxd"] {
        if Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!("influxd not found: install Debian's `influxdb` package (the README's test command does this)");
}

impl Influx {
    pub fn start() -> Influx {
        Self::start_on(free_port())
    }

    /// Starts on a given HTTP port (for tests that start InfluxDB late on a known address).
    pub fn start_on(port: u16) -> Influx {
        Self::start_with_data(port, "")
    }

    /// Starts with `data` added to the config's `[data]` section, e.g. `max-values-per-tag = 1000`.
    pub fn start_with_data(port: u16, data: &str) -> Influx {
        let dir = tempfile::Builder::new().prefix("wf-influx-").tempdir().expect("tempdir");
        let child = Self::spawn(dir.path(), port, data);
        let url = format!("http://127.0.0.1:{port}");
        let mut influx = Influx { url, port, child, _dir: dir, data: data.to_string() };
        influx.wait_ready();
        influx
    }

    /// Stops the server (SIGTERM) and starts it again on the same port and data.
    pub fn restart(&mut self) {
        let log = self._dir.path().join("influxd.log");
        stop(&mut self.child, "influxd", || std::fs::read_to_string(log).unwrap_or_default());
        self.child = Self::spawn(self._dir.path(), self.port, &self.data);
        self.wait_ready();
    }

    fn spawn(d: &Path, port: u16, data: &str) -> Child {
        let rpc = free_port();
        // Bounded queries: an unbounded GROUP BY time() can hang 1.6.7 (docs/conventions.md §7).
        let conf = format!(
            "reporting-disabled = true\nbind-address = \"127.0.0.1:{rpc}\"\n\
             [meta]\n  dir = \"{m}\"\n\
             [data]\n  dir = \"{data_dir}\"\n  wal-dir = \"{wal}\"\n  query-log-enabled = false\n  {data}\n\
             [coordinator]\n  query-timeout = \"10s\"\n  max-select-point = 10000000\n  max-select-series = 100000\n  max-select-buckets = 100000\n\
             [monitor]\n  store-enabled = false\n\
             [http]\n  bind-address = \"127.0.0.1:{port}\"\n  log-enabled = false\n\
             [logging]\n  level = \"warn\"\n",
            m = d.join("meta").display(),
            data_dir = d.join("data").display(),
            wal = d.join("wal").display(),
        );
        let conf_path = d.join("influxdb.conf");
        std::fs::write(&conf_path, conf).expect("write influxdb.conf");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(d.join("influxd.log")).expect("log file");
        Command::new(influxd_path()).arg("-config").arg(&conf_path).stdout(Stdio::null()).stderr(log).spawn().expect("start influxd")
    }

    fn wait_ready(&mut self) {
        let ping = format!("{}/ping", self.url);
        let ok = wait_for(Duration::from_secs(30), || reqwest::blocking::get(&ping).ok().filter(|r| r.status().as_u16() == 204).map(|_| ()));
        if ok.is_none() {
            let log = self.influxd_log();
            stop(&mut self.child, "influxd", String::new);
            panic!("influxd did not answer /ping within 30 s; its log:\n{log}");
        }
    }

    /// Runs an InfluxQL query; returns the JSON answer (timestamps in ns). Panics on HTTP errors
    /// or an `error` in the answer, so a test never passes on a failed query.
    pub fn query(&self, db: &str, q: &str) -> serde_json::Value {
        let resp =
            reqwest::blocking::Client::new().get(format!("{}/query", self.url)).query(&[("db", db), ("q", q), ("epoch", "ns")]).send().expect("query InfluxDB");
        let v: serde_json::Value = resp.json().expect("JSON answer");
        if let Some(e) = v.pointer("/results/0/error").or_else(|| v.get("error")) {
            panic!("query {q:?} failed: {e}");
        }
        v
    }

    /// Like [`Influx::rows`] but `None` on any error (for polling before the database exists).
    pub fn try_rows(&self, db: &str, q: &str) -> Option<Vec<Vec<serde_json::Value>>> {
        let resp = reqwest::blocking::Client::new().get(format!("{}/query", self.url)).query(&[("db", db), ("q", q), ("epoch", "ns")]).send().ok()?;
        let v: serde_json::Value = resp.json().ok()?;
        if v.pointer("/results/0/error").is_some() || v.get("error").is_some() {
            return None;
        }
        let rows = v.pointer("/results/0/series/0/values")?.as_array()?;
        Some(rows.iter().filter_map(|r| r.as_array().cloned()).collect())
    }

    /// The rows of the first series of a query, or empty.
    pub fn rows(&self, db: &str, q: &str) -> Vec<Vec<serde_json::Value>> {
        let v = self.query(db, q);
        v.pointer("/results/0/series/0/values")
            .and_then(|x| x.as_array())
            .map(|rows| rows.iter().filter_map(|r| r.as_array().cloned()).collect())
            .unwrap_or_default()
    }

    /// Every series of a query: (tags, rows).
    pub fn series(&self, db: &str, q: &str) -> Vec<(serde_json::Value, Vec<Vec<serde_json::Value>>)> {
        let v = self.query(db, q);
        v.pointer("/results/0/series")
            .and_then(|x| x.as_array())
            .map(|all| {
                all.iter()
                    .map(|s| {
                        let tags = s.get("tags").cloned().unwrap_or(serde_json::Value::Null);
                        let rows = s
                            .get("values")
                            .and_then(|x| x.as_array())
                            .map(|rows| rows.iter().filter_map(|r| r.as_array().cloned()).collect())
                            .unwrap_or_default();
                        (tags, rows)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn influxd_log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("influxd.log")).unwrap_or_default()
    }

    /// SIGSTOP: influxd stalls (connections accepted, nothing answered) until [`Influx::resume`].
    pub fn pause(&self) {
        signal(&self.child, "STOP");
    }

    pub fn resume(&self) {
        signal(&self.child, "CONT");
    }

    /// Stops the server now (for fault tests).
    pub fn stop(mut self) {
        let log = self._dir.path().join("influxd.log");
        stop(&mut self.child, "influxd", || std::fs::read_to_string(log).unwrap_or_default());
    }
}

impl Drop for Influx {
    fn drop(&mut self) {
        let log = self._dir.path().join("influxd.log");
        stop(&mut self.child, "influxd", || std::fs::read_to_string(log).unwrap_or_default());
    }
}

/// The real collector binary.
pub struct Collector {
    pub addr: String,
    pub url: String,
    child: Child,
    pub dir: tempfile::TempDir,
}

impl Collector {
    /// Starts on a free port with mutual TLS ([`pki`]), writing to `influx_url`/`db`, flushing
    /// every 100 ms.
    pub fn start(influx_url: &str, db: &str) -> Collector {
        Self::start_on(free_port(), influx_url, db)
    }

    pub fn start_on(port: u16, influx_url: &str, db: &str) -> Collector {
        Self::start_with(port, influx_url, db, &pki().collector_tls())
    }

    /// Starts with `extra` appended to the config (its `[tls]` section, `[limits]`, ...).
    pub fn start_with(port: u16, influx_url: &str, db: &str, extra: &str) -> Collector {
        Self::start_limited(port, influx_url, db, extra, None)
    }

    /// [`Collector::start_with`] under an open-file limit of `nofile` (soft and hard, set by
    /// util-linux `prlimit` before the collector starts).
    pub fn start_limited(port: u16, influx_url: &str, db: &str, extra: &str, nofile: Option<u64>) -> Collector {
        let dir = tempfile::Builder::new().prefix("wf-collector-").tempdir().expect("tempdir");
        let cfg = dir.path().join("collector.toml");
        // Lines InfluxDB refuses are kept in the collector's temp dir (`extra` may name its own:
        // its first lines, before any `[section]`, belong to `[influx]`).
        let dead_letter =
            if extra.contains("dead_letter_dir") { String::new() } else { format!("dead_letter_dir = \"{}\"\n", dir.path().join("dead-letter").display()) };
        std::fs::write(
            &cfg,
            format!(
                "listen = \"127.0.0.1:{port}\"\n[influx]\nurl = \"{influx_url}\"\ndatabase = \"{db}\"\n\
                 flush_interval = \"100ms\"\nmax_backoff = \"500ms\"\n{dead_letter}{extra}"
            ),
        )
        .expect("write collector.toml");
        let scheme = if extra.contains("insecure_plaintext_loopback_only = true") { "http" } else { "https" };
        let log = std::fs::File::create(dir.path().join("collector.log")).expect("log");
        let collector = bin("wattflip-collector", "wattflip-collector");
        let mut cmd = match nofile {
            Some(n) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--nofile={n}:{n}")).arg("--").arg(&collector);
                c
            }
            None => Command::new(&collector),
        };
        let child = cmd.arg("--config").arg(&cfg).env("RUST_LOG", "info").stdout(Stdio::null()).stderr(log).spawn().expect("start wattflip-collector");
        let addr = format!("127.0.0.1:{port}");
        let c = Collector { url: format!("{scheme}://{addr}"), addr, child, dir };
        let up = wait_for(Duration::from_secs(20), || std::net::TcpStream::connect(&c.addr).ok());
        assert!(up.is_some(), "collector did not listen on {} within 20 s:\n{}", c.addr, c.log());
        c
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("collector.log")).unwrap_or_default()
    }

    /// The collector's config file (for its subcommands, e.g. `dead-letter list`).
    pub fn config(&self) -> PathBuf {
        self.dir.path().join("collector.toml")
    }

    /// Peak resident memory of the collector process so far (VmHWM, KiB).
    pub fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("read /proc/<collector>/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:").and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()))
            .expect("VmHWM in /proc/<pid>/status")
    }

    /// SIGKILL: no drain, no goodbye (fault tests).
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn pause(&self) {
        signal(&self.child, "STOP");
    }

    pub fn resume(&self) {
        signal(&self.child, "CONT");
    }
}

impl Collector {
    /// SIGTERM, as systemd stops it: returns how long the collector took to exit and its status;
    /// the test fails if it needs SIGKILL.
    pub fn terminate(mut self) -> (Duration, std::process::ExitStatus) {
        let started = Instant::now();
        let log = self.dir.path().join("collector.log");
        stop(&mut self.child, "wattflip-collector", || std::fs::read_to_string(log).unwrap_or_default());
        let status = self.child.wait().expect("collector exit status");
        (started.elapsed(), status)
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let log = self.dir.path().join("collector.log");
        stop(&mut self.child, "wattflip-collector", || std::fs::read_to_string(log).unwrap_or_default());
    }
}

/// Copies fixture sysfs scenarios (merged, later ones win) into a fresh writable tree.
pub fn sysfs_tree(scenarios: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix("wf-sys-").tempdir().expect("tempdir");
    let root = dir.path().join("sys");
    std::fs::create_dir_all(&root).expect("mkdir");
    for s in scenarios {
        let src = fixtures().join("sysfs").join(s).join("sys");
        let status = Command::new("cp").arg("-a").arg(format!("{}/.", src.display())).arg(&root).status().expect("cp");
        assert!(status.success(), "copy fixture {s}");
    }
    (dir, root)
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Writes an agent config and returns its path.
pub fn agent_config(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("agent.toml");
    std::fs::write(&p, body).expect("write agent.toml");
    p
}

/// Runs the agent binary with arguments, returning the child (stdout/stderr to files in `dir`).
/// The ledger lines (`wattflip::ledger`, one per stored batch) are on, and stderr is appended
/// to, so a restarted agent keeps one log.
pub fn spawn_agent(dir: &Path, args: &[&str]) -> Child {
    let out = std::fs::File::create(dir.join("agent.stdout")).expect("stdout file");
    let err = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("agent.stderr")).expect("stderr file");
    Command::new(bin("wattflip-agent", "wattflip-agent"))
        .args(args)
        .env("RUST_LOG", "info,wattflip::ledger=debug,wattflip::resend=debug")
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("start wattflip-agent")
}

/// Waits for a child with a timeout; kills it and panics with its stderr on timeout.
pub fn wait_child(child: &mut Child, timeout: Duration, dir: &Path) -> std::process::ExitStatus {
    let st = wait_for(timeout, || child.try_wait().ok().flatten());
    match st {
        Some(s) => s,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("agent did not finish within {timeout:?}; stderr:\n{}", std::fs::read_to_string(dir.join("agent.stderr")).unwrap_or_default());
        }
    }
}

/// Replaces a counter file's value the way the kernel updates a sysfs attribute: in place, in one
/// write, never empty. The agent keeps attributes open and re-reads them with `pread`, so a
/// rename (a new inode) would go unnoticed. Zero-padding keeps the length when the value shrinks.
pub fn overwrite_in_place(path: &Path, value: u64) {
    use std::os::unix::fs::FileExt as _;
    let old_len = std::fs::metadata(path).map(|m| m.len() as usize).unwrap_or(0);
    let width = old_len.saturating_sub(1);
    let text = format!("{value:0width$}\n");
    let f = std::fs::OpenOptions::new().write(true).open(path).expect("open counter");
    f.write_all_at(text.as_bytes(), 0).expect("write counter");
}

/// A batch message of `n` temperature samples from `agent_id` (nvme0..7 `Composite`, 40–49 °C),
/// stamped `t0`, `t0 + 1`, … ns so that no two samples share a point.
pub fn temperature_batch(agent_id: &str, seq: u64, n: usize, t0: i64) -> wattflip_proto::v1::AgentMessage {
    temperature_batch_over(agent_id, seq, n, t0, 8)
}

/// [`temperature_batch`] over `series` devices (`nvme0` … `nvme<series-1>`, round robin).
pub fn temperature_batch_over(agent_id: &str, seq: u64, n: usize, t0: i64, series: usize) -> wattflip_proto::v1::AgentMessage {
    use wattflip_proto::v1;
    v1::AgentMessage {
        kind: Some(v1::agent_message::Kind::Batch(v1::Batch {
            agent_id: agent_id.into(),
            sequence: seq,
            temperature: (0..n)
                .map(|i| v1::TemperatureSample {
                    time_ns: t0 + i as i64,
                    source: "hwmon".into(),
                    device: format!("nvme{}", i % series.max(1)),
                    sensor: "Composite".into(),
                    // Realistic m°C readings (40.000, 40.125, …): not integers, which print faster.
                    celsius: 40.0 + (i % 80) as f64 * 0.125,
                })
                .collect(),
            ..Default::default()
        })),
    }
}
