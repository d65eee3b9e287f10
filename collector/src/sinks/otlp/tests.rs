//! Unit tests of the OTLP sink's configuration and translation, with values worked out by hand.

use super::config::OtlpConfig;
use super::model::{self, DataPoint, HostPoints, Instrument};
use super::translate::Translator;
use std::path::Path;
use wattflip_infra::tomlcfg::Loader;
use wattflip_proto::domain::{Batch, Method, PowerSample};
use wattflip_proto::encoder::BudgetTag;
use wattflip_proto::schema::HostTags;
use wattflip_proto::units::{Joules, UnixNanos, Watts};

fn load(text: &str) -> (Option<OtlpConfig>, Vec<(String, String)>) {
    let mut loader = Loader::from_str(Path::new("c.toml"), text).unwrap();
    let raw = loader.take("otlp");
    let cfg = OtlpConfig::from_raw(raw, &mut loader);
    let problems = match loader.finish() {
        Ok(()) => Vec::new(),
        Err(e) => e.problems.into_iter().map(|p| (p.path, p.message)).collect(),
    };
    (cfg, problems)
}

#[test]
fn config_defaults_headers_and_dotted_problems() {
    assert_eq!(load("").0, None);
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("auth");
    std::fs::write(&secret, "Bearer s3cret\n").unwrap();
    let text = format!(
        "[otlp]\nurl = \"http://127.0.0.1:9090/api/v1/otlp/v1/metrics\"\nrequired = true\nheaders = {{ THANOS-TENANT = \"fleet-a\" }}\nheader_files = {{ Authorization = \"{}\" }}\n",
        secret.display()
    );
    let (c, problems) = load(&text);
    assert_eq!(problems, vec![]);
    let c = c.unwrap();
    assert!(c.required);
    assert_eq!(c.headers.get("THANOS-TENANT").map(String::as_str), Some("fleet-a"));
    assert_eq!(c.secret_headers.get("Authorization").map(|s| s.0.as_str()), Some("Bearer s3cret"));
    assert_eq!(format!("{:?}", c.secret_headers), "{\"Authorization\": Secret(<redacted>)}");
    assert_eq!((c.batch_points, c.queue_points, c.gzip), (5000, 200_000, true));
    assert_eq!((c.flush_interval.as_secs(), c.request_timeout.as_secs(), c.max_backoff.as_secs()), (1, 10, 30));

    let (c, problems) = load(
        "[otlp]\nurl = \"ftp://x\"\nbatch_points = 0\nqueue_points = 10\nflush_interval = \"soon\"\nheaders = { \"bad name\" = \"x\" }\nheader_files = { X-Key = \"/nonexistent/key\" }\nbogus = 1\n",
    );
    assert_eq!(c, None);
    let paths: Vec<&str> = problems.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        vec!["otlp.bogus", "otlp.url", "otlp.headers.bad name", "otlp.header_files.X-Key", "otlp.batch_points", "otlp.flush_interval"],
        "{problems:?}"
    );
    assert!(problems[3].1.starts_with("cannot read /nonexistent/key"), "{problems:?}");
    let (_, problems) = load("[otlp]\nrequired = false\n");
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].0, "otlp.url");
    let (_, problems) = load("[otlp]\nurl = \"http://x/v1/metrics\"\nbatch_points = 100\nqueue_points = 99\n");
    assert_eq!(problems.iter().map(|p| p.0.as_str()).collect::<Vec<_>>(), vec!["otlp.queue_points"]);
}

pub(super) fn tags(host: &str) -> HostTags {
    HostTags { host: host.into(), labels: [("rack".to_string(), "r1".to_string())].into() }
}

pub(super) fn sample(t_s: i64, source: &str, zone: &str, scope: &str, watts: f64, joules: Option<f64>) -> PowerSample {
    PowerSample {
        time: UnixNanos(t_s * 1_000_000_000),
        source: source.into(),
        zone: zone.into(),
        scope: scope.into(),
        method: Method::Measured,
        watts: Some(Watts(watts)),
        joules: joules.map(Joules),
        interval_ns: if joules.is_some() { 1_000_000_000 } else { 0 },
        min_watts: None,
        max_watts: None,
        readings: 0,
        full_rate: false,
        flags: vec![],
        joules_total: None,
    }
}

pub(super) fn batch(power: Vec<PowerSample>) -> Batch {
    Batch {
        agent_id: "h1".into(),
        sequence: 1,
        power,
        temperature: vec![],
        probe_runs: vec![],
        power_state_changes: vec![],
        events: vec![],
        nvme_smart: vec![],
        electrical: vec![],
        idle_profiles: vec![],
        drive_power_modes: vec![],
        drive_identities: vec![],
        efficiency: vec![],
        joules_total_start: None,
    }
}

