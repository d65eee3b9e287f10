//! The metrics the OTLP sink sends ([`MetricDef`]: OpenTelemetry hardware semantic conventions
//! v1.44 `hw.*`, and wattflip's own `wattflip.*`), the data points the translation produces
//! ([`DataPoint`]), and the `ExportMetricsServiceRequest` built from them ([`request`]). A new
//! metric is a `MetricDef` constant here, its points in `translate.rs`, and its row in
//! docs/schema.md (*OTLP export*).

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use std::collections::BTreeMap;
use wattflip_proto::schema::HostTags;

/// The OTel instrument a metric is, which decides its OTLP data type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instrument {
    /// `Gauge`.
    Gauge,
    /// Monotonic cumulative `Sum` (Prometheus refuses delta sums: a whole request fails with 500).
    Counter,
    /// Non-monotonic cumulative `Sum` (a gauge in Prometheus).
    UpDownCounter,
}

#[derive(Debug, PartialEq, Eq)]
pub struct MetricDef {
    pub name: &'static str,
    /// UCUM, as the conventions give it (Prometheus appends its translation: `J` → `_joules`).
    pub unit: &'static str,
    pub description: &'static str,
    pub instrument: Instrument,
}

const fn def(name: &'static str, unit: &'static str, instrument: Instrument, description: &'static str) -> MetricDef {
    MetricDef { name, unit, description, instrument }
}

use Instrument::{Counter, Gauge as G, UpDownCounter};

pub const HW_ENERGY: MetricDef = def("hw.energy", "J", Counter, "Energy consumed by the component");
pub const HW_POWER: MetricDef = def("hw.power", "W", G, "Instantaneous power consumed by the component");
pub const HW_TEMPERATURE: MetricDef = def("hw.temperature", "Cel", G, "Temperature in degrees Celsius");
pub const HW_HOST_ENERGY: MetricDef = def("hw.host.energy", "J", Counter, "Total energy consumed by the entire physical host, in joules");
pub const HW_HOST_POWER: MetricDef = def("hw.host.power", "W", G, "Instantaneous power consumed by the entire physical host in Watts");
pub const HW_STATUS: MetricDef = def("hw.status", "1", UpDownCounter, "Operational status: 1 (true) or 0 (false) for each of the possible states");
pub const HW_DISK_SIZE: MetricDef = def("hw.physical_disk.size", "By", UpDownCounter, "Size of the disk");
pub const HW_DISK_ENDURANCE: MetricDef = def("hw.physical_disk.endurance_utilization", "1", G, "Endurance remaining for this SSD disk");
pub const HW_DISK_SMART: MetricDef = def("hw.physical_disk.smart", "1", G, "Value of the corresponding S.M.A.R.T. attribute");
pub const RUN_ENERGY: MetricDef = def("wattflip.probe_run.energy", "J", G, "Energy of one uFLIP run, background work included (probe_run energy_j)");
pub const RUN_BACKGROUND_ENERGY: MetricDef =
    def("wattflip.probe_run.background_energy", "J", G, "Energy above idle after a run's last IO completed (probe_run background_energy_j)");
pub const RUN_J_PER_MIB: MetricDef = def("wattflip.probe_run.energy_per_mib", "J/MiBy", G, "Energy per MiB moved (probe_run j_per_mib)");
pub const RUN_ENERGY_U95: MetricDef =
    def("wattflip.probe_run.energy_u95", "J", G, "Half-width of the 95 % interval on a run's energy (probe_run energy_u95_j)");
pub const RUN_BACKGROUND_ENERGY_U95: MetricDef =
    def("wattflip.probe_run.background_energy_u95", "J", G, "Half-width of the 95 % interval on a run's background energy (probe_run background_energy_u95_j)");
pub const RUN_J_PER_MIB_U95: MetricDef =
    def("wattflip.probe_run.energy_per_mib_u95", "J/MiBy", G, "Half-width of the 95 % interval on a run's energy per MiB (probe_run j_per_mib_u95)");
pub const THROTTLE_EPISODES: MetricDef =
    def("wattflip.throttle.episodes", "{episode}", Counter, "Thermal throttling episodes the collector detected (throttle_event), by drive and trigger");

