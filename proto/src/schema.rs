//! The InfluxDB schema (documented in `docs/schema.md`): how domain types become points. The
//! collector writes these points and the agent's local probe output uses the same function, so the
//! two never disagree. A new measurement gets its own `*_points` function here and a section in
//! `docs/schema.md`.

use crate::domain::{Batch, Hello, PowerSample, TemperatureSample};
use crate::lineproto::Point;
use crate::v1;
use std::collections::BTreeMap;

pub const POWER: &str = "power";
pub const TEMPERATURE: &str = "temperature";
pub const PROBE_RUN: &str = "probe_run";
pub const POWER_STATE: &str = "power_state";
pub const EVENT: &str = "event";
pub const NVME_SMART: &str = "nvme_smart";
pub const ELECTRICAL: &str = "electrical";
pub const AGENT: &str = "agent";
pub const INVENTORY: &str = "inventory";
pub const POWER_STATE_DESCRIPTOR: &str = "power_state_descriptor";
pub const THROTTLE_EVENT: &str = "throttle_event";
pub const IDLE_PROFILE: &str = "idle_profile";
pub const DRIVE_POWER_MODE: &str = "drive_power_mode";
pub const SOURCE_AGREEMENT: &str = "source_agreement";
pub const DEVICE_EFFICIENCY: &str = "device_efficiency";
/// Value of the `rate` tag on full-rate power points (readings around a probe); window
/// aggregates have no `rate` tag.
pub const FULL_RATE: &str = "full";

/// Tags every point of one agent carries: `host` (the agent id) and the agent's static labels.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostTags {
    pub host: String,
    pub labels: BTreeMap<String, String>,
}

impl HostTags {
    fn point(&self, measurement: &str, time_ns: i64) -> Point {
        let mut p = Point::new(measurement, time_ns).tag("host", self.host.clone());
        for (k, v) in &self.labels {
            p = p.tag(k.clone(), v.clone());
        }
        p
    }
}

/// Points describing the agent and its inventory, written when a Hello arrives.
pub fn hello_points(h: &Hello, tags: &HostTags) -> Vec<Point> {
    let inv = &h.inventory;
    let mut agent = tags.point(AGENT, h.time.0);
    if !h.session.is_empty() {
        // A tag, so the fleet overview can show the inventory of `run` connections only.
        agent = agent.tag("session", h.session.clone());
    }
    let mut pts = vec![agent
        .string("hostname", h.hostname.clone())
        .string("version", h.agent_version.clone())
        .int("protocol_version", i64::from(h.protocol_version))
        .int("storage_devices", inv.storage_devices.len() as i64)
        .int("power_sources", inv.power_sources.len() as i64)
        .int("temperature_sensors", inv.temperature_sensors.len() as i64)];
    for d in &inv.storage_devices {
        storage_device_points(d, h.time.0, tags, &mut pts);
    }
    pts
}

/// A drive's `inventory` point and its `power_state_descriptor` points, at `time_ns`: from a
/// Hello's entry, or from a `drive_identities` record (a drive identified after the Hello).
fn storage_device_points(d: &v1::StorageDevice, time_ns: i64, tags: &HostTags, pts: &mut Vec<Point>) {
    // Capacity, block size and rotation no source reported write no field (null), not 0/false.
    let mut p = tags.point(INVENTORY, time_ns).tag("device", d.name.clone()).tag("model", d.model.clone()).tag("serial", d.serial.clone());
    if let Some(c) = d.capacity_bytes {
        p = p.uint("capacity_bytes", c);
    }
    if let Some(b) = d.logical_block_size {
        p = p.int("logical_block_size", i64::from(b));
    }
    p = p.string("firmware", d.firmware.clone()).string("transport", d.transport.clone());
    // The drive's controller and sysfs address: what its temperature and SMART points (tagged
    // `nvme0`, `sda`) join on. Unknown writes no field.
    for (k, v) in [("controller", &d.controller), ("sysfs_address", &d.sysfs_address)] {
        if !v.is_empty() {
            p = p.string(k, v.clone());
        }
    }
    if let Some(r) = d.rotational {
        p = p.boolean("rotational", r);
    }
    pts.push(p.int("power_states", d.power_states.len() as i64));
    // The table itself, one point per state: a count alone cannot tell a dashboard what cap
    // PS2 is or which states the governor may choose.
    for ps in &d.power_states {
        pts.push(
            tags.point(POWER_STATE_DESCRIPTOR, time_ns)
                .tag("device", d.name.clone())
                .tag("model", d.model.clone())
                .tag("serial", d.serial.clone())
                .tag("state", ps.state.to_string())
                .float("max_watts", ps.max_watts)
                .boolean("operational", ps.operational)
                .int("entry_latency_us", i64::from(ps.entry_latency_us))
                .int("exit_latency_us", i64::from(ps.exit_latency_us)),
        );
    }
}

