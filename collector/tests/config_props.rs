//! Property test of the collector's config parser (issue 38): every key set to every hostile value
//! of `wattflip_infra::edge`, and random combinations, never panics, and every duration of an
//! accepted config lies within a century (`influx.flush_interval = "500000000000y"` passed
//! `check-config` and then panicked both writer tasks). A new key goes into [`KEYS`].

use std::path::Path;
use wattflip_collector::config::{Config, Overrides};
use wattflip_infra::edge;

const KEYS: &[&str] = &[
    "listen",
    "sink",
    "metrics.listen",
    "limits.max_message_bytes",
    "limits.agent_points_per_second",
    "limits.agent_burst_points",
    "limits.dedup_window",
    "limits.hello_timeout",
    "influx.url",
    "influx.database",
    "influx.api",
    "influx.org",
    "influx.bucket",
    "influx.username",
    "influx.secret_file",
    "influx.secret_env",
    "influx.batch_lines",
    "influx.writers",
    "influx.flush_interval",
    "influx.request_timeout",
    "influx.max_backoff",
    "influx.gzip",
    "influx.dead_letter_dir",
    "influx.raw_retention",
    "influx.rollup_retention",
    "influx.rollup_settle",
    "influx.rollup_max_dirty",
    "otlp.url",
    "otlp.required",
    "otlp.headers",
    "otlp.headers.x",
    "otlp.header_files",
    "otlp.header_files.x",
    "otlp.batch_points",
    "otlp.flush_interval",
    "otlp.request_timeout",
    "otlp.max_backoff",
    "otlp.queue_points",
    "otlp.gzip",
    "tls.insecure_plaintext_loopback_only",
    "tls.key_file",
];

/// A valid config that reaches every check: plaintext on loopback, retention and an OTLP sink.
const BASE: &str = "[tls]\ninsecure_plaintext_loopback_only = true\n[influx]\nraw_retention = \"7d\"\n\
                    dead_letter_dir = \"/nonexistent/wattflip-props/dl\"\n[otlp]\nurl = \"http://127.0.0.1:9/v1/metrics\"\n";

fn durations(c: &Config) -> Vec<(String, std::time::Duration)> {
    let mut d = vec![
        ("limits.hello_timeout".to_string(), c.limits.hello_timeout),
        ("influx.flush_interval".into(), c.influx.flush_interval),
        ("influx.request_timeout".into(), c.influx.request_timeout),
        ("influx.max_backoff".into(), c.influx.max_backoff),
    ];
    if let Some(r) = &c.influx.retention {
        d.extend([("influx.raw_retention".into(), r.raw), ("influx.rollup_retention".into(), r.rollup), ("influx.rollup_settle".into(), r.settle)]);
    }
    if let Some(o) = c.otlp() {
        d.extend([
            ("otlp.flush_interval".into(), o.flush_interval),
            ("otlp.request_timeout".into(), o.request_timeout),
            ("otlp.max_backoff".into(), o.max_backoff),
        ]);
    }
    d
}

#[test]
fn no_config_value_panics_or_passes_an_unbounded_duration() {
    let parse = |text: &str| Config::from_str(Path::new("props.toml"), text, &Overrides::default()).ok().map(|c| durations(&c));
    assert!(parse(BASE).is_some(), "the base config must be valid");
    let found = edge::explore(KEYS, &BASE.parse().unwrap(), 2000, &parse);
    assert_eq!(found.failures, Vec::<String>::new());
    assert!(found.accepted > 50, "only {} accepted configs", found.accepted);
}
