//! Domain types behind the wire format, and the checks that turn a `v1` message into one. Every
//! rejection names the field (`batch 7: power[3].watts: ...`), so an operator can find the sensor.
//! To accept a new payload: add its domain type here, a `convert_*` function, and its points in
//! `schema.rs`.

use crate::lineproto::{check_tag_value as check_storable, TagValueProblem};
use crate::units::{Celsius, Joules, UnixNanos, Watts};
use crate::v1;
use std::collections::BTreeMap;

/// Tag keys the schema sets itself; agent labels may not use them.
pub const RESERVED_TAGS: &[&str] = &[
    "host",
    "source",
    "zone",
    "scope",
    "method",
    "device",
    "sensor",
    "model",
    "serial",
    "firmware",
    "bench",
    "experiment",
    "pattern",
    "kind",
    "severity",
    "outcome",
    "trigger",
    "state",
    "time",
    "rate",
    "field",
    "rule",
    // The collector's tier tag on power points (encoder::BudgetTag).
    "budget",
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
    /// Random per incarnation of the agent's spool: duplicates are recognised per (agent, epoch).
    pub stream_epoch: u64,
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
    /// Quality flags (`deactivated`...), sorted and unique; empty for an ordinary reading.
    pub flags: Vec<String>,
}

/// At most this many flags on one power sample, each at most [`MAX_FLAG_BYTES`] long.
pub const MAX_FLAGS: usize = 8;
pub const MAX_FLAG_BYTES: usize = 32;

/// A power sample's flags, checked (each one lowercase word, so the comma-joined `flags` field
/// splits back into exactly these) and put in canonical order: sorted, duplicates dropped.
fn power_flags(mut flags: Vec<String>) -> Result<Vec<String>, Bad> {
    if flags.len() > MAX_FLAGS {
        return Err(bad("flags", flags.len(), Rule::OutOfRange, format!("{} flags; at most {MAX_FLAGS}", flags.len())));
    }
    for f in &flags {
        let word = !f.is_empty() && f.len() <= MAX_FLAG_BYTES && f.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !word {
            return Err(bad("flags", shown(f), Rule::OutOfRange, format!("a flag is one lowercase word ([a-z0-9_], 1 to {MAX_FLAG_BYTES} bytes)")));
        }
    }
    flags.sort_unstable();
    flags.dedup();
    Ok(flags)
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

// The checks below return only the reason; `convert_batch_points` names the field
// (`power[3].zone`) when one fails. Formatting that name for every sample cost more than all the
// checks together.

fn tag_value(v: &str) -> Result<(), String> {
    if v.len() > 256 {
        return Err(format!("is {} bytes long; at most 256", v.len()));
    }
    // The storability rule itself lives with the encoding (`lineproto::check_tag_value`).
    match check_storable(v) {
        Ok(()) => Ok(()),
        Err(TagValueProblem::Empty) => Err("is empty".into()),
        Err(TagValueProblem::Control) => Err("contains control characters".into()),
        Err(p) => Err(p.to_string()),
    }
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
            stream_epoch: h.stream_epoch,
        })
    }
}

/// The rule a rejected point broke: the `reason` of its counters, Ack and `point_rejected` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// NaN or ±infinity.
    NotFinite,
    /// A finite number outside the physical range (temperature, negative energy or interval).
    OutOfRange,
    /// A tag value that cannot be stored exactly (empty, control characters, trailing backslash,
    /// longer than 256 bytes).
    BadTag,
    /// Not a UTC timestamp in nanoseconds.
    BadTime,
    /// A value the point cannot be without (a power sample with neither watts nor joules).
    Missing,
    /// Values that contradict each other (ends before it starts, joules on a full-rate sample).
    Inconsistent,
    /// An enum left at its UNSPECIFIED value.
    Unspecified,
}

impl Rule {
    pub const ALL: [Rule; 7] = [Rule::NotFinite, Rule::OutOfRange, Rule::BadTag, Rule::BadTime, Rule::Missing, Rule::Inconsistent, Rule::Unspecified];

    pub fn as_str(self) -> &'static str {
        match self {
            Rule::NotFinite => "not_finite",
            Rule::OutOfRange => "out_of_range",
            Rule::BadTag => "bad_tag",
            Rule::BadTime => "bad_time",
            Rule::Missing => "missing",
            Rule::Inconsistent => "inconsistent",
            Rule::Unspecified => "unspecified",
        }
    }
}