/// (metric, hw.id, time s, start s, value) of each point, for exact comparisons.
fn rows(points: &[DataPoint]) -> Vec<(&'static str, String, i64, i64, f64)> {
    let id = |p: &DataPoint| p.attrs.iter().find(|(k, _)| *k == "hw.id").map(|(_, v)| v.clone()).unwrap_or_default();
    points.iter().map(|p| (p.metric.name, id(p), p.time_ns / 1_000_000_000, p.start_ns / 1_000_000_000, p.value)).collect()
}

fn rapl_tier() -> BudgetTag {
    BudgetTag { value: "rapl_nvme".into(), scopes: vec!["psys".into(), "drive".into()] }
}

#[test]
fn energy_is_cumulative_from_a_stable_start_and_a_resent_sample_counts_once() {
    let mut t = Translator::default();
    let tier = rapl_tier();
    // Second 10: psys 50 W (50 J over the 1 s before), package 30 W (not in the tier), the drive
    // estimate 8.5 W (instantaneous: no joules), a full-rate point (never sent).
    let mut full = sample(10, "rapl", "psys", "psys", 900.0, None);
    full.full_rate = true;
    let b1 = batch(vec![
        sample(10, "rapl", "psys", "psys", 50.0, Some(50.0)),
        sample(10, "rapl", "package-0", "package", 30.0, Some(30.0)),
        sample(10, "nvme_estimate", "nvme0", "drive", 8.5, None),
        full,
    ]);
    let p = t.batch(&tags("h1"), &b1, Some(&tier), &[]);
    assert_eq!(
        rows(&p),
        vec![
            ("hw.power", "rapl:psys".into(), 10, 0, 50.0),
            ("hw.energy", "rapl:psys".into(), 10, 9, 50.0),
            ("hw.power", "rapl:package-0".into(), 10, 0, 30.0),
            ("hw.energy", "rapl:package-0".into(), 10, 9, 30.0),
            ("hw.power", "nvme_estimate:nvme0".into(), 10, 0, 8.5),
            // psys + drive, never package (inside psys); no host energy: the drive has no joules.
            ("hw.host.power", "h1".into(), 10, 0, 58.5),
        ]
    );
    // Second 11, then second 11 again (a resent batch): added once; the start stays at 9.
    let b2 = batch(vec![sample(11, "rapl", "psys", "psys", 52.0, Some(52.0)), sample(11, "nvme_estimate", "nvme0", "drive", 4.25, None)]);
    let p = t.batch(&tags("h1"), &b2, Some(&tier), &[]);
    assert_eq!(
        rows(&p),
        vec![
            ("hw.power", "rapl:psys".into(), 11, 0, 52.0),
            ("hw.energy", "rapl:psys".into(), 11, 9, 102.0),
            ("hw.power", "nvme_estimate:nvme0".into(), 11, 0, 4.25),
            ("hw.host.power", "h1".into(), 11, 0, 56.25),
        ]
    );
    let p = t.batch(&tags("h1"), &b2, Some(&tier), &[]);
    assert_eq!(rows(&p).iter().filter(|r| r.0 != "hw.power").count(), 0, "{:?}", rows(&p));
    assert_eq!(t.stale_samples, 1);
}

#[test]
fn host_energy_only_while_every_tier_zone_is_a_counter_and_restarts_on_a_tier_change() {
    let mut t = Translator::default();
    let pkg = BudgetTag { value: "rapl_nvme".into(), scopes: vec!["package".into(), "dram".into(), "drive".into()] };
    let b = |s: i64| batch(vec![sample(s, "rapl", "package-0", "package", 40.0, Some(40.0)), sample(s, "rapl", "package-0/dram", "dram", 6.0, Some(6.0))]);
    let host = |p: Vec<DataPoint>| rows(&p).into_iter().filter(|r| r.0.starts_with("hw.host")).collect::<Vec<_>>();
    assert_eq!(
        host(t.batch(&tags("h1"), &b(20), Some(&pkg), &[])),
        vec![("hw.host.power", "h1".into(), 20, 0, 46.0), ("hw.host.energy", "h1".into(), 20, 19, 46.0)]
    );
    assert_eq!(
        host(t.batch(&tags("h1"), &b(21), Some(&pkg), &[])),
        vec![("hw.host.power", "h1".into(), 21, 0, 46.0), ("hw.host.energy", "h1".into(), 21, 19, 92.0)]
    );
    // A wall meter appears: the host's tier is now `wall`; its series starts over, power only.
    let wall = BudgetTag { value: "wall".into(), scopes: vec!["wall".into(), "host".into()] };
    let p = t.batch(&tags("h1"), &batch(vec![sample(22, "ipmi", "dcmi", "wall", 120.0, None)]), Some(&wall), &[]);
    assert_eq!(host(p.clone()), vec![("hw.host.power", "h1".into(), 22, 0, 120.0)]);
    let budget = p.iter().find(|p| p.metric.name == "hw.host.power").unwrap().attrs.iter().find(|a| a.0 == "wattflip.budget").unwrap().1.clone();
    assert_eq!(budget, "wall");
    // Without a tier (no host-level scope known), no host totals at all.
    assert_eq!(host(t.batch(&tags("h2"), &b(20), None, &[])), vec![]);
}

