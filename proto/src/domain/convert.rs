//! The point-by-point conversion of a `v1` batch into the domain types: every point is checked,
//! an invalid one is left out and recorded as a [`Rejection`] naming its field, value and [`Rule`],
//! and the rest of the batch converts. A new payload gets a check (or a `convert_*` function)
//! here and a line in [`convert_batch_points`]. Every point's timestamp is also checked against a
//! [`TimeWindow`] on the receiver's clock, and power against [`watts_range`] of its scope.

use super::{
    finite, invalid, method, tag_value, utc, Batch, InvalidField, PowerSample, TemperatureSample, DRIVE_POWER_MODES, EFFICIENCY_PROFILES, EFFICIENCY_VERDICTS,
    MAX_FLAGS, MAX_FLAG_BYTES,
};
use crate::units::{Celsius, Joules, UnixNanos, Watts};
use crate::v1;

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
    /// A timestamp further ahead of the receiver's clock than its [`TimeWindow`] allows.
    TimeAhead,
    /// A timestamp further behind the receiver's clock than its [`TimeWindow`] allows.
    TimeBehind,
}

impl Rule {
    pub const ALL: [Rule; 9] = [
        Rule::NotFinite,
        Rule::OutOfRange,
        Rule::BadTag,
        Rule::BadTime,
        Rule::Missing,
        Rule::Inconsistent,
        Rule::Unspecified,
        Rule::TimeAhead,
        Rule::TimeBehind,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Rule::NotFinite => "not_finite",
            Rule::OutOfRange => "out_of_range",
            Rule::BadTag => "bad_tag",
            Rule::BadTime => "bad_time",
            Rule::Missing => "missing",
            Rule::Inconsistent => "inconsistent",
            Rule::Unspecified => "unspecified",
            Rule::TimeAhead => "time_ahead",
            Rule::TimeBehind => "time_behind",
        }
    }
}

/// The timestamps a receiver accepts, relative to its own clock: from `behind_ns` before `now_ns`
/// to `ahead_ns` after it (UTC ns). A point outside is refused with [`Rule::TimeAhead`] or
/// [`Rule::TimeBehind`], so that one reading stamped a year ahead (a host whose clock jumped)
/// never enters the store or the analyses that order readings by time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeWindow {
    pub now_ns: i64,
    pub ahead_ns: i64,
    pub behind_ns: i64,
}

impl TimeWindow {
    /// Accepts every valid timestamp (tools and tests that have no clock to compare with).
    pub const ANY: TimeWindow = TimeWindow { now_ns: 0, ahead_ns: i64::MAX, behind_ns: i64::MAX };

    fn check(&self, name: &'static str, t: i64) -> Result<(), Bad> {
        // An invalid timestamp (0, negative) is the other checks' `bad_time`, not a skew.
        if utc(t).is_err() {
            return Ok(());
        }
        let secs = |ns: i64| ns as f64 / 1e9;
        if t.saturating_sub(self.now_ns) > self.ahead_ns {
            let reason = format!(
                "{:.0} s ahead of the collector's clock, beyond the {:.0} s allowed (limits.max_time_ahead); check the host's clock (NTP)",
                secs(t.saturating_sub(self.now_ns)),
                secs(self.ahead_ns)
            );
            return Err(bad(name, t, Rule::TimeAhead, reason));
        }
        if self.now_ns.saturating_sub(t) > self.behind_ns {
            let reason = format!(
                "{:.0} s behind the collector's clock, beyond the {:.0} s allowed (limits.max_time_behind); check the host's clock (NTP)",
                secs(self.now_ns.saturating_sub(t)),
                secs(self.behind_ns)
            );
            return Err(bad(name, t, Rule::TimeBehind, reason));
        }
        Ok(())
    }
}

