//! The OTLP sink's configuration: the `[otlp]` table of the collector's TOML ([`RawOtlp`]) and its
//! checked form ([`OtlpConfig`]), composed by the service configuration (`crate::config`). No
//! `[otlp]` table: no OTLP sink. A new setting is a field of both, a check in
//! [`OtlpConfig::from_raw`] (its problems named `otlp.<key>`) and a line in
//! `collector.example.toml` and docs/deployment.md.

use crate::sinks::influx::config::Secret;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use wattflip_infra::duration::{Bounded, HOUR};
use wattflip_infra::tomlcfg::Loader;

/// The path Prometheus serves its OTLP receiver on (`--web.enable-otlp-receiver`).
pub const PROMETHEUS_OTLP_PATH: &str = "/api/v1/otlp/v1/metrics";

#[derive(Debug, Clone, PartialEq)]
pub struct OtlpConfig {
    /// The full OTLP/HTTP metrics URL: `http://prometheus:9090/api/v1/otlp/v1/metrics`, a Thanos
    /// receive's or Mimir's OTLP endpoint, an OpenTelemetry Collector's `/v1/metrics`.
    pub url: String,
    /// Required: an agent's batch is acknowledged only once stored here too (retried without
    /// limit, like InfluxDB). Optional (default): a bounded retry queue; what it drops is counted.
    pub required: bool,
    /// Extra request headers (a tenant: `THANOS-TENANT`, `X-Scope-OrgID`), in the clear.
    pub headers: BTreeMap<String, String>,
    /// Headers whose value is read from a file at start (credentials: `Authorization`); never logged.
    pub secret_headers: BTreeMap<String, Secret>,
    /// Data points per request at most.
    pub batch_points: usize,
    pub flush_interval: Duration,
    pub request_timeout: Duration,
    pub max_backoff: Duration,
    /// Optional sink: data points held for retry at most; beyond, the oldest are dropped (counted).
    pub queue_points: usize,
    pub gzip: bool,
}

/// The `[otlp]` table as written; [`OtlpConfig::from_raw`] checks it.
#[derive(Debug, Default, Deserialize)]
pub struct RawOtlp {
    url: Option<String>,
    required: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
    header_files: Option<BTreeMap<String, PathBuf>>,
    batch_points: Option<usize>,
    flush_interval: Option<String>,
    request_timeout: Option<String>,
    max_backoff: Option<String>,
    queue_points: Option<usize>,
    gzip: Option<bool>,
}

impl OtlpConfig {
    /// Checks the `[otlp]` table (None: no table, no sink) and records every problem in `loader`
    /// under `otlp.<key>`. Returns None without a table or without a usable URL.
    pub fn from_raw(raw: Option<RawOtlp>, loader: &mut Loader) -> Option<OtlpConfig> {
        let raw = raw?;
        let url = match raw.url {
            Some(u) if u.starts_with("http://") || u.starts_with("https://") => Some(u),
            Some(u) => {
                loader.problem("otlp.url", format!("`{u}` must start with http:// or https:// (e.g. http://127.0.0.1:9090{PROMETHEUS_OTLP_PATH})"));
                None
            }
            None => {
                loader.problem("otlp.url", format!("is required in [otlp]: the full metrics URL, e.g. http://127.0.0.1:9090{PROMETHEUS_OTLP_PATH}"));
                None
            }
        };
        let headers = raw.headers.unwrap_or_default();
        for (k, v) in &headers {
            for m in header_problems(k, Some(v)) {
                loader.problem(format!("otlp.headers.{k}"), m);
            }
        }
        let mut secret_headers = BTreeMap::new();
        for (k, f) in raw.header_files.unwrap_or_default() {
            let path = format!("otlp.header_files.{k}");
            match std::fs::read_to_string(&f) {
                Ok(s) => {
                    let v = s.trim().to_string();
                    // The value is a secret: a problem names the file, never the value.
                    let bad_value = header_problems(&k, Some(&v)).len() > header_problems(&k, None).len();
                    for m in header_problems(&k, None) {
                        loader.problem(path.clone(), m);
                    }
                    if bad_value {
                        loader.problem(path, format!("{} holds a value that is not a valid header value (one line, visible ASCII)", f.display()));
                    } else {
                        secret_headers.insert(k.clone(), Secret(v));
                    }
                }
                Err(e) => loader.problem(path, format!("cannot read {}: {e}", f.display())),
            }
            if headers.contains_key(&k) {
                loader.problem(format!("otlp.header_files.{k}"), format!("`{k}` is also in otlp.headers; set it in one of them"));
            }
        }
        let batch_points = raw.batch_points.unwrap_or(5000);
        if !(1..=100_000).contains(&batch_points) {
            loader.problem("otlp.batch_points", format!("{batch_points} is outside 1..=100000"));
        }
        let queue_points = raw.queue_points.unwrap_or(200_000);
        if queue_points < batch_points {
            loader.problem("otlp.queue_points", format!("{queue_points} is below otlp.batch_points ({batch_points}); the retry queue must hold one request"));
        }
        let (interval, timeout) = (Bounded::new(Duration::from_millis(1), HOUR), Bounded::new(Duration::from_millis(100), HOUR));
        let flush_interval = interval.read("otlp.flush_interval", raw.flush_interval.as_deref(), Duration::from_secs(1), loader);
        let request_timeout = timeout.read("otlp.request_timeout", raw.request_timeout.as_deref(), Duration::from_secs(10), loader);
        let max_backoff = interval.read("otlp.max_backoff", raw.max_backoff.as_deref(), Duration::from_secs(30), loader);
        Some(OtlpConfig {
            url: url?,
            required: raw.required.unwrap_or(false),
            headers,
            secret_headers,
            batch_points,
            flush_interval,
            request_timeout,
            max_backoff,
            queue_points,
            gzip: raw.gzip.unwrap_or(true),
        })
    }
}

/// What is wrong with `name` (and `value`, when given) as an HTTP header.
fn header_problems(name: &str, value: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
        out.push(format!("`{name}` is not a valid header name (letters, digits and -)"));
    }
    if value.is_some_and(|v| reqwest::header::HeaderValue::from_str(v).is_err()) {
        out.push("the value is not a valid header value (one line, visible ASCII)".to_string());
    }
    out
}