#[test]
fn requests_carry_cumulative_monotonic_sums_and_the_hosts_labels() {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    let mut t = Translator::default();
    let points = t.batch(&tags("h1"), &batch(vec![sample(10, "rapl", "package-0/core", "core", 5.0, Some(5.0))]), None, &[]);
    let req = model::request(&[HostPoints { tags: tags("h1"), points }]);
    let rm = &req.resource_metrics[0];
    let res: Vec<(String, String)> = rm
        .resource
        .as_ref()
        .unwrap()
        .attributes
        .iter()
        .map(|kv| (kv.key.clone(), format!("{:?}", kv.value.as_ref().unwrap().value.as_ref().unwrap())))
        .collect();
    assert_eq!(res[1], ("service.instance.id".to_string(), "StringValue(\"h1\")".to_string()));
    let metrics = &rm.scope_metrics[0].metrics;
    assert_eq!(metrics.iter().map(|m| (m.name.as_str(), m.unit.as_str())).collect::<Vec<_>>(), vec![("hw.energy", "J"), ("hw.power", "W")]);
    let Some(Data::Sum(sum)) = &metrics[0].data else { panic!("hw.energy is a sum") };
    assert!(sum.is_monotonic);
    assert_eq!(sum.aggregation_temporality, 2, "cumulative");
    let dp = &sum.data_points[0];
    assert_eq!((dp.start_time_unix_nano, dp.time_unix_nano), (9_000_000_000, 10_000_000_000));
    let keys: Vec<&str> = dp.attributes.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, vec!["rack", "hw.id", "hw.type", "hw.name", "hw.parent", "wattflip.method", "wattflip.scope", "wattflip.source"]);
    let Some(Data::Gauge(g)) = &metrics[1].data else { panic!("hw.power is a gauge") };
    assert_eq!(g.data_points[0].start_time_unix_nano, 0);
    assert_eq!(model::HW_STATUS.instrument, Instrument::UpDownCounter);
}

