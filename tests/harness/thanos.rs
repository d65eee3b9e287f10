//! A real Thanos for the end-to-end tests (issue 29): three `thanos receive` nodes in one hashring
//! with replication factor 3 (a write is acknowledged once 2 of 3 replicas hold it), each with its
//! own free loopback ports and temp TSDB dir, and a `thanos query` in front of all three that
//! deduplicates the replicas. The `thanos` binary comes from `tests/thanos/build.sh` (built once,
//! cached outside the repo); a failed build fails the test with the script's message. To add a
//! component (a compactor, a store gateway), give it a struct with a spawn that waits for
//! `/-/ready` and stop it on drop, like [`Receiver`].
//!
//! Replicas and "exactly once": each receiver stamps the series it holds with its own external
//! label `replica="r<i>"` (`--label`), so the same sample written to three replicas is three series
//! that differ only in `replica`. `thanos query --query.replica-label=replica` removes that label
//! and merges the three into one when asked with `dedup=true`; `--deduplication.func=chain` merges
//! sample by sample (the union of the replicas, one sample per timestamp), so a replica that missed
//! a minute while it was down costs nothing as long as another holds it. The default "penalty"
//! algorithm is a heuristic for scraped data (it follows one replica and switches after a gap);
//! it passed the fault test too, but only "chain" is defined as 1:1 sample deduplication. With
//! `dedup=false` the replicas show up apart.

use crate::{free_port, stop, wait_for};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The label each receiver adds to everything it stores (its replica name) and that query
/// deduplicates along.
pub const REPLICA_LABEL: &str = "replica";
/// The path `thanos receive` serves OTLP/HTTP metrics on, on its `--remote-write.address`
/// (pkg/receive/handler.go in v0.42.5: `POST /api/v1/otlp`, protobuf or JSON). Unlike Prometheus
/// (`/api/v1/otlp/v1/metrics`) there is no `/v1/metrics` suffix.
pub const OTLP_PATH: &str = "/api/v1/otlp";
/// Receivers in the hashring, and copies of every series (`--receive.replication-factor`).
pub const RECEIVERS: usize = 3;

/// The `thanos` binary, built (once per process, and once per machine thanks to the script's
/// cache) by `tests/thanos/build.sh`. Panics with the script's own message when it cannot build.
pub fn thanos_path() -> PathBuf {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = PATH.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("thanos/build.sh");
        let out = Command::new("bash").arg(&script).stderr(Stdio::piped()).output().map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let last = stdout.lines().last().unwrap_or("").trim().to_string();
        if out.status.success() && Path::new(&last).is_file() {
            Ok(PathBuf::from(last))
        } else {
            Err(format!("{} failed ({}):\n{}{}", script.display(), out.status, stdout, String::from_utf8_lossy(&out.stderr)))
        }
    });
    match r {
        Ok(p) => p.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// Waits until `url` answers 200 (Thanos's `/-/ready`), or panics with the component's log (at
/// once when it exited).
fn wait_ready(child: &mut Child, url: &str, what: &str, log: &Path) {
    let mut exited = None;
    let ok = wait_for(Duration::from_secs(60), || {
        if let Ok(Some(st)) = child.try_wait() {
            exited = Some(st);
            return Some(false);
        }
        reqwest::blocking::get(url).ok().filter(|r| r.status().is_success()).map(|_| true)
    });
    if ok != Some(true) {
        let log = std::fs::read_to_string(log).unwrap_or_default();
        let why = exited.map_or("was not ready within 60 s".to_string(), |st| format!("exited ({st})"));
        panic!("{what} {why} (readiness at {url}); its log:\n{log}");
    }
}

/// One `thanos receive` node: HTTP (status, `/-/ready`), gRPC (Store API and replication between
/// receivers: its hashring address) and the remote-write/OTLP HTTP listener.
pub struct Receiver {
    pub index: usize,
    pub http: u16,
    pub grpc: u16,
    pub write: u16,
    capnp: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Receiver {
    fn new(index: usize) -> Receiver {
        let dir = tempfile::Builder::new().prefix("wf-thanos-receive-").tempdir().expect("tempdir");
        Receiver { index, http: free_port(), grpc: free_port(), write: free_port(), capnp: free_port(), child: None, dir }
    }

    /// The address this node has in the hashring (its gRPC listener).
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.grpc)
    }

    /// The OTLP/HTTP metrics URL of this node.
    pub fn otlp_url(&self) -> String {
        format!("http://127.0.0.1:{}{OTLP_PATH}", self.write)
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("receive.log")
    }

    /// Starts (or restarts: same ports, same TSDB dir, so its WAL is replayed) and waits until ready.
    fn spawn(&mut self, hashrings: &Path) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log()).expect("receive log");
        let child = Command::new(thanos_path())
            .arg("receive")
            .arg(format!("--http-address=127.0.0.1:{}", self.http))
            .arg(format!("--grpc-address=127.0.0.1:{}", self.grpc))
            .arg(format!("--remote-write.address=127.0.0.1:{}", self.write))
            // Listens even with the default (gRPC) replication protocol: give it a port of its own.
            .arg(format!("--receive.capnproto-address=127.0.0.1:{}", self.capnp))
            .arg(format!("--tsdb.path={}", self.dir.path().join("tsdb").display()))
            .arg(format!("--label={REPLICA_LABEL}=\"r{}\"", self.index))
            .arg(format!("--receive.hashrings-file={}", hashrings.display()))
            .arg(format!("--receive.local-endpoint={}", self.endpoint()))
            .arg(format!("--receive.replication-factor={RECEIVERS}"))
            // A batch an agent resends through another collector after a collector died may be
            // older than samples of the same series stored since: without an out-of-order window
            // the TSDB refuses it (409) even where it is missing. An identical resent sample is
            // stored once (in-order duplicates are dropped; the head merges the out-of-order one).
            .arg("--tsdb.out-of-order.time-window=1h")
            // No retention, hence no tenant pruning: v0.42.5's pruning job runs every minute of
            // each minute of the day divisible by 4 h (00:00, 04:00, …) and dereferences a tenant
            // whose TSDB is still opening (MultiTSDB.Prune → shouldBeMarkedInactive: SIGSEGV), so a
            // receiver started then dies. Tests keep minutes of data; nothing needs pruning.
            .arg("--tsdb.retention=0d")
            // A replica that is down is retried quickly once it is back (tests restart one).
            .arg("--receive-forward-max-backoff=1s")
            .arg("--log.level=info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start thanos receive");
        let (url, what) = (format!("http://127.0.0.1:{}/-/ready", self.http), format!("thanos receive r{}", self.index));
        let log = self.log();
        wait_ready(self.child.insert(child), &url, &what, &log);
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            stop(c, "thanos", String::new);
        }
    }
}

