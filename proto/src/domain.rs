//! Domain types behind the wire format, and the checks that turn a `v1` message into one. Every
//! rejection names the field (`batch 7: power[3].watts: ...`), so an operator can find the sensor.
//! To accept a new payload: add its domain type here, its check or `convert_*` function in
//! `domain/convert.rs` (the point-by-point conversion), and its points in `schema.rs`.

use crate::lineproto::{check_tag_value as check_storable, TagValueProblem};
use crate::units::{Celsius, Joules, UnixNanos, Watts};
use crate::v1;
use std::collections::BTreeMap;

// The point-by-point conversion is its own file (this one was over 600 lines); its public items
// are re-exported here, where they were.
mod convert;
pub use convert::{
    convert_batch, convert_batch_points, convert_batch_points_within, watts_range, Converted, Rejection, Rule, TimeWindow, MAX_WATTS, MAX_WATTS_OTHER,
    MIN_WATTS,
};

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
    // `device_efficiency` tags.
    "profile",
    "verdict",
    "power_state",
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
    /// The agent's running sum of the zone's joules since the batch's `joules_total_start`
    /// (window aggregates of counters; absent from older agents).
    pub joules_total: Option<Joules>,
}

/// At most this many flags on one power sample, each at most [`MAX_FLAG_BYTES`] long.
pub const MAX_FLAGS: usize = 8;
pub const MAX_FLAG_BYTES: usize = 32;

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
    pub drive_power_modes: Vec<v1::DrivePowerMode>,
    /// Drives identified after the Hello (checked: time, `device.name` a tag value).
    pub drive_identities: Vec<v1::DriveIdentity>,
    /// Efficiency phases (checked: profile and verdict known, metrics in range, only on a
    /// stable phase).
    pub efficiency: Vec<v1::EfficiencyPhase>,
    /// When the power samples' `joules_total` started from 0 J (the agent's energy epoch); None
    /// from older agents.
    pub joules_total_start: Option<UnixNanos>,
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
            + self.drive_power_modes.len()
            + self.drive_identities.len()
            + self.efficiency.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Points a wire batch carries, counted before conversion (the collector's rate limit): the same
/// payloads as [`Batch::len`], so a new payload is counted in both or the compiler's field list
/// of `Batch` reminds the author.
pub fn wire_points(b: &v1::Batch) -> usize {
    b.power.len()
        + b.temperature.len()
        + b.probe_runs.len()
        + b.power_state_changes.len()
        + b.events.len()
        + b.nvme_smart.len()
        + b.electrical.len()
        + b.idle_profiles.len()
        + b.drive_power_modes.len()
        + b.drive_identities.len()
        + b.efficiency.len()
}

/// The power modes a `drive_power_modes` record may carry (smartctl's, in four words).
pub const DRIVE_POWER_MODES: [&str; 4] = ["active", "idle", "standby", "sleep"];

/// The profiles an `efficiency` record may name (docs/efficiency.md), in the preset's order.
pub const EFFICIENCY_PROFILES: [&str; 6] = ["ready_idle", "rand_read_4k", "rand_write_4k", "seq_read_128k", "seq_write_128k", "mixed_70_30_4k"];
/// The verdicts an `efficiency` record may carry; only `stable` carries metrics.
pub const EFFICIENCY_VERDICTS: [&str; 3] = ["stable", "unstable", "not_measured"];

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

#[cfg(test)]
mod tests;