/// One value of one series: the metric, its attributes (sorted by key, so a series is one key),
/// the agent's timestamp and, for sums, the series' stable start time.
#[derive(Debug, Clone, PartialEq)]
pub struct DataPoint {
    pub metric: &'static MetricDef,
    pub attrs: Vec<(&'static str, String)>,
    pub time_ns: i64,
    pub start_ns: i64,
    pub value: f64,
}

/// The points of one host (one OTLP resource).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HostPoints {
    pub tags: HostTags,
    pub points: Vec<DataPoint>,
}

/// The OTel scope every metric is sent under.
pub const SCOPE: &str = "wattflip-collector";

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue { key: key.to_string(), value: Some(AnyValue { value: Some(any_value::Value::StringValue(value.to_string())) }), ..Default::default() }
}

/// The resource of a host: `service.name` = `wattflip` (Prometheus: `job`), `service.instance.id`
/// and `host.name` = the agent id (Prometheus: `instance`).
fn resource(tags: &HostTags) -> Resource {
    let attributes = vec![kv("service.name", "wattflip"), kv("service.instance.id", &tags.host), kv("host.name", &tags.host)];
    Resource { attributes, ..Default::default() }
}

/// Nanoseconds since the epoch as OTLP's unsigned field (a pre-1970 time cannot pass the checks).
fn unix_nanos(t: i64) -> u64 {
    u64::try_from(t).unwrap_or(0)
}

/// The request for `hosts`: one resource per host, one scope, one metric per name with all its
/// points; each point carries its attributes plus the host's labels (`rack`, `site`), so a query
/// can group by them as the InfluxDB dashboards group by tags.
pub fn request<'a>(hosts: impl IntoIterator<Item = &'a HostPoints>) -> ExportMetricsServiceRequest {
    let resource_metrics = hosts
        .into_iter()
        .map(|h| {
            let mut by_name: BTreeMap<&'static str, (&'static MetricDef, Vec<NumberDataPoint>)> = BTreeMap::new();
            for p in &h.points {
                let mut attributes: Vec<KeyValue> = h.tags.labels.iter().map(|(k, v)| kv(k, v)).collect();
                attributes.extend(p.attrs.iter().map(|(k, v)| kv(k, v)));
                let sum = p.metric.instrument != Instrument::Gauge;
                let point = NumberDataPoint {
                    attributes,
                    start_time_unix_nano: if sum { unix_nanos(p.start_ns) } else { 0 },
                    time_unix_nano: unix_nanos(p.time_ns),
                    value: Some(number_data_point::Value::AsDouble(p.value)),
                    ..Default::default()
                };
                by_name.entry(p.metric.name).or_insert_with(|| (p.metric, Vec::new())).1.push(point);
            }
            let metrics = by_name.into_values().map(|(m, points)| metric(m, points)).collect();
            let scope = InstrumentationScope { name: SCOPE.into(), version: env!("CARGO_PKG_VERSION").into(), ..Default::default() };
            ResourceMetrics {
                resource: Some(resource(&h.tags)),
                scope_metrics: vec![ScopeMetrics { scope: Some(scope), metrics, ..Default::default() }],
                ..Default::default()
            }
        })
        .collect();
    ExportMetricsServiceRequest { resource_metrics }
}

fn metric(m: &MetricDef, data_points: Vec<NumberDataPoint>) -> Metric {
    let cumulative = AggregationTemporality::Cumulative as i32;
    let data = match m.instrument {
        Instrument::Gauge => metric::Data::Gauge(Gauge { data_points }),
        Instrument::Counter => metric::Data::Sum(Sum { data_points, aggregation_temporality: cumulative, is_monotonic: true }),
        Instrument::UpDownCounter => metric::Data::Sum(Sum { data_points, aggregation_temporality: cumulative, is_monotonic: false }),
    };
    Metric { name: m.name.into(), description: m.description.into(), unit: m.unit.into(), data: Some(data), ..Default::default() }
}

/// Data points in a request (what `batch_points` counts).
pub fn count(hosts: &[HostPoints]) -> usize {
    hosts.iter().map(|h| h.points.len()).sum()
}