#[test]
fn smart_status_endurance_and_disk_size() {
    use wattflip_proto::v1;
    let mut t = Translator::default();
    let mut b = batch(vec![]);
    b.nvme_smart = vec![v1::NvmeSmart {
        time_ns: 30_000_000_000,
        device: "nvme0".into(),
        serial: "S1".into(),
        critical_warning: 0b0010,
        percentage_used: Some(7),
        media_errors: Some(0),
        ..Default::default()
    }];
    let p = t.batch(&tags("h1"), &b, None, &[]);
    let got: Vec<(String, f64)> = p
        .iter()
        .map(|p| {
            let extra = p
                .attrs
                .iter()
                .find(|a| a.0 == "hw.state" || a.0 == "hw.physical_disk.smart_attribute" || a.0 == "hw.physical_disk.state")
                .map(|a| a.1.clone())
                .unwrap_or_default();
            (format!("{} {extra}", p.metric.name), p.value)
        })
        .collect();
    let want: Vec<(String, f64)> = [
        ("hw.physical_disk.endurance_utilization remaining", 0.93),
        ("hw.physical_disk.smart critical_warning", 2.0),
        ("hw.physical_disk.smart percentage_used", 7.0),
        ("hw.physical_disk.smart media_errors", 0.0),
        ("hw.status degraded", 1.0),
        ("hw.status failed", 0.0),
        ("hw.status ok", 0.0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn a_throttling_episode_written_again_counts_once() {
    use wattflip_proto::schema::ThrottleEvent;
    let ev = |onset_s: i64, ongoing: bool| ThrottleEvent {
        time_ns: onset_s * 1_000_000_000,
        device: "nvme0".into(),
        trigger: "temperature".into(),
        signal: "throughput".into(),
        pattern: "SW/131072".into(),
        onset_celsius: Some(71.0),
        warning_celsius: Some(70.0),
        critical_celsius: None,
        throughput_drop_pct: Some(25.0),
        power_drop_pct: None,
        duration_s: 4.0,
        ongoing,
    };
    let mut t = Translator::default();
    let b = batch(vec![]);
    let count = |p: Vec<DataPoint>| rows(&p);
    // Onset 100 s (ongoing), then the same episode updated (ended), then a second one at 300 s.
    assert_eq!(count(t.batch(&tags("h1"), &b, None, &[ev(100, true)])), vec![("wattflip.throttle.episodes", "nvme0".into(), 100, 100, 1.0)]);
    assert_eq!(count(t.batch(&tags("h1"), &b, None, &[ev(100, false)])), vec![]);
    assert_eq!(count(t.batch(&tags("h1"), &b, None, &[ev(300, true)])), vec![("wattflip.throttle.episodes", "nvme0".into(), 300, 100, 2.0)]);
}

/// A counter window as a current agent sends it: its joules and its zone's running total.
fn totaled(t_s: i64, zone: &str, scope: &str, joules: f64, total: f64) -> PowerSample {
    PowerSample { joules_total: Some(Joules(total)), ..sample(t_s, "rapl", zone, scope, joules, Some(joules)) }
}

fn epoch_batch(power: Vec<PowerSample>) -> Batch {
    Batch { joules_total_start: Some(UnixNanos(5_000_000_000)), ..batch(power) }
}

fn energy_rows(p: &[DataPoint]) -> Vec<(&'static str, String, i64, i64, f64)> {
    rows(p).into_iter().filter(|r| r.0.ends_with("energy")).collect()
}

#[test]
fn the_agents_total_is_exported_and_a_batch_resent_to_a_restarted_collector_exports_the_same_values() {
    let tier = BudgetTag { value: "rapl".into(), scopes: vec!["package".into(), "dram".into()] };
    // The agent's epoch started at 5 s; by second 10 package-0 had 1000 J, DRAM 200 J.
    let b1 = epoch_batch(vec![totaled(10, "package-0", "package", 50.0, 1050.0), totaled(10, "package-0/dram", "dram", 6.0, 206.0)]);
    let b2 = epoch_batch(vec![totaled(11, "package-0", "package", 52.0, 1102.0), totaled(11, "package-0/dram", "dram", 6.5, 212.5)]);
    let mut first = Translator::default();
    assert_eq!(
        energy_rows(&first.batch(&tags("h1"), &b1, Some(&tier), &[])),
        vec![
            ("hw.energy", "rapl:package-0".into(), 10, 5, 1050.0),
            ("hw.energy", "rapl:package-0/dram".into(), 10, 5, 206.0),
            ("hw.host.energy", "h1".into(), 10, 5, 1256.0),
        ]
    );
    let sent = energy_rows(&first.batch(&tags("h1"), &b2, Some(&tier), &[]));
    assert_eq!(
        sent,
        vec![
            ("hw.energy", "rapl:package-0".into(), 11, 5, 1102.0),
            ("hw.energy", "rapl:package-0/dram".into(), 11, 5, 212.5),
            ("hw.host.energy", "h1".into(), 11, 5, 1314.5),
        ]
    );
    // The same collector skips the resend; a restarted one sends exactly what was sent before.
    assert_eq!(energy_rows(&first.batch(&tags("h1"), &b2, Some(&tier), &[])), vec![]);
    let mut restarted = Translator::default();
    assert_eq!(energy_rows(&restarted.batch(&tags("h1"), &b2, Some(&tier), &[])), sent);
    // DRAM silent for a batch: the host's energy keeps its newest total (no false counter drop).
    let b3 = epoch_batch(vec![totaled(12, "package-0", "package", 50.0, 1152.0)]);
    assert_eq!(
        energy_rows(&restarted.batch(&tags("h1"), &b3, Some(&tier), &[])),
        vec![("hw.energy", "rapl:package-0".into(), 12, 5, 1152.0), ("hw.host.energy", "h1".into(), 12, 5, 1364.5)]
    );
}

#[test]
fn without_the_agents_total_the_collector_keeps_its_own_running_total() {
    // An older agent (no joules_total), or a total whose batch has no valid epoch start.
    let mut no_start = batch(vec![totaled(11, "package-0", "package", 52.0, 1102.0)]);
    no_start.joules_total_start = None;
    for b2 in [batch(vec![sample(11, "rapl", "package-0", "package", 52.0, Some(52.0))]), no_start] {
        let mut t = Translator::default();
        t.batch(&tags("h1"), &batch(vec![sample(10, "rapl", "package-0", "package", 50.0, Some(50.0))]), None, &[]);
        assert_eq!(energy_rows(&t.batch(&tags("h1"), &b2, None, &[])), vec![("hw.energy", "rapl:package-0".into(), 11, 9, 102.0)]);
        // A restarted collector has only what it saw: the resent window's joules, from 0.
        assert_eq!(energy_rows(&Translator::default().batch(&tags("h1"), &b2, None, &[])), vec![("hw.energy", "rapl:package-0".into(), 11, 10, 52.0)]);
    }
}