/// One point of a batch refused by the checks: which field, its value, the rule and why. The rest
/// of the batch is unaffected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} = {value}: {reason}")]
pub struct Rejection {
    /// `temperature[3].celsius`: the payload, the point's index in the batch, the field.
    pub field: String,
    /// The offending value as text (at most 64 characters of a string value).
    pub value: String,
    pub rule: Rule,
    pub reason: String,
    /// The point's own timestamp when it has a valid one (the `point_rejected` event's time).
    pub time_ns: Option<i64>,
}

impl Rejection {
    /// The payload the point belonged to: `temperature` of `temperature[3].celsius`.
    pub fn payload(&self) -> &str {
        self.field.split('[').next().unwrap_or(&self.field)
    }

    /// The field without the index: `temperature.celsius`.
    pub fn field_name(&self) -> String {
        match self.field.split_once("].") {
            Some((_, f)) => format!("{}.{f}", self.payload()),
            None => self.field.clone(),
        }
    }
}

/// A converted batch: the points that passed, and one [`Rejection`] per point that did not.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    pub batch: Batch,
    pub rejected: Vec<Rejection>,
}

/// A failed check of one field, before the field's full name is formatted (only on failure).
struct Bad {
    name: &'static str,
    value: String,
    rule: Rule,
    reason: String,
}

fn bad(name: &'static str, value: impl std::fmt::Display, rule: Rule, reason: impl Into<String>) -> Bad {
    Bad { name, value: value.to_string(), rule, reason: reason.into() }
}

fn shown(v: &str) -> String {
    match v.char_indices().nth(64) {
        Some((cut, _)) => format!("{:?}…", &v[..cut]),
        None => format!("{v:?}"),
    }
}

fn tag(name: &'static str, v: &str) -> Result<(), Bad> {
    tag_value(v).map_err(|r| bad(name, shown(v), Rule::BadTag, r))
}

fn opt_tag(name: &'static str, v: &str) -> Result<(), Bad> {
    if v.is_empty() {
        return Ok(());
    }
    tag(name, v)
}

fn time(name: &'static str, t: i64) -> Result<UnixNanos, Bad> {
    utc(t).map_err(|r| bad(name, t, Rule::BadTime, r))
}

fn num(name: &'static str, v: f64) -> Result<f64, Bad> {
    finite(v).map_err(|r| bad(name, v, Rule::NotFinite, r))
}

fn opt_num(name: &'static str, v: Option<f64>) -> Result<Option<f64>, Bad> {
    v.map(|v| num(name, v)).transpose()
}

/// Checks every point of `items` with `check`; a failing point is left out and recorded.
fn each<T, U>(
    payload: &str,
    items: Vec<T>,
    rejected: &mut Vec<Rejection>,
    time_of: impl Fn(&T) -> i64,
    check: impl Fn(&T) -> Result<(), Bad>,
    convert: impl Fn(T) -> Result<U, Bad>,
) -> Vec<U> {
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let t = time_of(&item);
        match check(&item).and_then(|()| convert(item)) {
            Ok(u) => out.push(u),
            Err(b) => rejected.push(Rejection {
                field: format!("{payload}[{i}].{}", b.name),
                value: b.value,
                rule: b.rule,
                reason: b.reason,
                time_ns: utc(t).ok().map(|u| u.0),
            }),
        }
    }
    out
}

/// Converts a batch, checking that it belongs to `agent_id`; the first invalid point fails the
/// whole batch. For local output and tests; the collector uses [`convert_batch_points`].
pub fn convert_batch(agent_id: &str, b: v1::Batch) -> Result<Batch, InvalidField> {
    let c = convert_batch_points(agent_id, b)?;
    match c.rejected.into_iter().next() {
        Some(r) => Err(invalid(r.field, r.reason)),
        None => Ok(c.batch),
    }
}