/// All points of one batch.
pub fn batch_points(b: &Batch, tags: &HostTags) -> Vec<Point> {
    let mut pts = Vec::with_capacity(b.len());
    pts.extend(b.power.iter().map(|s| power_point(s, tags)));
    pts.extend(b.temperature.iter().map(|t| temperature_point(t, tags)));
    record_points(b, tags, &mut pts);
    pts
}

/// One power sample's point.
pub fn power_point(s: &PowerSample, tags: &HostTags) -> Point {
    let mut p =
        tags.point(POWER, s.time.0).tag("source", s.source.clone()).tag("zone", s.zone.clone()).tag("scope", s.scope.clone()).tag("method", s.method.as_str());
    if s.full_rate {
        p = p.tag("rate", FULL_RATE);
    }
    if let Some(w) = s.watts {
        p = p.float("watts", w.0);
    }
    if let Some(j) = s.joules {
        p = p.float("joules", j.0);
    }
    if s.interval_ns > 0 {
        p = p.uint("interval_ns", s.interval_ns);
    }
    if let (Some(lo), Some(hi)) = (s.min_watts, s.max_watts) {
        p = p.float("min_watts", lo.0).float("max_watts", hi.0).int("readings", i64::from(s.readings));
    }
    // A string field, not a tag: a tag would split a zone's series whenever a BMC's state changes
    // and multiply series per combination of flags (docs/schema.md).
    if !s.flags.is_empty() {
        p = p.string("flags", s.flags.join(","));
    }
    p
}

/// One temperature sample's point.
pub fn temperature_point(t: &TemperatureSample, tags: &HostTags) -> Point {
    tags.point(TEMPERATURE, t.time.0)
        .tag("source", t.source.clone())
        .tag("device", t.device.clone())
        .tag("sensor", t.sensor.clone())
        .float("celsius", t.celsius.0)
}

/// The points of everything in a batch but its power and temperature samples (the collector's
/// fast encoder writes those itself).
pub fn record_points(b: &Batch, tags: &HostTags, pts: &mut Vec<Point>) {
    for r in &b.probe_runs {
        pts.push(probe_run_point(r, tags));
    }
    for c in &b.power_state_changes {
        let outcome = v1::PowerStateOutcome::try_from(c.outcome).unwrap_or_default();
        pts.push(
            tags.point(POWER_STATE, c.time_ns)
                .tag("device", c.device.clone())
                .tag("outcome", outcome_name(outcome))
                .string("serial", c.serial.clone())
                .int("from_state", i64::from(c.from_state))
                .int("to_state", i64::from(c.to_state))
                .int("observed_state", i64::from(c.observed_state))
                .string("detail", c.detail.clone()),
        );
    }
    for e in &b.events {
        let sev = v1::Severity::try_from(e.severity).unwrap_or_default();
        let attrs: BTreeMap<&String, &String> = e.attributes.iter().collect();
        let attrs = attrs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
        pts.push(
            tags.point(EVENT, e.time_ns)
                .tag("kind", e.kind.clone())
                .tag("severity", severity_name(sev))
                .tag("device", e.device.clone())
                .string("message", e.message.clone())
                .string("attributes", attrs),
        );
    }
    for s in &b.nvme_smart {
        pts.push(nvme_smart_point(s, tags));
    }
    for e in &b.electrical {
        let mut p = tags.point(ELECTRICAL, e.time_ns).tag("source", e.source.clone()).tag("chip", e.chip.clone()).tag("channel", e.channel.clone());
        if let Some(v) = e.volts {
            p = p.float("volts", v);
        }
        if let Some(a) = e.amperes {
            p = p.float("amperes", a);
        }
        pts.push(p);
    }
    for i in &b.idle_profiles {
        pts.push(idle_profile_point(i, tags));
    }
    for m in &b.drive_power_modes {
        pts.push(drive_power_mode_point(m, tags));
    }
    for d in &b.drive_identities {
        if let Some(s) = &d.device {
            storage_device_points(s, d.time_ns, tags, pts);
        }
    }
    for e in &b.efficiency {
        pts.push(device_efficiency_point(&EfficiencyPhase::from(e), tags));
    }
}