/// Three receivers in one hashring and a query in front.
pub struct Thanos {
    pub receivers: Vec<Receiver>,
    pub query_http: u16,
    query: Child,
    dir: tempfile::TempDir,
}

/// One series of a query answer: its labels and its samples (ms, value).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: serde_json::Map<String, serde_json::Value>,
    pub samples: Vec<(i64, f64)>,
}

impl Thanos {
    /// Starts the three receivers and the query, and waits until query sees all three stores.
    pub fn start() -> Thanos {
        let dir = tempfile::Builder::new().prefix("wf-thanos-").tempdir().expect("tempdir");
        let mut receivers: Vec<Receiver> = (0..RECEIVERS).map(Receiver::new).collect();
        // One hashring for every tenant; a node must find its --receive.local-endpoint in it.
        let endpoints: Vec<serde_json::Value> = receivers.iter().map(|r| serde_json::json!({ "address": r.endpoint() })).collect();
        let hashrings = serde_json::json!([{ "hashring": "default", "endpoints": endpoints }]);
        std::fs::write(dir.path().join("hashrings.json"), hashrings.to_string()).expect("write hashrings.json");
        for r in &mut receivers {
            r.spawn(&dir.path().join("hashrings.json"));
        }
        let query_http = free_port();
        let log = std::fs::File::create(dir.path().join("query.log")).expect("query log");
        let mut cmd = Command::new(thanos_path());
        cmd.arg("query")
            .arg(format!("--http-address=127.0.0.1:{query_http}"))
            .arg(format!("--grpc-address=127.0.0.1:{}", free_port()))
            .arg(format!("--query.replica-label={REPLICA_LABEL}"))
            .arg("--deduplication.func=chain")
            .arg("--log.level=info");
        for r in &receivers {
            cmd.arg(format!("--endpoint={}", r.endpoint()));
        }
        let query = cmd.stdout(Stdio::null()).stderr(log).spawn().expect("start thanos query");
        let mut t = Thanos { receivers, query_http, query, dir };
        let log = t.dir.path().join("query.log");
        wait_ready(&mut t.query, &format!("http://127.0.0.1:{query_http}/-/ready"), "thanos query", &log);
        t.wait_all_stores();
        t
    }

    /// The receivers' hashring file.
    pub fn hashrings_file(&self) -> PathBuf {
        self.dir.path().join("hashrings.json")
    }

