//! `[collector]` and `[spool]` of the agent config: where batches go (endpoints in failover
//! order, their TLS scheme, timeouts and backoff) and the durable disk spool. Checked here, each
//! problem at its dotted key. A new transport setting is a field of the raw table, its check here
//! and a line in `agent/agent.example.toml`.

use super::spool::{SpoolConfig, SyncPolicy};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;
use wattflip_infra::duration::{Bounded, HOUR};
use wattflip_infra::tls::{is_loopback_host, url_host, TlsMode};
use wattflip_infra::tomlcfg::Loader;

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
pub struct RawCollector {
    pub url: Option<String>,
    pub urls: Option<Vec<String>>,
    pub server_name: Option<String>,
    pub connect_timeout: Option<String>,
    pub backoff_initial: Option<String>,
    pub backoff_max: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawSpool {
    pub dir: Option<PathBuf>,
    pub max_bytes: Option<u64>,
    pub segment_bytes: Option<u64>,
    pub sync: Option<String>,
}

/// `[collector]`: the endpoints (each checked against the TLS mode), connect timeout and backoff.
pub fn collector_config(collector: RawCollector, tls: &Option<TlsMode>, l: &mut Loader) -> CollectorConfig {
    let (urls, urls_key) = match (collector.url, collector.urls) {
        (Some(_), Some(_)) => {
            l.problem("collector.urls", "set either collector.url or collector.urls, not both");
            (vec![], "collector.urls")
        }
        (Some(u), None) => (vec![u], "collector.url"),
        (None, Some(us)) => (us, "collector.urls"),
        (None, None) => (vec![default_url(tls)], "collector.url"),
    };
    if urls.is_empty() {
        l.problem(urls_key, "names no collector");
    }
    for u in &urls {
        check_url(urls_key, u, tls.as_ref(), l);
    }
    let timeout = Bounded::new(Duration::from_millis(100), Duration::from_secs(600));
    let connect_timeout = timeout.read("collector.connect_timeout", collector.connect_timeout.as_deref(), Duration::from_secs(5), l);
    let backoff = Bounded::new(Duration::from_millis(1), HOUR);
    let backoff_initial = backoff.read("collector.backoff_initial", collector.backoff_initial.as_deref(), Duration::from_millis(200), l);
    let backoff_max = backoff.read("collector.backoff_max", collector.backoff_max.as_deref(), Duration::from_secs(30), l);
    CollectorConfig { urls, server_name: collector.server_name, connect_timeout, backoff_initial, backoff_max }
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

pub fn spool_config(raw: RawSpool, l: &mut Loader) -> Option<SpoolConfig> {
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
        Some(s) => match Bounded::new(Duration::from_millis(1), HOUR).because("`every_batch`, or a sync interval above zero").read_set("spool.sync", s, l) {
            Some(d) => SyncPolicy::Interval(d),
            None => SyncPolicy::EveryBatch,
        },
    };
    let dir = raw.dir?;
    l.check_dir("spool.dir", &dir);
    Some(SpoolConfig { dir, max_bytes, segment_bytes, sync })
}