/// Readings down to this are a sensor's offset around zero (a shunt at idle) and are stored;
/// below it a power reading is a decoding bug.
pub const MIN_WATTS: f64 = -1.0;
/// The most one channel of a scope can draw, with room to spare: a drive (EDSFF E3.L is specified
/// up to 70 W), a CPU package and its parts (the largest server CPUs are rated 500 W), a platform
/// or rail, a whole host (a GPU server draws about 10 kW). A value beyond is a unit error (mW read
/// as W) or a wrapped counter, not a reading.
pub const MAX_WATTS: &[(&str, f64)] = &[
    ("drive", 200.0),
    ("core", 1_000.0),
    ("uncore", 1_000.0),
    ("dram", 1_000.0),
    ("package", 1_000.0),
    ("package_mmio", 1_000.0),
    ("package_hwmon", 1_000.0),
    ("psys", 5_000.0),
    ("rail", 5_000.0),
    ("psu_in", 50_000.0),
    ("psu_out", 50_000.0),
    ("wall", 50_000.0),
];
/// The bound of a scope [`MAX_WATTS`] does not list (`unknown`, a new one): the largest.
pub const MAX_WATTS_OTHER: f64 = 50_000.0;

/// The physical range of one power reading of `scope`, in W.
pub fn watts_range(scope: &str) -> (f64, f64) {
    let max = MAX_WATTS.iter().find(|(s, _)| *s == scope).map_or(MAX_WATTS_OTHER, |&(_, m)| m);
    (MIN_WATTS, max)
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

/// Where a batch's refused points go, and the timestamps its points may carry.
struct Refusals {
    rejected: Vec<Rejection>,
    window: TimeWindow,
}

impl Refusals {
    /// Checks every point of `items` with `check` and its timestamp against the window; a failing
    /// point is left out and recorded.
    fn each<T, U>(
        &mut self,
        payload: &str,
        items: Vec<T>,
        time_of: impl Fn(&T) -> (&'static str, i64),
        check: impl Fn(&T) -> Result<(), Bad>,
        convert: impl Fn(T) -> Result<U, Bad>,
    ) -> Vec<U> {
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let (name, t) = time_of(&item);
            match check(&item).and_then(|()| self.window.check(name, t)).and_then(|()| convert(item)) {
                Ok(u) => out.push(u),
                Err(b) => self.rejected.push(Rejection {
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
/// Only a batch that is not this agent's, or has no sequence, fails as a whole. Timestamps are
/// not compared with a clock ([`convert_batch_points_within`] does).
pub fn convert_batch_points(agent_id: &str, b: v1::Batch) -> Result<Converted, InvalidField> {
    convert_batch_points_within(agent_id, b, TimeWindow::ANY)
}

/// [`convert_batch_points`], refusing every point whose timestamp is outside `window`.
pub fn convert_batch_points_within(agent_id: &str, b: v1::Batch, window: TimeWindow) -> Result<Converted, InvalidField> {
    if b.agent_id != agent_id {
        return Err(invalid("batch.agent_id", format!("`{}` differs from the stream's Hello agent id `{agent_id}`", b.agent_id)));
    }
    if b.sequence == 0 {
        return Err(invalid("batch.sequence", "must be at least 1"));
    }
    let mut r = Refusals { rejected: Vec::new(), window };
    let at = |t: i64| ("time_ns", t);
    let power = r.each("power", b.power, |p| at(p.time_ns), |_| Ok(()), convert_power);
    let temperature = r.each("temperature", b.temperature, |t| at(t.time_ns), |_| Ok(()), convert_temperature);
    // A run is checked at its start here, and at its ends against the window's future bound.
    let probe_runs = r.each("probe_runs", b.probe_runs, |p| ("start_ns", p.start_ns), |p| check_probe_run(p, &window), Ok);
    let power_state_changes = r.each("power_state_changes", b.power_state_changes, |c| at(c.time_ns), check_power_state_change, Ok);
    let events = r.each("events", b.events, |e| at(e.time_ns), check_event, Ok);
    let nvme_smart = r.each("nvme_smart", b.nvme_smart, |s| at(s.time_ns), check_nvme_smart, Ok);
    let electrical = r.each("electrical", b.electrical, |s| at(s.time_ns), check_electrical, Ok);
    let idle_profiles = r.each("idle_profiles", b.idle_profiles, |p| at(p.time_ns), check_idle_profile, Ok);
    let drive_power_modes = r.each("drive_power_modes", b.drive_power_modes, |m| at(m.time_ns), check_drive_power_mode, Ok);
    let drive_identities = r.each("drive_identities", b.drive_identities, |d| at(d.time_ns), check_drive_identity, Ok);
    let efficiency = r.each("efficiency", b.efficiency, |e| at(e.time_ns), check_efficiency, Ok);
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
            drive_power_modes,
            drive_identities,
            efficiency,
            // A start that is no UTC time is dropped, not the batch: the export then keeps its own.
            joules_total_start: utc(b.joules_total_start_ns).ok(),
        },
        rejected: r.rejected,
    })
}

fn check_power_state_change(c: &v1::PowerStateChange) -> Result<(), Bad> {
    time("time_ns", c.time_ns)?;
    tag("device", &c.device)?;
    if v1::PowerStateOutcome::try_from(c.outcome).unwrap_or_default() == v1::PowerStateOutcome::Unspecified {
        return Err(bad("outcome", c.outcome, Rule::Unspecified, "must be set"));
    }
    Ok(())
}

fn check_event(e: &v1::Event) -> Result<(), Bad> {
    time("time_ns", e.time_ns)?;
    tag("kind", &e.kind)?;
    opt_tag("device", &e.device)?;
    if v1::Severity::try_from(e.severity).unwrap_or_default() == v1::Severity::Unspecified {
        return Err(bad("severity", e.severity, Rule::Unspecified, "must be set"));
    }
    Ok(())
}

fn check_nvme_smart(s: &v1::NvmeSmart) -> Result<(), Bad> {
    time("time_ns", s.time_ns)?;
    tag("device", &s.device)?;
    opt_tag("serial", &s.serial)?;
    // Absent (None) is allowed: the drive or tool did not report it.
    opt_num("composite_celsius", s.composite_celsius)?;
    Ok(())
}

fn check_electrical(s: &v1::ElectricalSample) -> Result<(), Bad> {
    time("time_ns", s.time_ns)?;
    tag("source", &s.source)?;
    tag("chip", &s.chip)?;
    tag("channel", &s.channel)?;
    match (s.volts, s.amperes) {
        (Some(v), None) => num("volts", v).map(drop),
        (None, Some(a)) => num("amperes", a).map(drop),
        (v, a) => Err(bad("volts", format!("{v:?}/{a:?}"), Rule::Missing, "exactly one of volts and amperes must be set")),
    }
}

fn check_drive_power_mode(m: &v1::DrivePowerMode) -> Result<(), Bad> {
    time("time_ns", m.time_ns)?;
    tag("device", &m.device)?;
    opt_tag("serial", &m.serial)?;
    if !DRIVE_POWER_MODES.contains(&m.mode.as_str()) {
        return Err(bad("mode", &m.mode, Rule::Inconsistent, "must be one of active, idle, standby, sleep"));
    }
    Ok(())
}

/// An inventory entry's identity: a time and the tags its `inventory` point carries.
fn check_drive_identity(d: &v1::DriveIdentity) -> Result<(), Bad> {
    time("time_ns", d.time_ns)?;
    let Some(s) = &d.device else { return Err(bad("device", "absent", Rule::Missing, "must be set")) };
    tag("device.name", &s.name)?;
    opt_tag("device.model", &s.model)?;
    opt_tag("device.serial", &s.serial)
}

/// An efficiency phase: a known profile and verdict, the figures of a stable phase only, each
/// finite and in its physical range (mean power as a power reading's; ratios, rates, intervals and
/// half-widths not negative; the above-idle energies may be: a profile can draw less than idle).
fn check_efficiency(e: &v1::EfficiencyPhase) -> Result<(), Bad> {
    time("time_ns", e.time_ns)?;
    tag("device", &e.device)?;
    tag("model", &e.model)?;
    opt_tag("firmware", &e.firmware)?;
    if !EFFICIENCY_PROFILES.contains(&e.profile.as_str()) {
        return Err(bad("profile", shown(&e.profile), Rule::Inconsistent, format!("must be one of {}", EFFICIENCY_PROFILES.join(", "))));
    }
    if !EFFICIENCY_VERDICTS.contains(&e.verdict.as_str()) {
        return Err(bad("verdict", shown(&e.verdict), Rule::Inconsistent, format!("must be one of {}", EFFICIENCY_VERDICTS.join(", "))));
    }
    for (name, v) in [("interval_s", e.interval_s), ("max_deviation", e.max_deviation)] {
        if let Some(v) = opt_num(name, v)?.filter(|v| *v < 0.0) {
            return Err(bad(name, v, Rule::OutOfRange, "cannot be negative"));
        }
    }
    opt_num("trend_change", e.trend_change)?;
    let (lo, hi) = (MIN_WATTS, MAX_WATTS_OTHER);
    for (name, v) in e.metric_fields() {
        let Some(v) = opt_num(name, v)? else { continue };
        if e.verdict != "stable" {
            return Err(bad(name, v, Rule::Inconsistent, format!("a phase with verdict `{}` has no figures; only a stable phase does", e.verdict)));
        }
        if name == "watts" && !(lo..=hi).contains(&v) {
            return Err(bad(name, v, Rule::OutOfRange, format!("{v} W is outside {lo}..{hi} W; check the unit")));
        }
        let signed = name == "watts" || (name.ends_with("_above_idle") && !name.ends_with("_u95"));
        if !signed && v < 0.0 {
            return Err(bad(name, v, Rule::OutOfRange, "cannot be negative"));
        }
    }
    Ok(())
}

fn check_idle_profile(p: &v1::IdleProfile) -> Result<(), Bad> {
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
    check_watts(&p, watts, joules)?;
    // Full-rate points overlap the aggregate stream in time: joules on both would make
    // SUM(joules) over a window count that energy twice.
    if let Some(j) = joules.filter(|_| p.full_rate) {
        return Err(bad("joules", j.0, Rule::Inconsistent, "a full-rate sample carries watts only (the window aggregates carry the joules)"));
    }
    let joules_total = opt_num("joules_total", p.joules_total)?.map(Joules);
    if let Some(t) = joules_total.filter(|t| t.0 < 0.0 || joules.is_none()) {
        return Err(bad("joules_total", t.0, Rule::Inconsistent, "a running energy total goes with the sample's joules and cannot be negative"));
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
        joules_total,
        source: p.source,
        zone: p.zone,
        scope: p.scope,
    })
}

/// Watts (and the window's min, max and mean power) within the physical range of the scope.
fn check_watts(p: &v1::PowerSample, watts: Option<Watts>, joules: Option<Joules>) -> Result<(), Bad> {
    let (lo, hi) = watts_range(&p.scope);
    // NaN and infinities are `not_finite`, checked on their own.
    let out = |w: f64| w.is_finite() && !(lo..=hi).contains(&w);
    let why = |what: String| format!("{what} is outside {lo}..{hi} W for scope `{}`; check the unit", p.scope);
    for (name, w) in [("watts", watts.map(|w| w.0)), ("min_watts", p.min_watts), ("max_watts", p.max_watts)] {
        if let Some(w) = w.filter(|&w| out(w)) {
            return Err(bad(name, w, Rule::OutOfRange, why(format!("{w} W"))));
        }
    }
    if let Some(j) = joules.filter(|_| p.interval_ns > 0) {
        let mean = j.0 / (p.interval_ns as f64 / 1e9);
        if out(mean) {
            return Err(bad("joules", j.0, Rule::OutOfRange, why(format!("{} J over {} ns ({mean} W)", j.0, p.interval_ns))));
        }
    }
    Ok(())
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

fn check_probe_run(r: &v1::ProbeRun, window: &TimeWindow) -> Result<(), Bad> {
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
    window.check("end_ns", r.end_ns)?;
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
            window.check(name, t)?;
        }
    }
    if let (Some(s), Some(e)) = (r.energy_start_ns, r.energy_end_ns) {
        if e < s {
            return Err(bad("energy_end_ns", e, Rule::Inconsistent, "the run ends in the power trace before it starts"));
        }
    }
    Ok(())
}