    /// SIGKILL one receiver (no flush, no goodbye); [`Thanos::restart`] brings it back.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.receivers[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts receiver `i` again on its ports and TSDB dir, and waits until query sees it.
    pub fn restart(&mut self, i: usize) {
        let hashrings = self.hashrings_file();
        self.receivers[i].spawn(&hashrings);
        self.wait_all_stores();
    }

    /// Waits until query lists every receiver as a healthy store (it probes them every few seconds).
    pub fn wait_all_stores(&self) {
        self.wait_stores("as healthy stores", |_| true);
    }

    /// Waits until query knows that every receiver's time range covers `t_ms` (a sample's time).
    /// Query keeps each store's range from its last probe (every 5 s) and skips a store whose
    /// range misses the query's: an empty receiver advertises [max, max], so a query sent right
    /// after the first write answers without it. A receiver's range is [its oldest sample, +inf).
    pub fn wait_stores_cover(&self, t_ms: i64) {
        let t = |s: &serde_json::Value, k: &str| s.get(k).and_then(|t| t.as_i64());
        self.wait_stores(&format!("covering {t_ms} ms"), |s| t(s, "minTime").is_some_and(|m| m <= t_ms) && t(s, "maxTime").is_some_and(|m| m >= t_ms));
    }

    /// Waits until query lists every receiver as a healthy store for which `ok` holds.
    fn wait_stores(&self, what: &str, ok: impl Fn(&serde_json::Value) -> bool) {
        let url = format!("http://127.0.0.1:{}/api/v1/stores", self.query_http);
        let want: Vec<String> = self.receivers.iter().map(Receiver::endpoint).collect();
        let done = wait_for(Duration::from_secs(60), || {
            let v: serde_json::Value = reqwest::blocking::get(&url).ok()?.json().ok()?;
            let stores = v.pointer("/data/receive")?.as_array()?;
            let healthy: Vec<&str> =
                stores.iter().filter(|s| s.get("lastError").is_none_or(|e| e.is_null()) && ok(s)).filter_map(|s| s.get("name")?.as_str()).collect();
            want.iter().all(|w| healthy.contains(&w.as_str())).then_some(())
        });
        assert!(done.is_some(), "thanos query did not see all of {want:?} {what} within 60 s; {}", self.logs());
    }

    /// Every component's log, for a failure message.
    pub fn logs(&self) -> String {
        let mut s = format!("query log:\n{}\n", std::fs::read_to_string(self.dir.path().join("query.log")).unwrap_or_default());
        for r in &self.receivers {
            s.push_str(&format!("receive r{} log:\n{}\n", r.index, r.log_text()));
        }
        s
    }

    /// Evaluates an instant PromQL query at `time_s` through query, without partial answers (a
    /// store that does not answer fails the query instead of silently dropping its series).
    /// Returns the series of a matrix or vector answer; panics on an error answer.
    pub fn query(&self, promql: &str, time_s: f64, dedup: bool) -> Vec<Series> {
        let url = format!("http://127.0.0.1:{}/api/v1/query", self.query_http);
        let (time, dedup) = (format!("{time_s:.3}"), dedup.to_string());
        let q = [("query", promql), ("time", time.as_str()), ("dedup", dedup.as_str()), ("partial_response", "false")];
        let resp = reqwest::blocking::Client::new().get(&url).query(&q).send().expect("query thanos");
        let v: serde_json::Value = resp.json().expect("JSON answer from thanos query");
        assert_eq!(v.get("status").and_then(|s| s.as_str()), Some("success"), "query {promql:?} failed: {v}");
        let result = v.pointer("/data/result").and_then(|r| r.as_array()).cloned().unwrap_or_default();
        result.iter().map(series_of).collect()
    }
}

/// A series of a matrix (`values`) or vector (`value`) answer; values come as strings.
fn series_of(s: &serde_json::Value) -> Series {
    let labels = s.get("metric").and_then(|m| m.as_object()).cloned().unwrap_or_default();
    let pair = |p: &serde_json::Value| -> (i64, f64) {
        let t = p.get(0).and_then(|t| t.as_f64()).expect("sample time");
        let v = p.get(1).and_then(|v| v.as_str()).and_then(|v| v.parse().ok()).expect("sample value");
        ((t * 1000.0).round() as i64, v)
    };
    let samples = match (s.get("values").and_then(|v| v.as_array()), s.get("value")) {
        (Some(vals), _) => vals.iter().map(pair).collect(),
        (None, Some(one)) => vec![pair(one)],
        (None, None) => Vec::new(),
    };
    Series { labels, samples }
}

impl Drop for Thanos {
    fn drop(&mut self) {
        stop(&mut self.query, "thanos query", String::new);
    }
}
