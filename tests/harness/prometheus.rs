//! A private Prometheus server for the OTLP tests (issue 28): the binary built by
//! `tests/prometheus/build.sh` (cached outside the repo by version), started with
//! `--web.enable-otlp-receiver` on a free loopback port with a temp data dir, stopped on drop;
//! [`Prometheus::restart`] keeps port and data; [`Prometheus::start_with_rules`] loads a rules
//! file. Queries go through its HTTP API. A new query helper goes here, beside
//! [`Prometheus::samples`].

use crate::{free_port, stop, wait_for};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The Prometheus binary, built once per machine by `tests/prometheus/build.sh` (5-8 min cold
/// on 2 cores, seconds warm). A failed build fails the test with the script's message: never
/// skipped.
pub fn prometheus_path() -> PathBuf {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = PATH.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("prometheus/build.sh");
        let out = Command::new("bash").arg(&script).stderr(Stdio::inherit()).output().map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        match (out.status.success(), stdout.lines().last()) {
            (true, Some(last)) if Path::new(last.trim()).exists() => Ok(PathBuf::from(last.trim())),
            _ => Err(format!("{} failed ({}); its messages are above; output: {stdout}", script.display(), out.status)),
        }
    });
    match r {
        Ok(p) => p.clone(),
        Err(e) => panic!("no Prometheus to test against: {e}"),
    }
}

/// promtool, built beside the server by the same script (`promtool check rules`, backfill).
pub fn promtool_path() -> PathBuf {
    let p = prometheus_path().with_file_name("promtool");
    assert!(p.exists(), "{} missing: tests/prometheus/build.sh builds it beside the server; run it again", p.display());
    p
}

/// A private Prometheus with its OTLP receiver on.
pub struct Prometheus {
    pub url: String,
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

/// One series of an answer: its labels and its (seconds, value) samples.
pub type Series = (BTreeMap<String, String>, Vec<(f64, f64)>);

impl Prometheus {
    pub fn start() -> Prometheus {
        let dir = tempfile::Builder::new().prefix("wf-prometheus-").tempdir().expect("tempdir");
        Prometheus::start_in(dir, "")
    }

    /// With the recording and alerting rules of `rules` (a rules file's YAML), loaded from
    /// `rules.yml` in the data directory ([`Prometheus::rules_file`]); the groups' own
    /// `interval` and `query_offset` apply.
    pub fn start_with_rules(rules: &str) -> Prometheus {
        let dir = tempfile::Builder::new().prefix("wf-prometheus-rules-").tempdir().expect("tempdir");
        let file = dir.path().join("rules.yml");
        std::fs::write(&file, rules).expect("write rules.yml");
        Prometheus::start_in(dir, &format!("rule_files:\n  - {}\n", file.display()))
    }

    fn start_in(dir: tempfile::TempDir, extra: &str) -> Prometheus {
        // No scrape jobs: every series comes in through OTLP.
        std::fs::write(dir.path().join("prometheus.yml"), format!("global:\n  scrape_interval: 1h\n{extra}")).expect("write prometheus.yml");
        let port = free_port();
        let mut p = Prometheus { url: format!("http://127.0.0.1:{port}"), port, child: None, dir };
        p.spawn();
        p
    }

    /// The OTLP/HTTP metrics URL, as a collector's `otlp.url`.
    pub fn otlp_url(&self) -> String {
        format!("{}/api/v1/otlp/v1/metrics", self.url)
    }

    fn spawn(&mut self) {
        let d = self.dir.path();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(d.join("prometheus.log")).expect("log file");
        let child = Command::new(prometheus_path())
            .arg(format!("--config.file={}", d.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", d.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{}", self.port))
            .arg("--web.enable-otlp-receiver")
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        self.child = Some(child);
        let ready = format!("{}/-/ready", self.url);
        let ok = wait_for(Duration::from_secs(60), || reqwest::blocking::get(&ready).ok().filter(|r| r.status().is_success()).map(|_| ()));
        if ok.is_none() {
            let log = self.log();
            self.stop();
            panic!("prometheus did not get ready within 60 s; its log:\n{log}");
        }
    }

    /// The rules file [`Prometheus::start_with_rules`] loaded.
    pub fn rules_file(&self) -> PathBuf {
        self.dir.path().join("rules.yml")
    }

    /// The data directory (`--storage.tsdb.path`), where backfilled blocks go.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `/api/v1/rules`: every group with its rules' health, last error and last evaluation.
    pub fn rules(&self) -> Value {
        let v: Value = reqwest::blocking::get(format!("{}/api/v1/rules", self.url)).expect("rules").json().expect("JSON");
        v["data"].clone()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// Stops the server (SIGTERM); [`Prometheus::restart`] brings it back on the same port and data.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            stop(&mut c, "prometheus", String::new);
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// Runs an instant PromQL query at `time_s`; returns the `data` of the answer. Panics on an
    /// error, so a test never passes on a failed query.
    pub fn query(&self, promql: &str, time_s: f64) -> Value {
        let resp = reqwest::blocking::Client::new()
            .get(format!("{}/api/v1/query", self.url))
            .query(&[("query", promql), ("time", &format!("{time_s:.3}"))])
            .send()
            .expect("query Prometheus");
        let v: Value = resp.json().expect("JSON answer");
        assert_eq!(v["status"], "success", "query {promql:?} failed: {v}");
        v["data"].clone()
    }

    /// Every series of an instant or range query, with its samples (one for a vector).
    pub fn series(&self, promql: &str, time_s: f64) -> Vec<Series> {
        parse(&self.query(promql, time_s))
    }

    /// A range query (`/api/v1/query_range`) from `start_s` to `end_s` every `step_s`.
    pub fn range(&self, promql: &str, start_s: f64, end_s: f64, step_s: f64) -> Vec<Series> {
        let resp = reqwest::blocking::Client::new()
            .get(format!("{}/api/v1/query_range", self.url))
            .query(&[("query", promql), ("start", &format!("{start_s:.3}")), ("end", &format!("{end_s:.3}")), ("step", &format!("{step_s}"))])
            .send()
            .expect("query Prometheus");
        let v: Value = resp.json().expect("JSON answer");
        assert_eq!(v["status"], "success", "range query {promql:?} failed: {v}");
        parse(&v["data"])
    }

    /// The raw samples of `selector` over the `window` before `time_s` (`selector[window]`).
    pub fn samples(&self, selector: &str, window: &str, time_s: f64) -> Vec<Series> {
        self.series(&format!("{selector}[{window}]"), time_s)
    }

    /// Names of every metric Prometheus holds.
    pub fn metric_names(&self) -> Vec<String> {
        let v: Value = reqwest::blocking::get(format!("{}/api/v1/label/__name__/values", self.url)).expect("label values").json().expect("JSON");
        v["data"].as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The series of an answer's `data` (vector or matrix), sorted by labels.
fn parse(data: &Value) -> Vec<Series> {
    let num = |x: &Value| x.as_str().and_then(|s| s.parse::<f64>().ok()).unwrap_or(f64::NAN);
    let sample = |p: &Value| (p[0].as_f64().unwrap_or(f64::NAN), num(&p[1]));
    let mut out: Vec<Series> = data["result"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    let labels = s["metric"]
                        .as_object()
                        .map(|o| o.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
                        .unwrap_or_default();
                    let samples = match s.get("values").and_then(Value::as_array) {
                        Some(vs) => vs.iter().map(sample).collect(),
                        None => vec![sample(&s["value"])],
                    };
                    (labels, samples)
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}