/// One cross-source check of a host over a window (computed by the collector,
/// `collector/src/analysis/sources.rs`), at the window's end: tag `check`; fields `ratio`, the band `min`
/// and `max`, and whether the ratio was `within` it.
pub fn source_agreement_point(tags: &HostTags, end_ns: i64, check: &str, ratio: f64, (min, max): (f64, f64)) -> Point {
    tags.point(SOURCE_AGREEMENT, end_ns)
        .tag("check", check.to_string())
        .float("ratio", ratio)
        .float("min", min)
        .float("max", max)
        .boolean("within", (min..=max).contains(&ratio))
}

/// A drive's power mode: `mode` as a word and `level` as a number a panel can draw (0 sleep,
/// 1 standby, 2 idle, 3 active), `skipped` when smartctl left the drive alone.
pub fn drive_power_mode_point(m: &v1::DrivePowerMode, tags: &HostTags) -> Point {
    let level = crate::domain::DRIVE_POWER_MODES.iter().position(|x| *x == m.mode).map(|i| 3 - i as i64).unwrap_or(-1);
    tags.point(DRIVE_POWER_MODE, m.time_ns)
        .tag("device", m.device.clone())
        .tag("serial", m.serial.clone())
        .string("mode", m.mode.clone())
        .int("level", level)
        .boolean("skipped", m.skipped)
}

/// One SMART / health record. A reading the record leaves out (the drive or tool did not report
/// it, or it could not be read) writes no field, so a query sees null rather than a measured 0.
pub fn nvme_smart_point(s: &v1::NvmeSmart, tags: &HostTags) -> Point {
    let mut p = tags
        .point(NVME_SMART, s.time_ns)
        .tag("device", s.device.clone())
        .tag("serial", s.serial.clone())
        .int("critical_warning", i64::from(s.critical_warning));
    if let Some(c) = s.composite_celsius {
        p = p.float("composite_celsius", c);
    }
    if let Some(u) = s.percentage_used {
        p = p.int("percentage_used", i64::from(u));
    }
    for (name, v) in s.counters() {
        if let Some(v) = v {
            p = p.uint(name, v);
        }
    }
    p
}

/// A device's idle characterisation, at the start of the idle window it was measured in.
pub fn idle_profile_point(i: &v1::IdleProfile, tags: &HostTags) -> Point {
    let mut p = tags
        .point(IDLE_PROFILE, i.time_ns)
        .tag("device", i.device.clone())
        .tag("model", i.model.clone())
        .string("serial", i.serial.clone())
        .string("energy_source", i.energy_source.clone())
        .string("probe_id", i.probe_id.clone())
        .float("window_s", i.window_s)
        .int("samples", i64::from(i.samples))
        .float("median_w", i.median_w)
        .float("spread_w", i.spread_w);
    for (name, v) in [("activity_period_s", i.activity_period_s), ("activity_correlation", i.activity_correlation), ("activity_energy_j", i.activity_energy_j)]
    {
        if let Some(v) = v {
            p = p.float(name, v);
        }
    }
    p
}

