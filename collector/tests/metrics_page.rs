//! The metrics page shows every counter the collector keeps: each field of the counter structs
//! (`IngestStats`, `SinkStats`, `OtlpStats`, `RollupStats`, wherever they are defined under
//! `collector/src/`) is read by its renderer (a sink's counters by their `impl SinkMetrics`, the
//! others by `service/telemetry.rs`), and the counters that once were kept but never shown render
//! with their values.

// Integration tests: a panic with a message is the test's failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use wattflip_collector::service::stats::Stats;
use wattflip_collector::service::telemetry::render;
use wattflip_collector::sinks::influx::SinkStats;
use wattflip_collector::sinks::SinkMetrics;

const STRUCTS: &[&str] = &["IngestStats", "SinkStats", "OtlpStats", "RollupStats"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The `pub` fields of `pub struct NAME { … }` in `text`, if it defines it.
fn fields(text: &str, name: &str) -> Option<Vec<String>> {
    let start = text.find(&format!("pub struct {name} {{"))?;
    let body = &text[start..];
    let end = body.find("\n}")?;
    Some(body[..end].lines().skip(1).filter_map(|l| l.trim().strip_prefix("pub ")).filter_map(|l| l.split(':').next()).map(|f| f.trim().to_string()).collect())
}

#[test]
fn every_counter_field_is_read_by_the_metrics_page() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let texts: Vec<(PathBuf, String)> = files.into_iter().map(|f| (f.clone(), std::fs::read_to_string(&f).unwrap())).collect();
    let page = &texts.iter().find(|(f, _)| f.ends_with("service/telemetry.rs")).expect("service/telemetry.rs").1;
    let mut missing = Vec::new();
    let mut seen = 0;
    for name in STRUCTS {
        let fields = texts.iter().find_map(|(_, t)| fields(t, name)).unwrap_or_else(|| panic!("no `pub struct {name}` under collector/src"));
        // A sink's counters render themselves; the rest are the page's.
        let own = format!("impl SinkMetrics for {name} {{");
        let renderer = texts.iter().find_map(|(_, t)| t.find(&own).map(|at| &t[at..])).unwrap_or(page.as_str());
        for f in fields {
            seen += 1;
            if !renderer.contains(&format!(".{f}")) {
                missing.push(format!("{name}.{f}"));
            }
        }
    }
    assert!(seen >= 30, "read only {seen} counter fields: the struct parser lost them");
    assert!(missing.is_empty(), "counters kept but not on the metrics page (add a line in service/telemetry.rs): {missing:?}");
}

#[test]
fn the_once_hidden_counters_render_with_their_values() {
    let stats = Stats::default();
    stats.ingest.points_unencodable.store(7, Relaxed);
    stats.ingest.throttle_events.store(3, Relaxed);
    let influx = Arc::new(SinkStats::default());
    influx.databases_created.store(2, Relaxed);
    let page = render(&stats, &[influx as Arc<dyn SinkMetrics>]);
    for line in
        ["wattflip_collector_points_unencodable_total 7", "wattflip_collector_throttle_events_total 3", "wattflip_collector_influx_databases_created_total 2"]
    {
        assert!(page.lines().any(|l| l == line), "no line `{line}` on the metrics page:\n{page}");
    }
}
