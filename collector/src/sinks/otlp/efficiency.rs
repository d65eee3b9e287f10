//! The `device_efficiency` phases (`Batch.efficiency`, docs/efficiency.md) as OTLP gauges: one
//! metric per figure of a stable phase, `wattflip.device_efficiency.*`, and one `*_u95` beside
//! each figure whose 95 % half-width is known, at the start of the phase's measurement interval.
//! A phase without figures (unstable, not measured) sends nothing. A new figure is a field of
//! `v1::EfficiencyPhase::metric_fields` and a row of [`METRICS`].

use crate::sinks::otlp::model::{DataPoint, Instrument, MetricDef};
use wattflip_proto::v1;

const fn gauge(name: &'static str, unit: &'static str, description: &'static str) -> MetricDef {
    MetricDef { name, unit, description, instrument: Instrument::Gauge }
}

/// The metric of each `device_efficiency` field (docs/schema.md, *OTLP export*), in the order of
/// `v1::EfficiencyPhase::metric_fields`.
pub static METRICS: [(&str, MetricDef); 20] = [
    ("watts", gauge("wattflip.device_efficiency.power", "W", "Mean power of a drive over a stable efficiency interval (device_efficiency watts)")),
    ("watts_u95", gauge("wattflip.device_efficiency.power_u95", "W", "Half-width of the 95 % interval on device_efficiency watts")),
    (
        "watts_per_tb",
        gauge("wattflip.device_efficiency.power_per_capacity", "W/TBy", "Ready-idle power per 10^12 bytes of capacity (device_efficiency watts_per_tb)"),
    ),
    ("watts_per_tb_u95", gauge("wattflip.device_efficiency.power_per_capacity_u95", "W/TBy", "Half-width of the 95 % interval on watts_per_tb")),
    (
        "gb_per_watt",
        gauge("wattflip.device_efficiency.capacity_per_power", "GBy/W", "Capacity (10^9 bytes) per ready-idle watt (device_efficiency gb_per_watt)"),
    ),
    ("gb_per_watt_u95", gauge("wattflip.device_efficiency.capacity_per_power_u95", "GBy/W", "Half-width of the 95 % interval on gb_per_watt")),
    ("iops", gauge("wattflip.device_efficiency.operations", "{operation}/s", "IO operations per second over a stable interval (device_efficiency iops)")),
    ("mib_per_s", gauge("wattflip.device_efficiency.throughput", "MiBy/s", "Throughput over a stable interval (device_efficiency mib_per_s)")),
    ("iops_per_watt", gauge("wattflip.device_efficiency.operations_per_power", "{operation}/s/W", "IOPS per watt (device_efficiency iops_per_watt)")),
    ("iops_per_watt_u95", gauge("wattflip.device_efficiency.operations_per_power_u95", "{operation}/s/W", "Half-width of the 95 % interval on iops_per_watt")),
    ("mib_per_s_per_watt", gauge("wattflip.device_efficiency.throughput_per_power", "MiBy/s/W", "MiB/s per watt (device_efficiency mib_per_s_per_watt)")),
    (
        "mib_per_s_per_watt_u95",
        gauge("wattflip.device_efficiency.throughput_per_power_u95", "MiBy/s/W", "Half-width of the 95 % interval on mib_per_s_per_watt"),
    ),
    ("joules_per_io", gauge("wattflip.device_efficiency.energy_per_operation", "J/{operation}", "Energy per IO (device_efficiency joules_per_io)")),
    ("joules_per_io_u95", gauge("wattflip.device_efficiency.energy_per_operation_u95", "J/{operation}", "Half-width of the 95 % interval on joules_per_io")),
    ("joules_per_mib", gauge("wattflip.device_efficiency.energy_per_mib", "J/MiBy", "Energy per MiB moved (device_efficiency joules_per_mib)")),
    ("joules_per_mib_u95", gauge("wattflip.device_efficiency.energy_per_mib_u95", "J/MiBy", "Half-width of the 95 % interval on joules_per_mib")),
    (
        "joules_per_io_above_idle",
        gauge("wattflip.device_efficiency.energy_per_operation_above_idle", "J/{operation}", "Energy per IO above ready idle (joules_per_io_above_idle)"),
    ),
    (
        "joules_per_io_above_idle_u95",
        gauge("wattflip.device_efficiency.energy_per_operation_above_idle_u95", "J/{operation}", "Half-width of the 95 % interval on joules_per_io_above_idle"),
    ),
    (
        "joules_per_mib_above_idle",
        gauge("wattflip.device_efficiency.energy_per_mib_above_idle", "J/MiBy", "Energy per MiB above ready idle (joules_per_mib_above_idle)"),
    ),
    (
        "joules_per_mib_above_idle_u95",
        gauge("wattflip.device_efficiency.energy_per_mib_above_idle_u95", "J/MiBy", "Half-width of the 95 % interval on joules_per_mib_above_idle"),
    ),
];