/// Converts a batch point by point: an invalid point is left out and recorded in
/// [`Converted::rejected`] with its field, value and rule, and the rest of the batch converts.
/// Only a batch that is not this agent's, or has no sequence, fails as a whole.
pub fn convert_batch_points(agent_id: &str, b: v1::Batch) -> Result<Converted, InvalidField> {
    if b.agent_id != agent_id {
        return Err(invalid("batch.agent_id", format!("`{}` differs from the stream's Hello agent id `{agent_id}`", b.agent_id)));
    }
    if b.sequence == 0 {
        return Err(invalid("batch.sequence", "must be at least 1"));
    }
    let mut rejected = Vec::new();
    let power = each("power", b.power, &mut rejected, |p| p.time_ns, |_| Ok(()), convert_power);
    let temperature = each("temperature", b.temperature, &mut rejected, |t| t.time_ns, |_| Ok(()), convert_temperature);
    let probe_runs = each("probe_runs", b.probe_runs, &mut rejected, |r| r.start_ns, check_probe_run, Ok);
    let power_state_changes = each(
        "power_state_changes",
        b.power_state_changes,
        &mut rejected,
        |c| c.time_ns,
        |c| {
            time("time_ns", c.time_ns)?;
            tag("device", &c.device)?;
            if v1::PowerStateOutcome::try_from(c.outcome).unwrap_or_default() == v1::PowerStateOutcome::Unspecified {
                return Err(bad("outcome", c.outcome, Rule::Unspecified, "must be set"));
            }
            Ok(())
        },
        Ok,
    );
    let events = each(
        "events",
        b.events,
        &mut rejected,
        |e| e.time_ns,
        |e| {
            time("time_ns", e.time_ns)?;
            tag("kind", &e.kind)?;
            opt_tag("device", &e.device)?;
            if v1::Severity::try_from(e.severity).unwrap_or_default() == v1::Severity::Unspecified {
                return Err(bad("severity", e.severity, Rule::Unspecified, "must be set"));
            }
            Ok(())
        },
        Ok,
    );
    let nvme_smart = each(
        "nvme_smart",
        b.nvme_smart,
        &mut rejected,
        |s| s.time_ns,
        |s| {
            time("time_ns", s.time_ns)?;
            tag("device", &s.device)?;
            opt_tag("serial", &s.serial)?;
            // Absent (None) is allowed: the drive or tool did not report it.
            opt_num("composite_celsius", s.composite_celsius)?;
            Ok(())
        },
        Ok,
    );
    let electrical = each(
        "electrical",
        b.electrical,
        &mut rejected,
        |s| s.time_ns,
        |s| {
            time("time_ns", s.time_ns)?;
            tag("source", &s.source)?;
            tag("chip", &s.chip)?;
            tag("channel", &s.channel)?;
            match (s.volts, s.amperes) {
                (Some(v), None) => num("volts", v).map(drop),
                (None, Some(a)) => num("amperes", a).map(drop),
                (v, a) => Err(bad("volts", format!("{v:?}/{a:?}"), Rule::Missing, "exactly one of volts and amperes must be set")),
            }
        },
        Ok,
    );
    let idle_profiles = each(
        "idle_profiles",
        b.idle_profiles,
        &mut rejected,
        |p| p.time_ns,
        |p| {
            time("time_ns", p.time_ns)?;
            tag("device", &p.device)?;
            tag("model", &p.model)?;
            for (name, v) in [("window_s", Some(p.window_s)), ("median_w", Some(p.median_w)), ("spread_w", Some(p.spread_w))].into_iter().chain([
                ("activity_period_s", p.activity_period_s),
                ("activity_correlation", p.activity_correlation),
                ("activity_energy_j", p.activity_energy_j),
            ]) {
                opt_num(name, v)?;
            }
            Ok(())
        },
        Ok,
    );
    Ok(Converted {
        batch: Batch {
            agent_id: b.agent_id,
            sequence: b.sequence,
            power,
            temperature,
            probe_runs,
            power_state_changes,
            events,
            nvme_smart,
            electrical,
            idle_profiles,
        },
        rejected,
    })
}

fn convert_power(p: v1::PowerSample) -> Result<PowerSample, Bad> {
    tag("source", &p.source)?;
    tag("zone", &p.zone)?;
    opt_tag("scope", &p.scope)?;
    let watts = opt_num("watts", p.watts)?.map(Watts);
    let joules = opt_num("joules", p.joules)?.map(Joules);
    if watts.is_none() && joules.is_none() {
        return Err(bad("watts", "none", Rule::Missing, "a power sample needs watts or joules"));
    }
    if let Some(j) = joules.filter(|j| j.0 < 0.0) {
        return Err(bad("joules", j.0, Rule::OutOfRange, "energy in an interval cannot be negative"));
    }
    // Full-rate points overlap the aggregate stream in time: joules on both would make
    // SUM(joules) over a window count that energy twice.
    if let Some(j) = joules.filter(|_| p.full_rate) {
        return Err(bad("joules", j.0, Rule::Inconsistent, "a full-rate sample carries watts only (the window aggregates carry the joules)"));
    }
    Ok(PowerSample {
        time: time("time_ns", p.time_ns)?,
        method: method(p.method).map_err(|r| bad("method", p.method, Rule::Unspecified, r))?,
        watts,
        joules,
        interval_ns: u64::try_from(p.interval_ns).map_err(|_| bad("interval_ns", p.interval_ns, Rule::OutOfRange, "cannot be negative"))?,
        min_watts: opt_num("min_watts", p.min_watts)?.map(Watts),
        max_watts: opt_num("max_watts", p.max_watts)?.map(Watts),
        readings: p.readings,
        full_rate: p.full_rate,
        flags: power_flags(p.flags)?,
        source: p.source,
        zone: p.zone,
        scope: p.scope,
    })
}