/// One uFLIP run; timestamped at its start so repetitions never collide.
pub fn probe_run_point(r: &v1::ProbeRun, tags: &HostTags) -> Point {
    let mut p = tags
        .point(PROBE_RUN, r.start_ns)
        .tag("device", r.device.clone())
        .tag("model", r.model.clone())
        .tag("firmware", r.firmware.clone())
        .tag("bench", r.bench.clone())
        .tag("experiment", r.experiment.clone())
        .tag("pattern", r.pattern.clone())
        .string("run_id", r.run_id.clone())
        .string("varying", r.varying.clone())
        .float("value", r.value)
        .int("repetition", i64::from(r.repetition))
        .int("end_ns", r.end_ns)
        .float("duration_s", (r.end_ns - r.start_ns) as f64 / 1e9)
        .uint("io_count", r.io_count)
        .uint("ignore_io", r.ignore_io)
        .uint("io_size_bytes", r.io_size_bytes)
        .float("mean_us", r.mean_us)
        .float("min_us", r.min_us)
        .float("max_us", r.max_us)
        .float("stddev_us", r.stddev_us)
        .float("p50_us", r.p50_us)
        .float("p95_us", r.p95_us)
        .float("p99_us", r.p99_us)
        .float("iops", r.iops)
        .float("mib_per_s", r.mib_per_s)
        .string("target_kind", r.target_kind.clone());
    for (k, v) in r.energy_fields().into_iter().chain(r.sweep_power_fields()) {
        if let Some(v) = v {
            p = p.float(k, v);
        }
    }
    if let Some(ps) = r.power_state {
        p = p.int("power_state", i64::from(ps));
    }
    if let Some(t) = r.energy_start_ns {
        p = p.int("energy_start_ns", t);
    }
    if let Some(t) = r.energy_end_ns {
        p = p.int("energy_end_ns", t);
    }
    if !r.energy_start_found.is_empty() {
        p = p.string("energy_start_found", r.energy_start_found.clone());
    }
    if !r.energy_end_found.is_empty() {
        p = p.string("energy_end_found", r.energy_end_found.clone());
    }
    if !r.energy_source.is_empty() {
        p = p.string("energy_source", r.energy_source.clone());
    }
    if !r.background_class.is_empty() {
        p = p.string("background_class", r.background_class.clone());
    }
    if let Some(cut) = r.energy_tail_cut {
        p = p.boolean("energy_tail_cut", cut);
    }
    if let Some(g) = r.energy_gap_samples {
        p = p.uint("energy_gap_samples", g);
    }
    if !r.energy_baseline_source.is_empty() {
        p = p.string("energy_baseline_source", r.energy_baseline_source.clone());
    }
    if let Some(c) = r.energy_coverage {
        p = p.float("energy_coverage", c);
    }
    if let Some(low) = r.energy_low_confidence {
        p = p.boolean("energy_low_confidence", low);
    }
    if !r.energy_low_confidence_reason.is_empty() {
        p = p.string("energy_low_confidence_reason", r.energy_low_confidence_reason.clone());
    }
    p
}

/// One phase of an efficiency probe (`docs/efficiency.md`): what identifies it, its stability
/// verdict, and its metrics as (field name, value) pairs, each `<metric>` with its `<metric>_u95`
/// where the uncertainty is known. An unstable or unmeasured phase carries no metric at all.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EfficiencyPhase {
    /// Start of the measurement interval (the phase's first window when it has none).
    pub time_ns: i64,
    pub device: String,
    pub model: String,
    pub firmware: String,
    pub serial: String,
    pub profile: String,
    /// `stable`, `unstable` or `not_measured`.
    pub verdict: String,
    pub energy_source: String,
    pub probe_id: String,
    pub windows: u64,
    pub interval_s: Option<f64>,
    pub max_deviation: Option<f64>,
    pub trend_change: Option<f64>,
    pub metrics: Vec<(&'static str, f64)>,
    /// The NVMe power state the phase ran in (the `power_state` tag), when run per state.
    pub power_state: Option<u32>,
}

impl From<&v1::EfficiencyPhase> for EfficiencyPhase {
    /// A phase as sent (`Batch.efficiency`): the collector's points and the agent's
    /// `efficiency.lp` both come from here, so the two are the same lines.
    fn from(e: &v1::EfficiencyPhase) -> Self {
        EfficiencyPhase {
            time_ns: e.time_ns,
            device: e.device.clone(),
            model: e.model.clone(),
            firmware: e.firmware.clone(),
            serial: e.serial.clone(),
            profile: e.profile.clone(),
            verdict: e.verdict.clone(),
            energy_source: e.energy_source.clone(),
            probe_id: e.probe_id.clone(),
            windows: e.windows,
            interval_s: e.interval_s,
            max_deviation: e.max_deviation,
            trend_change: e.trend_change,
            metrics: e.metric_fields().into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect(),
            power_state: e.power_state,
        }
    }
}