/// The metric of a `device_efficiency` field.
fn metric(field: &str) -> Option<&'static MetricDef> {
    METRICS.iter().find(|(f, _)| *f == field).map(|(_, m)| m)
}

/// A phase's attributes, sorted by key: the drive (`hw.id` = device, its model and firmware), the
/// profile and, when the phase ran in a chosen NVMe power state, that state. The probe id and
/// serial are not attributes (one series per drive and profile, not per probe).
fn attrs(e: &v1::EfficiencyPhase) -> Vec<(&'static str, String)> {
    let mut a = Vec::new();
    if !e.firmware.is_empty() {
        a.push(("hw.firmware_version", e.firmware.clone()));
    }
    a.push(("hw.id", e.device.clone()));
    if !e.model.is_empty() {
        a.push(("hw.model", e.model.clone()));
    }
    a.push(("hw.type", "physical_disk".to_string()));
    if let Some(s) = e.power_state {
        a.push(("wattflip.power_state", s.to_string()));
    }
    a.push(("wattflip.profile", e.profile.clone()));
    a
}

/// The gauges of one checked phase: one per figure it carries (none unless it is stable).
pub fn phase_points(e: &v1::EfficiencyPhase, out: &mut Vec<DataPoint>) {
    let attrs = attrs(e);
    for (field, v) in e.metric_fields() {
        if let (Some(v), Some(m)) = (v, metric(field)) {
            out.push(DataPoint { metric: m, attrs: attrs.clone(), time_ns: e.time_ns, start_ns: 0, value: v });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::otlp::translate::Translator;
    use wattflip_proto::domain::convert_batch;
    use wattflip_proto::schema::HostTags;

    /// Issue 42: a batch's stable phase is exported as one gauge per figure it carries, at its
    /// interval's start, with the drive, profile and power state as attributes; an unstable
    /// phase sends nothing.
    #[test]
    fn a_stable_phase_is_one_gauge_per_figure_and_an_unstable_one_none() {
        let phase = |profile: &str, verdict: &str| v1::EfficiencyPhase {
            time_ns: 5_000,
            device: "nvme1n1".into(),
            model: "MZ-X".into(),
            firmware: "1.2".into(),
            profile: profile.into(),
            verdict: verdict.into(),
            probe_id: "4000".into(),
            windows: 10,
            ..Default::default()
        };
        let mut stable = phase("seq_read_128k", "stable");
        stable.power_state = Some(1);
        for (k, v) in [("mib_per_s", 2000.0), ("watts", 8.0), ("mib_per_s_per_watt", 250.0), ("mib_per_s_per_watt_u95", 3.0)] {
            assert!(stable.set_metric(k, v));
        }
        let b = v1::Batch { agent_id: "h1".into(), sequence: 1, efficiency: vec![stable, phase("rand_read_4k", "unstable")], ..Default::default() };
        let b = convert_batch("h1", b).unwrap();
        let tags = HostTags { host: "h1".into(), labels: Default::default() };
        let points = Translator::default().batch(&tags, &b, None, &[]);
        let got: Vec<(&str, &str, f64, i64)> = points.iter().map(|p| (p.metric.name, p.metric.unit, p.value, p.time_ns)).collect();
        assert_eq!(
            got,
            [
                ("wattflip.device_efficiency.power", "W", 8.0, 5_000),
                ("wattflip.device_efficiency.throughput", "MiBy/s", 2000.0, 5_000),
                ("wattflip.device_efficiency.throughput_per_power", "MiBy/s/W", 250.0, 5_000),
                ("wattflip.device_efficiency.throughput_per_power_u95", "MiBy/s/W", 3.0, 5_000),
            ]
        );
        let want: Vec<(&str, String)> = [
            ("hw.firmware_version", "1.2"),
            ("hw.id", "nvme1n1"),
            ("hw.model", "MZ-X"),
            ("hw.type", "physical_disk"),
            ("wattflip.power_state", "1"),
            ("wattflip.profile", "seq_read_128k"),
        ]
        .map(|(k, v)| (k, v.to_string()))
        .to_vec();
        assert!(points.iter().all(|p| p.attrs == want && p.metric.instrument == Instrument::Gauge), "{points:?}");
    }

    /// Every field of the message has its metric, and no two fields share one.
    #[test]
    fn every_efficiency_field_has_its_own_metric() {
        let fields: Vec<&str> = v1::EfficiencyPhase::default().metric_fields().iter().map(|(f, _)| *f).collect();
        let mapped: Vec<&str> = METRICS.iter().map(|(f, _)| *f).collect();
        assert_eq!(fields, mapped);
        let mut names: Vec<&str> = METRICS.iter().map(|(_, m)| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 20);
    }
}
