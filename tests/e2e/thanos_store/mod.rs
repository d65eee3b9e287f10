//! The Thanos harness itself (issue 29), before any collector: one OTLP/HTTP protobuf request,
//! built here by hand, posted to one of the three receivers is stored on all three replicas and
//! answered exactly once by `thanos query` with deduplication (three times without). Also pins the
//! receiver's OTLP path, which differs from Prometheus's. Add a case for another request shape
//! (a sum, another tenant) next to these, building it with [`gauge_request`]'s pattern.
//! The fault test with agents and collectors is `faults.rs`.

mod conflict;
mod faults;
mod refusal;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;
use std::time::{SystemTime, UNIX_EPOCH};
use wattflip_e2e::thanos::{Thanos, REPLICA_LABEL};

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue { key: k.into(), value: Some(AnyValue { value: Some(any_value::Value::StringValue(v.into())) }), ..Default::default() }
}

/// A gauge `name` (unit W) of one host with the given (ms, value) points.
fn gauge_request(name: &str, host: &str, points: &[(i64, f64)]) -> ExportMetricsServiceRequest {
    let data_points = points
        .iter()
        .map(|&(ms, v)| NumberDataPoint {
            attributes: vec![kv("host", host)],
            time_unix_nano: u64::try_from(ms).unwrap() * 1_000_000,
            value: Some(number_data_point::Value::AsDouble(v)),
            ..Default::default()
        })
        .collect();
    let metric = Metric { name: name.into(), unit: "W".into(), data: Some(metric::Data::Gauge(Gauge { data_points })), ..Default::default() };
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource { attributes: vec![kv("service.name", "wf-thanos-selftest")], ..Default::default() }),
            scope_metrics: vec![ScopeMetrics { metrics: vec![metric], ..Default::default() }],
            ..Default::default()
        }],
    }
}

fn post(url: &str, body: Vec<u8>) -> (u16, String) {
    let r = reqwest::blocking::Client::new().post(url).header("Content-Type", "application/x-protobuf").body(body).send().expect("post OTLP");
    (r.status().as_u16(), r.text().unwrap_or_default())
}

fn now_ms() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

#[test]
fn one_otlp_request_to_one_receiver_is_answered_once_by_query() {
    let thanos = Thanos::start();
    let t0 = now_ms() - 10_000;
    let points: Vec<(i64, f64)> = (0..5).map(|i| (t0 + 100 * i, 1.5 + i as f64)).collect();
    let body = gauge_request("wf_selftest_power", "selftest-1", &points).encode_to_vec();
    // Prometheus's path is not Thanos's: receive has no route there.
    let wrong = thanos.receivers[1].otlp_url() + "/v1/metrics";
    assert_eq!(post(&wrong, body.clone()).0, 404, "thanos receive answers OTLP on {wrong}?");
    // To receiver r1 only: it forwards to the other two replicas and answers once 2 of 3 hold it.
    let (status, text) = post(&thanos.receivers[1].otlp_url(), body);
    assert_eq!(status, 200, "receive answered {status}: {text}\n{}", thanos.logs());

    let at = (now_ms() as f64) / 1000.0;
    // The unit W becomes the suffix `_watts` (OTLP → Prometheus naming); receive adds the tenant.
    let q = "wf_selftest_power_watts{host=\"selftest-1\"}[5m]";
    thanos.wait_stores_cover(points[0].0);
    let deduped = thanos.query(q, at, true);
    assert_eq!(deduped.len(), 1, "one series after deduplication: {deduped:?}");
    assert_eq!(deduped[0].samples, points, "every sample once, in order");
    assert_eq!(deduped[0].labels.get("tenant_id").and_then(|v| v.as_str()), Some("default-tenant"), "{:?}", deduped[0].labels);
    assert!(!deduped[0].labels.contains_key(REPLICA_LABEL), "the replica label is removed: {:?}", deduped[0].labels);
    // Without deduplication the three replicas answer apart, each with every sample.
    let mut raw = thanos.query(q, at, false);
    raw.sort_by(|a, b| a.labels.get(REPLICA_LABEL).map(|v| v.to_string()).cmp(&b.labels.get(REPLICA_LABEL).map(|v| v.to_string())));
    let replicas: Vec<&str> = raw.iter().filter_map(|s| s.labels.get(REPLICA_LABEL)?.as_str()).collect();
    assert_eq!(replicas, ["r0", "r1", "r2"], "{raw:?}");
    assert!(raw.iter().all(|s| s.samples == points), "{raw:?}");
}