fn convert_temperature(t: v1::TemperatureSample) -> Result<TemperatureSample, Bad> {
    tag("source", &t.source)?;
    tag("device", &t.device)?;
    tag("sensor", &t.sensor)?;
    let c = num("celsius", t.celsius)?;
    // Below absolute zero or above 500 °C is a decoding bug (K vs °C vs m°C), not a reading.
    if !(-273.15..=500.0).contains(&c) {
        return Err(bad("celsius", c, Rule::OutOfRange, format!("{c} °C is outside -273.15..500; check the unit")));
    }
    Ok(TemperatureSample { time: time("time_ns", t.time_ns)?, source: t.source, device: t.device, sensor: t.sensor, celsius: Celsius(c) })
}

fn check_probe_run(r: &v1::ProbeRun) -> Result<(), Bad> {
    tag("run_id", &r.run_id)?;
    tag("device", &r.device)?;
    opt_tag("model", &r.model)?;
    tag("bench", &r.bench)?;
    tag("experiment", &r.experiment)?;
    tag("pattern", &r.pattern)?;
    // Optional tag: absent (empty) when the agent does not know it, else a valid tag value.
    opt_tag("firmware", &r.firmware)?;
    time("start_ns", r.start_ns)?;
    time("end_ns", r.end_ns)?;
    if r.end_ns < r.start_ns {
        return Err(bad("end_ns", r.end_ns, Rule::Inconsistent, "ends before it starts"));
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
        num(name, v)?;
    }
    for (name, v) in r.energy_fields().into_iter().chain(r.sweep_power_fields()) {
        opt_num(name, v)?;
    }
    if let Some(c) = opt_num("energy_coverage", r.energy_coverage)? {
        if !(0.0..=1.0).contains(&c) {
            return Err(bad("energy_coverage", c, Rule::OutOfRange, "a share of the run's time, 0 to 1"));
        }
    }
    for (name, t) in [("energy_start_ns", r.energy_start_ns), ("energy_end_ns", r.energy_end_ns)] {
        if let Some(t) = t {
            time(name, t)?;
        }
    }
    if let (Some(s), Some(e)) = (r.energy_start_ns, r.energy_end_ns) {
        if e < s {
            return Err(bad("energy_end_ns", e, Rule::Inconsistent, "the run ends in the power trace before it starts"));
        }
    }
    Ok(())
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

    /// A valid probe run for the tests that change one field of it.
    fn probe_run() -> v1::ProbeRun {
        v1::ProbeRun {
            run_id: "1-0".into(),
            device: "nvme0n1".into(),
            bench: "granularity".into(),
            experiment: "granularity/RR".into(),
            pattern: "RR".into(),
            start_ns: 1_700_000_000_000_000_000,
            end_ns: 1_700_000_000_100_000_000,
            ..Default::default()
        }
    }

    #[test]
    fn probe_run_firmware_is_optional_but_checked_when_present() {
        let run = |fw: &str| v1::ProbeRun { firmware: fw.into(), ..probe_run() };
        let b = |fw: &str| v1::Batch { agent_id: "a1".into(), sequence: 1, probe_runs: vec![run(fw)], ..Default::default() };
        assert!(convert_batch("a1", b("")).is_ok());
        assert!(convert_batch("a1", b("2B2QEXM7")).is_ok());
        let e = convert_batch("a1", b("FW\n1")).unwrap_err();
        assert_eq!((e.field.as_str(), e.reason.as_str()), ("probe_runs[0].firmware", "contains control characters"));
    }

    #[test]
    fn a_runs_energy_coverage_is_a_share_of_its_time() {
        let run = |c: f64| v1::ProbeRun { energy_coverage: Some(c), energy_low_confidence: Some(c < 0.99), ..probe_run() };
        let b = |c: f64| v1::Batch { agent_id: "a1".into(), sequence: 1, probe_runs: vec![run(c)], ..Default::default() };
        assert!(convert_batch("a1", b(0.0)).is_ok() && convert_batch("a1", b(0.4)).is_ok() && convert_batch("a1", b(1.0)).is_ok());
        let e = convert_batch("a1", b(1.5)).unwrap_err();
        assert_eq!((e.field.as_str(), e.reason.as_str()), ("probe_runs[0].energy_coverage", "a share of the run's time, 0 to 1"));
        assert_eq!(convert_batch("a1", b(f64::NAN)).unwrap_err().field, "probe_runs[0].energy_coverage");
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
        b.temperature.push(v1::TemperatureSample { time_ns: 5, source: "hwmon".into(), device: "nvme0".into(), sensor: "Composite".into(), celsius: 49850.0 });
        let e = convert_batch("a1", b).unwrap_err();
        assert_eq!(e.field, "temperature[0].celsius");
    }

    #[test]
    fn a_bad_point_is_left_out_alone_with_its_field_value_and_rule() {
        let t = |i: i64, c: f64| v1::TemperatureSample {
            time_ns: 1_700_000_000_000_000_000 + i,
            source: "hwmon".into(),
            device: "nvme0".into(),
            sensor: "Composite".into(),
            celsius: c,
        };
        let mut b = batch(vec![sample()]);
        b.temperature = vec![t(0, 41.0), t(1, 600.0), t(2, 42.0)];
        b.events.push(v1::Event { time_ns: 7, kind: "k".into(), severity: 0, ..Default::default() });
        b.power.push(v1::PowerSample { zone: "end\\".into(), ..sample() });
        let c = convert_batch_points("a1", b).unwrap();
        assert_eq!(c.batch.temperature.iter().map(|t| t.celsius.0).collect::<Vec<_>>(), [41.0, 42.0]);
        assert_eq!(c.batch.power.len(), 1);
        assert_eq!(c.batch.events.len(), 0);
        let got: Vec<(&str, &str, Rule, Option<i64>)> = c.rejected.iter().map(|r| (r.field.as_str(), r.value.as_str(), r.rule, r.time_ns)).collect();
        assert_eq!(
            got,
            [
                ("power[1].zone", "\"end\\\\\"", Rule::BadTag, Some(1_700_000_000_000_000_000)),
                ("temperature[1].celsius", "600", Rule::OutOfRange, Some(1_700_000_000_000_000_001)),
                ("events[0].severity", "0", Rule::Unspecified, Some(7)),
            ]
        );
        assert_eq!(c.rejected[1].field_name(), "temperature.celsius");
        assert_eq!(c.rejected[1].to_string(), "temperature[1].celsius = 600: 600 °C is outside -273.15..500; check the unit");
        // The strict form fails on the first.
        assert_eq!(convert_batch("a1", batch(vec![v1::PowerSample { zone: "end\\".into(), ..sample() }])).unwrap_err().field, "power[0].zone");
    }

    #[test]
    fn power_flags_are_words_in_canonical_order() {
        let flags = |f: &[&str]| v1::PowerSample { flags: f.iter().map(|s| s.to_string()).collect(), ..sample() };
        let b = convert_batch("a1", batch(vec![flags(&["deactivated", "estimated", "deactivated"])])).unwrap();
        assert_eq!(b.power[0].flags, vec!["deactivated".to_string(), "estimated".into()]);
        assert_eq!(convert_batch("a1", batch(vec![sample()])).unwrap().power[0].flags, Vec::<String>::new());
        let c = convert_batch_points("a1", batch(vec![flags(&["a,b"]), flags(&["Deactivated"]), flags(&[""]), flags(&["x"; 9])])).unwrap();
        let got: Vec<(&str, &str, Rule)> = c.rejected.iter().map(|r| (r.field.as_str(), r.value.as_str(), r.rule)).collect();
        assert_eq!(
            got,
            [
                ("power[0].flags", "\"a,b\"", Rule::OutOfRange),
                ("power[1].flags", "\"Deactivated\"", Rule::OutOfRange),
                ("power[2].flags", "\"\"", Rule::OutOfRange),
                ("power[3].flags", "9", Rule::OutOfRange),
            ]
        );
        assert_eq!(c.rejected[0].reason, "a flag is one lowercase word ([a-z0-9_], 1 to 32 bytes)");
    }

    #[test]
    fn labels_are_bounded_and_cannot_shadow_schema_tags() {
        assert!(check_label("rack", "r12").is_ok());
        assert_eq!(check_label("host", "x").unwrap_err().field, "labels.host");
        assert!(check_label("Rack", "x").is_err());
        assert!(check_label("rack", "").is_err());
        let e = check_label("site", "end\\").unwrap_err();
        assert_eq!(e.field, "labels.site");
        assert!(e.reason.starts_with("ends in a backslash"), "{}", e.reason);
        assert!(check_agent_id("id", "node-1.dc_2").is_ok());
        assert!(check_agent_id("id", "node 1").is_err());
    }
}
