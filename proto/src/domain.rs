//! Domain types behind the wire format, and the checks that turn a `v1` message into one. Every
//! rejection names the field (`batch 7: power[3].watts: ...`), so an operator can find the sensor.
//! To accept a new payload: add its domain type here, a `convert_*` function, and its points in
//! `schema.rs`.

use crate::units::{Celsius, Joules, UnixNanos, Watts};
use crate::v1;
use std::collections::BTreeMap;

/// Tag keys the schema sets itself; agent labels may not use them.
pub const RESERVED_TAGS: &[&str] = &[
    "host", "source", "zone", "scope", "method", "device", "sensor", "model", "serial", "firmware", "bench",
    "experiment", "pattern", "kind", "severity", "outcome", "trigger", "state", "time", "rate",
];
/// At most this many static labels per agent: labels become tags, and tags must stay bounded.
pub const MAX_LABELS: usize = 16;

/// A rejected message: which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidField {
    pub field: String,
    pub reason: String,
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> InvalidField {
    InvalidField { field: field.into(), reason: reason.into() }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Measured,
    Estimated,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Measured => "measured",
            Method::Estimated => "estimated",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Hello {
    pub agent_id: String,
    pub hostname: String,
    pub agent_version: String,
    pub protocol_version: u32,
    pub labels: BTreeMap<String, String>,
    pub inventory: v1::Inventory,
    pub time: UnixNanos,
    /// `run`, `probe`, `governor`; empty from older agents.
    pub session: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PowerSample {
    pub time: UnixNanos,
    pub source: String,
    pub zone: String,
    pub scope: String,
    pub method: Method,
    pub watts: Option<Watts>,
    pub joules: Option<Joules>,
    pub interval_ns: u64,
    /// Min and max of the readings a windowed sample aggregates, and how many there were.
    pub min_watts: Option<Watts>,
    pub max_watts: Option<Watts>,
    pub readings: u32,
    /// A full-rate reading recorded around a probe (tag `rate=full`), not a window aggregate.
    pub full_rate: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TemperatureSample {
    pub time: UnixNanos,
    pub source: String,
    pub device: String,
    pub sensor: String,
    pub celsius: Celsius,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub agent_id: String,
    pub sequence: u64,
    pub power: Vec<PowerSample>,
    pub temperature: Vec<TemperatureSample>,
    pub probe_runs: Vec<v1::ProbeRun>,
    pub power_state_changes: Vec<v1::PowerStateChange>,
    pub events: Vec<v1::Event>,
    pub nvme_smart: Vec<v1::NvmeSmart>,
    pub electrical: Vec<v1::ElectricalSample>,
    pub idle_profiles: Vec<v1::IdleProfile>,
}

impl Batch {
    /// Number of samples and records carried, for metrics and logs.
    pub fn len(&self) -> usize {
        self.power.len()
            + self.temperature.len()
            + self.probe_runs.len()
            + self.power_state_changes.len()
            + self.events.len()
            + self.nvme_smart.len()
            + self.electrical.len()
            + self.idle_profiles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Agent ids become the `host` tag and (later) certificate identities: keep them plain.
pub fn check_agent_id(field: &str, id: &str) -> Result<(), InvalidField> {
    if id.is_empty() {
        return Err(invalid(field, "is empty; set agent_id in the agent config (defaults to the hostname)"));
    }
    if id.len() > 128 {
        return Err(invalid(field, format!("is {} bytes long; at most 128", id.len())));
    }
    if !id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')) {
        return Err(invalid(field, format!("`{id}` may contain only letters, digits, `.`, `-` and `_`")));
    }
    Ok(())
}

/// A value that becomes a tag: non-empty, bounded, no control characters.
pub fn check_tag_value(field: &str, v: &str) -> Result<(), InvalidField> {
    tag_value(v).map_err(|r| invalid(field, r))
}

// The checks below return only the reason; `convert_batch` names the field (`power[3].zone`) when
// one fails. Formatting that name for every sample cost more than all the checks together.

fn tag_value(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Err("is empty".into());
    }
    if v.len() > 256 {
        return Err(format!("is {} bytes long; at most 256", v.len()));
    }
    // ASCII strings (nearly all) are checked bytewise; others char by char (C1 controls).
    let control = if v.is_ascii() { v.bytes().any(|b| b.is_ascii_control()) } else { v.chars().any(char::is_control) };
    if control {
        return Err("contains control characters".into());
    }
    Ok(())
}

/// Label keys: lowercase identifiers that do not collide with the schema's own tags.
pub fn check_label(key: &str, value: &str) -> Result<(), InvalidField> {
    let field = format!("labels.{key}");
    let mut chars = key.chars();
    let ok_start = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    if !ok_start || key.len() > 32 || !key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
        return Err(invalid(field, "label keys are lowercase identifiers (a-z, 0-9, _), at most 32 characters"));
    }
    if RESERVED_TAGS.contains(&key) {
        return Err(invalid(field, format!("`{key}` is set by wattflip itself; choose another label name")));
    }
    check_tag_value(&field, value)
}

fn check_time(field: &str, t: i64) -> Result<UnixNanos, InvalidField> {
    utc(t).map_err(|r| invalid(field, r))
}

fn utc(t: i64) -> Result<UnixNanos, String> {
    // InfluxDB's valid range is ±9223372036854775806 ns; 0 or negative means the agent never set it.
    if t <= 0 || t > 9_223_372_036_854_775_806 {
        return Err(format!("{t} is not a UTC timestamp in nanoseconds"));
    }
    Ok(UnixNanos(t))
}

fn finite(v: f64) -> Result<f64, String> {
    if !v.is_finite() {
        return Err(format!("{v} is not a finite number"));
    }
    Ok(v)
}

fn method(m: i32) -> Result<Method, &'static str> {
    match v1::Method::try_from(m) {
        Ok(v1::Method::Measured) => Ok(Method::Measured),
        Ok(v1::Method::Estimated) => Ok(Method::Estimated),
        _ => Err("must be METHOD_MEASURED or METHOD_ESTIMATED"),
    }
}

impl TryFrom<v1::Hello> for Hello {
    type Error = InvalidField;

    fn try_from(h: v1::Hello) -> Result<Self, InvalidField> {
        check_agent_id("hello.agent_id", &h.agent_id)?;
        if h.labels.len() > MAX_LABELS {
            return Err(invalid("hello.labels", format!("{} labels; at most {MAX_LABELS}", h.labels.len())));
        }
        let mut labels = BTreeMap::new();
        for (k, v) in h.labels {
            check_label(&k, &v).map_err(|e| invalid(format!("hello.{}", e.field), e.reason))?;
            labels.insert(k, v);
        }
        for (i, d) in h.inventory.as_ref().map(|inv| inv.storage_devices.as_slice()).unwrap_or_default().iter().enumerate() {
            check_tag_value(&format!("hello.inventory.storage_devices[{i}].name"), &d.name)?;
        }
        if !h.session.is_empty() {
            check_tag_value("hello.session", &h.session)?;
        }
        Ok(Hello {
            agent_id: h.agent_id,
            hostname: h.hostname,
            agent_version: h.agent_version,
            protocol_version: h.protocol_version,
            labels,
            inventory: h.inventory.unwrap_or_default(),
            time: check_time("hello.time_ns", h.time_ns)?,
            session: h.session,
        })
    }
}

/// Converts a batch, checking that it belongs to `agent_id`.
pub fn convert_batch(agent_id: &str, b: v1::Batch) -> Result<Batch, InvalidField> {
    if b.agent_id != agent_id {
        return Err(invalid(
            "batch.agent_id",
            format!("`{}` differs from the stream's Hello agent id `{agent_id}`", b.agent_id),
        ));
    }
    if b.sequence == 0 {
        return Err(invalid("batch.sequence", "must be at least 1"));
    }
    let mut power = Vec::with_capacity(b.power.len());
    for (i, p) in b.power.into_iter().enumerate() {
        let f = |name: &str| format!("power[{i}].{name}");
        tag_value(&p.source).map_err(|r| invalid(f("source"), r))?;
        tag_value(&p.zone).map_err(|r| invalid(f("zone"), r))?;
        if !p.scope.is_empty() {
            tag_value(&p.scope).map_err(|r| invalid(f("scope"), r))?;
        }
        let watts = p.watts.map(|w| finite(w).map_err(|r| invalid(f("watts"), r)).map(Watts)).transpose()?;
        let joules = p.joules.map(|j| finite(j).map_err(|r| invalid(f("joules"), r)).map(Joules)).transpose()?;
        if watts.is_none() && joules.is_none() {
            return Err(invalid(f("watts"), "a power sample needs watts or joules"));
        }
        if joules.is_some_and(|j| j.0 < 0.0) {
            return Err(invalid(f("joules"), "energy in an interval cannot be negative"));
        }
        // Full-rate points overlap the aggregate stream in time: joules on both would make
        // SUM(joules) over a window count that energy twice.
        if p.full_rate && joules.is_some() {
            return Err(invalid(f("joules"), "a full-rate sample carries watts only (the window aggregates carry the joules)"));
        }
        power.push(PowerSample {
            time: utc(p.time_ns).map_err(|r| invalid(f("time_ns"), r))?,
            method: method(p.method).map_err(|r| invalid(f("method"), r))?,
            source: p.source,
            zone: p.zone,
            scope: p.scope,
            watts,
            joules,
            interval_ns: u64::try_from(p.interval_ns)
                .map_err(|_| invalid(f("interval_ns"), "cannot be negative"))?,
            min_watts: p.min_watts.map(|w| finite(w).map_err(|r| invalid(f("min_watts"), r)).map(Watts)).transpose()?,
            max_watts: p.max_watts.map(|w| finite(w).map_err(|r| invalid(f("max_watts"), r)).map(Watts)).transpose()?,
            readings: p.readings,
            full_rate: p.full_rate,
        });
    }
    let mut temperature = Vec::with_capacity(b.temperature.len());
    for (i, t) in b.temperature.into_iter().enumerate() {
        let f = |name: &str| format!("temperature[{i}].{name}");
        tag_value(&t.source).map_err(|r| invalid(f("source"), r))?;
        tag_value(&t.device).map_err(|r| invalid(f("device"), r))?;
        tag_value(&t.sensor).map_err(|r| invalid(f("sensor"), r))?;
        let c = finite(t.celsius).map_err(|r| invalid(f("celsius"), r))?;
        // Below absolute zero or above 500 °C is a decoding bug (K vs °C vs m°C), not a reading.
        if !(-273.15..=500.0).contains(&c) {
            return Err(invalid(f("celsius"), format!("{c} °C is outside -273.15..500; check the unit")));
        }
        temperature.push(TemperatureSample {
            time: utc(t.time_ns).map_err(|r| invalid(f("time_ns"), r))?,
            source: t.source,
            device: t.device,
            sensor: t.sensor,
            celsius: Celsius(c),
        });
    }
    for (i, r) in b.probe_runs.iter().enumerate() {
        let f = |name: &str| format!("probe_runs[{i}].{name}");
        tag_value(&r.run_id).map_err(|r| invalid(f("run_id"), r))?;
        tag_value(&r.device).map_err(|r| invalid(f("device"), r))?;
        tag_value(&r.bench).map_err(|r| invalid(f("bench"), r))?;
        tag_value(&r.experiment).map_err(|r| invalid(f("experiment"), r))?;
        tag_value(&r.pattern).map_err(|r| invalid(f("pattern"), r))?;
        // Optional tag: absent (empty) when the agent does not know it, else a valid tag value.
        if !r.firmware.is_empty() {
            tag_value(&r.firmware).map_err(|r| invalid(f("firmware"), r))?;
        }
        utc(r.start_ns).map_err(|r| invalid(f("start_ns"), r))?;
        utc(r.end_ns).map_err(|r| invalid(f("end_ns"), r))?;
        if r.end_ns < r.start_ns {
            return Err(invalid(f("end_ns"), "ends before it starts"));
        }
        for (name, v) in [
            ("value", r.value),
            ("mean_us", r.mean_us),
            ("min_us", r.min_us),
            ("max_us", r.max_us),
            ("stddev_us", r.stddev_us),
            ("p50_us", r.p50_us),
            ("p95_us", r.p95_us),
            ("p99_us", r.p99_us),
            ("iops", r.iops),
            ("mib_per_s", r.mib_per_s),
        ] {
            finite(v).map_err(|r| invalid(f(name), r))?;
        }
        for (name, v) in r.energy_fields().into_iter().chain(r.sweep_power_fields()) {
            if let Some(v) = v {
                finite(v).map_err(|r| invalid(f(name), r))?;
            }
        }
        for (name, t) in [("energy_start_ns", r.energy_start_ns), ("energy_end_ns", r.energy_end_ns)] {
            if let Some(t) = t {
                utc(t).map_err(|r| invalid(f(name), r))?;
            }
        }
        if let (Some(s), Some(e)) = (r.energy_start_ns, r.energy_end_ns) {
            if e < s {
                return Err(invalid(f("energy_end_ns"), "the run ends in the power trace before it starts"));
            }
        }
    }
    for (i, c) in b.power_state_changes.iter().enumerate() {
        let f = |name: &str| format!("power_state_changes[{i}].{name}");
        utc(c.time_ns).map_err(|r| invalid(f("time_ns"), r))?;
        tag_value(&c.device).map_err(|r| invalid(f("device"), r))?;
        if v1::PowerStateOutcome::try_from(c.outcome).unwrap_or_default() == v1::PowerStateOutcome::Unspecified {
            return Err(invalid(f("outcome"), "must be set"));
        }
    }
    for (i, e) in b.events.iter().enumerate() {
        let f = |name: &str| format!("events[{i}].{name}");
        utc(e.time_ns).map_err(|r| invalid(f("time_ns"), r))?;
        tag_value(&e.kind).map_err(|r| invalid(f("kind"), r))?;
        if v1::Severity::try_from(e.severity).unwrap_or_default() == v1::Severity::Unspecified {
            return Err(invalid(f("severity"), "must be set"));
        }
    }
    for (i, s) in b.nvme_smart.iter().enumerate() {
        let f = |name: &str| format!("nvme_smart[{i}].{name}");
        utc(s.time_ns).map_err(|r| invalid(f("time_ns"), r))?;
        tag_value(&s.device).map_err(|r| invalid(f("device"), r))?;
        // Absent (None) is allowed: the drive or tool did not report it.
        if let Some(c) = s.composite_celsius {
            finite(c).map_err(|r| invalid(f("composite_celsius"), r))?;
        }
    }
    for (i, s) in b.electrical.iter().enumerate() {
        let f = |name: &str| format!("electrical[{i}].{name}");
        utc(s.time_ns).map_err(|r| invalid(f("time_ns"), r))?;
        tag_value(&s.source).map_err(|r| invalid(f("source"), r))?;
        tag_value(&s.chip).map_err(|r| invalid(f("chip"), r))?;
        tag_value(&s.channel).map_err(|r| invalid(f("channel"), r))?;
        match (s.volts, s.amperes) {
            (Some(v), None) => finite(v).map(drop).map_err(|r| invalid(f("volts"), r))?,
            (None, Some(a)) => finite(a).map(drop).map_err(|r| invalid(f("amperes"), r))?,
            _ => return Err(invalid(f("volts"), "exactly one of volts and amperes must be set")),
        }
    }
    for (i, p) in b.idle_profiles.iter().enumerate() {
        let f = |name: &str| format!("idle_profiles[{i}].{name}");
        utc(p.time_ns).map_err(|r| invalid(f("time_ns"), r))?;
        tag_value(&p.device).map_err(|r| invalid(f("device"), r))?;
        tag_value(&p.model).map_err(|r| invalid(f("model"), r))?;
        for (name, v) in [("window_s", Some(p.window_s)), ("median_w", Some(p.median_w)), ("spread_w", Some(p.spread_w))]
            .into_iter()
            .chain([
                ("activity_period_s", p.activity_period_s),
                ("activity_correlation", p.activity_correlation),
                ("activity_energy_j", p.activity_energy_j),
            ])
        {
            if let Some(v) = v {
                finite(v).map_err(|r| invalid(f(name), r))?;
            }
        }
    }
    Ok(Batch {
        agent_id: b.agent_id,
        sequence: b.sequence,
        power,
        temperature,
        probe_runs: b.probe_runs,
        power_state_changes: b.power_state_changes,
        events: b.events,
        nvme_smart: b.nvme_smart,
        electrical: b.electrical,
        idle_profiles: b.idle_profiles,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> v1::PowerSample {
        v1::PowerSample {
            time_ns: 1_700_000_000_000_000_000,
            source: "rapl".into(),
            zone: "package-0".into(),
            scope: "package".into(),
            method: v1::Method::Measured as i32,
            watts: Some(10.0),
            joules: Some(10.0),
            interval_ns: 1_000_000_000,
            ..Default::default()
        }
    }

    fn batch(power: Vec<v1::PowerSample>) -> v1::Batch {
        v1::Batch { agent_id: "a1".into(), sequence: 1, power, ..Default::default() }
    }

    #[test]
    fn probe_run_firmware_is_optional_but_checked_when_present() {
        let run = |fw: &str| v1::ProbeRun {
            run_id: "1-0".into(),
            device: "nvme0n1".into(),
            bench: "granularity".into(),
            experiment: "granularity/RR".into(),
            pattern: "RR".into(),
            start_ns: 1_700_000_000_000_000_000,
            end_ns: 1_700_000_000_100_000_000,
            firmware: fw.into(),
            ..Default::default()
        };
        let b = |fw: &str| v1::Batch { agent_id: "a1".into(), sequence: 1, probe_runs: vec![run(fw)], ..Default::default() };
        assert!(convert_batch("a1", b("")).is_ok());
        assert!(convert_batch("a1", b("2B2QEXM7")).is_ok());
        let e = convert_batch("a1", b("FW\n1")).unwrap_err();
        assert_eq!((e.field.as_str(), e.reason.as_str()), ("probe_runs[0].firmware", "contains control characters"));
    }

    #[test]
    fn good_batch_converts_with_units() {
        let b = convert_batch("a1", batch(vec![sample()])).unwrap();
        assert_eq!(b.power[0].watts, Some(Watts(10.0)));
        assert_eq!(b.power[0].method, Method::Measured);
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn rejections_name_the_field() {
        let mut s = sample();
        s.watts = Some(f64::NAN);
        let e = convert_batch("a1", batch(vec![sample(), s])).unwrap_err();
        assert_eq!(e.field, "power[1].watts");
        let e = convert_batch("other", batch(vec![])).unwrap_err();
        assert_eq!(e.field, "batch.agent_id");
        let mut s = sample();
        s.method = 0;
        assert_eq!(convert_batch("a1", batch(vec![s])).unwrap_err().field, "power[0].method");
        let mut s = sample();
        s.time_ns = 0;
        assert_eq!(convert_batch("a1", batch(vec![s])).unwrap_err().field, "power[0].time_ns");
        let mut b = batch(vec![]);
        b.temperature.push(v1::TemperatureSample {
            time_ns: 5,
            source: "hwmon".into(),
            device: "nvme0".into(),
            sensor: "Composite".into(),
            celsius: 49850.0,
        });
        let e = convert_batch("a1", b).unwrap_err();
        assert_eq!(e.field, "temperature[0].celsius");
    }

    #[test]
    fn labels_are_bounded_and_cannot_shadow_schema_tags() {
        assert!(check_label("rack", "r12").is_ok());
        assert_eq!(check_label("host", "x").unwrap_err().field, "labels.host");
        assert!(check_label("Rack", "x").is_err());
        assert!(check_label("rack", "").is_err());
        assert!(check_agent_id("id", "node-1.dc_2").is_ok());
        assert!(check_agent_id("id", "node 1").is_err());
    }
}