/// One efficiency phase as a `device_efficiency` point.
pub fn device_efficiency_point(e: &EfficiencyPhase, tags: &HostTags) -> Point {
    let mut p = tags
        .point(DEVICE_EFFICIENCY, e.time_ns)
        .tag("device", e.device.clone())
        .tag("model", e.model.clone())
        .tag("firmware", e.firmware.clone())
        .tag("profile", e.profile.clone())
        .tag("verdict", e.verdict.clone())
        .tag("power_state", e.power_state.map(|s| s.to_string()).unwrap_or_default())
        .string("serial", e.serial.clone())
        .string("energy_source", e.energy_source.clone())
        .string("probe_id", e.probe_id.clone())
        .uint("windows", e.windows);
    for (k, v) in [("interval_s", e.interval_s), ("max_deviation", e.max_deviation), ("trend_change", e.trend_change)] {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            p = p.float(k, v);
        }
    }
    for (k, v) in &e.metrics {
        if v.is_finite() {
            p = p.float(*k, *v);
        }
    }
    p
}

/// One throttling episode found by the collector's detector (`collector/src/analysis/throttle/`).
/// Written at its onset time; written again with the same timestamp and tags when it ends, so the
/// stored point always holds the latest `duration_s` and `ongoing` (InfluxDB overwrites it).
#[derive(Debug, Clone, PartialEq)]
pub struct ThrottleEvent {
    /// Onset: when the thermal trigger fired, UTC ns.
    pub time_ns: i64,
    /// The drive (temperature device tag, e.g. `nvme0`).
    pub device: String,
    /// What fired: `temperature` (crossed the warning threshold), `critical_temperature`
    /// (crossed the critical threshold of a drive that reports no warning threshold),
    /// `thermal_counters` (TMT transition counts or times moved), `critical_warning` (SMART bit 1 set).
    pub trigger: String,
    /// What fell: `throughput`, `power` or `throughput+power`.
    pub signal: String,
    /// The pattern whose throughput fell, `SW/131072` (pattern/io_size), empty if only power fell.
    pub pattern: String,
    /// Composite temperature at onset, °C, when known.
    pub onset_celsius: Option<f64>,
    /// The drive's warning threshold, °C, when known.
    pub warning_celsius: Option<f64>,
    /// The drive's critical threshold, °C, when known.
    pub critical_celsius: Option<f64>,
    /// Largest throughput drop against the pre-onset baseline, %.
    pub throughput_drop_pct: Option<f64>,
    /// Largest power drop against the pre-onset baseline, %.
    pub power_drop_pct: Option<f64>,
    /// From onset to recovery (or to the last throttled observation while ongoing), s.
    pub duration_s: f64,
    /// Not recovered yet.
    pub ongoing: bool,
}

pub fn throttle_event_point(e: &ThrottleEvent, tags: &HostTags) -> Point {
    let mut p = tags
        .point(THROTTLE_EVENT, e.time_ns)
        .tag("device", e.device.clone())
        .tag("trigger", e.trigger.clone())
        .string("signal", e.signal.clone())
        .string("pattern", e.pattern.clone())
        .float("duration_s", e.duration_s)
        .boolean("ongoing", e.ongoing);
    for (name, v) in [
        ("onset_celsius", e.onset_celsius),
        ("warning_celsius", e.warning_celsius),
        ("critical_celsius", e.critical_celsius),
        ("throughput_drop_pct", e.throughput_drop_pct),
        ("power_drop_pct", e.power_drop_pct),
    ] {
        if let Some(v) = v {
            p = p.float(name, v);
        }
    }
    p
}

pub fn outcome_name(o: v1::PowerStateOutcome) -> &'static str {
    match o {
        v1::PowerStateOutcome::Unspecified => "unspecified",
        v1::PowerStateOutcome::Applied => "applied",
        v1::PowerStateOutcome::Refused => "refused",
        v1::PowerStateOutcome::Ignored => "ignored",
        v1::PowerStateOutcome::Restored => "restored",
        v1::PowerStateOutcome::Failed => "failed",
    }
}

pub fn severity_name(s: v1::Severity) -> &'static str {
    match s {
        v1::Severity::Unspecified => "unspecified",
        v1::Severity::Info => "info",
        v1::Severity::Warning => "warning",
        v1::Severity::Critical => "critical",
    }
}

#[cfg(test)]
mod tests;
