//! The collector's hot path: a batch's lines written straight into strings, without a `Point` per
//! sample. The output is byte-identical to [`schema::batch_points`] + [`Point::write_line`]
//! (asserted by the tests below and by the `ingest_message` fuzz target). Power and temperature
//! samples, nearly all of the volume, take the fast path; anything else, and any sample the fast
//! path cannot prove encodable, goes through `schema` as before. To add a fast measurement: a
//! [`Template`] for its per-sample tag keys and a loop in [`BatchEncoder::encode`].

use crate::domain::{Batch, PowerSample, TemperatureSample};
use crate::lineproto::{check_key, escape, push_float, push_int, LineError, Point};
use crate::schema::{batch_points, power_point, record_points, temperature_point, HostTags, POWER, TEMPERATURE};

const TAG_SPECIAL: &[char] = &[',', '=', ' '];

/// A measurement's tag section with the host's tags already escaped and sorted in: what stays is
/// to fill in the per-sample values (slots).
#[derive(Debug, Clone)]
struct Template {
    /// Escaped measurement name.
    head: String,
    items: Vec<Item>,
    /// The host's tags are not encodable (a bad label key): every point takes the slow path and
    /// fails there with the usual error.
    broken: bool,
}

#[derive(Debug, Clone)]
enum Item {
    /// `,key=value` of a host tag, escaped.
    Static(String),
    /// `,key=` of a per-sample tag, escaped; the value is the sample's `slot`-th tag.
    Slot(usize, String),
}

impl Template {
    /// Orders tags as `Point::write_line` does: by key bytes, stable over the insertion order
    /// host, labels (BTreeMap order), then the sample's own tags.
    fn new(measurement: &str, host: &HostTags, slots: &[&str]) -> Template {
        let mut keyed: Vec<(&str, Option<&str>, Option<usize>)> = Vec::new();
        keyed.push(("host", Some(host.host.as_str()), None));
        for (k, v) in &host.labels {
            keyed.push((k.as_str(), Some(v.as_str()), None));
        }
        for (i, k) in slots.iter().enumerate() {
            keyed.push((k, None, Some(i)));
        }
        // Point::tag skips empty values.
        keyed.retain(|(_, v, _)| v.is_none_or(|v| !v.is_empty()));
        keyed.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let mut broken = false;
        let mut items = Vec::with_capacity(keyed.len());
        for (k, v, slot) in keyed {
            broken |= check_key(measurement, k).is_err();
            let mut s = String::from(",");
            escape(&mut s, k, TAG_SPECIAL);
            s.push('=');
            match (v, slot) {
                (Some(v), _) => {
                    escape(&mut s, v, TAG_SPECIAL);
                    items.push(Item::Static(s));
                }
                (None, Some(i)) => items.push(Item::Slot(i, s)),
                (None, None) => {}
            }
        }
        let mut head = String::new();
        escape(&mut head, measurement, &[',', ' ']);
        Template { head, items, broken }
    }

    /// Writes `measurement,tags` for one sample; false (nothing written) when the host's tags need
    /// the slow path's checks.
    fn write_tags(&self, out: &mut String, values: &[&str]) -> bool {
        if self.broken {
            return false;
        }
        out.push_str(&self.head);
        for item in &self.items {
            match item {
                Item::Static(s) => out.push_str(s),
                Item::Slot(i, key) => {
                    let v = values[*i];
                    if !v.is_empty() {
                        out.push_str(key);
                        escape(out, v, TAG_SPECIAL);
                    }
                }
            }
        }
        true
    }
}

/// Encodes batches of one agent stream. Build once per stream (after its Hello), reuse per batch.
#[derive(Debug, Clone)]
pub struct BatchEncoder {
    tags: HostTags,
    power: Template,
    temperature: Template,
}

/// Per-sample tag keys, in the order `schema::batch_points` adds them (`budget` last, after
/// them, as [`BatchEncoder::encode_tagged`] adds it on the slow path).
const POWER_SLOTS: &[&str] = &["source", "zone", "scope", "method", "rate", BUDGET];
const TEMPERATURE_SLOTS: &[&str] = &["source", "device", "sensor"];

/// The tag key of [`BudgetTag`].
pub const BUDGET: &str = "budget";

/// The collector's `budget` tag on a host's power points (docs/schema.md, `power`): `value` (the
/// host's tier, e.g. `wall`) on the points whose scope is one of `scopes`, nothing on the others.
/// Decided by the collector per host; the agent never sends it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BudgetTag {
    pub value: String,
    pub scopes: Vec<String>,
}

impl BudgetTag {
    /// The tag's value for a point of `scope`: empty (no tag) outside the tier.
    pub fn value_for(&self, scope: &str) -> &str {
        if self.scopes.iter().any(|s| s == scope) {
            &self.value
        } else {
            ""
        }
    }
}

impl BatchEncoder {
    pub fn new(tags: &HostTags) -> BatchEncoder {
        BatchEncoder { power: Template::new(POWER, tags, POWER_SLOTS), temperature: Template::new(TEMPERATURE, tags, TEMPERATURE_SLOTS), tags: tags.clone() }
    }

    /// Appends one line (ending in `\n`) per point of `b` to `lines`, in `batch_points` order;
    /// points that cannot be encoded are skipped and returned as errors.
    pub fn encode(&self, b: &Batch, lines: &mut Vec<String>) -> Vec<LineError> {
        self.encode_tagged(b, lines, None)
    }

    /// [`Self::encode`], with the `budget` tag on the power points `budget` selects: each line is
    /// that of `power_point` plus `.tag("budget", …)`.
    pub fn encode_tagged(&self, b: &Batch, lines: &mut Vec<String>, budget: Option<&BudgetTag>) -> Vec<LineError> {
        let mut errors = Vec::new();
        lines.reserve(b.len());
        for s in &b.power {
            let tier = budget.map(|t| t.value_for(&s.scope)).unwrap_or_default();
            let mut line = String::with_capacity(160);
            if self.power_line(s, tier, &mut line) {
                lines.push(line);
            } else {
                write_points(&[power_point(s, &self.tags).tag(BUDGET, tier)], lines, &mut errors);
            }
        }
        for t in &b.temperature {
            let mut line = String::with_capacity(128);
            if self.temperature_line(t, &mut line) {
                lines.push(line);
            } else {
                write_points(&[temperature_point(t, &self.tags)], lines, &mut errors);
            }
        }
        let mut rest = Vec::new();
        record_points(b, &self.tags, &mut rest);
        write_points(&rest, lines, &mut errors);
        errors
    }

    fn power_line(&self, s: &PowerSample, budget: &str, out: &mut String) -> bool {
        let fields_finite =
            [s.watts.map(|w| w.0), s.joules.map(|j| j.0), s.min_watts.map(|w| w.0), s.max_watts.map(|w| w.0)].iter().all(|v| v.is_none_or(f64::is_finite));
        if !fields_finite || (s.watts.is_none() && s.joules.is_none()) {
            return false;
        }
        // An empty slot writes no tag, as `Point::tag` skips empty values: aggregates stay untagged.
        let rate = if s.full_rate { crate::schema::FULL_RATE } else { "" };
        if !self.power.write_tags(out, &[&s.source, &s.zone, &s.scope, s.method.as_str(), rate, budget]) {
            return false;
        }
        let mut sep = ' ';
        let mut field = |out: &mut String, key: &str| {
            out.push(sep);
            out.push_str(key);
            out.push('=');
            sep = ',';
        };
        if let Some(w) = s.watts {
            field(out, "watts");
            push_float(out, w.0);
        }
        if let Some(j) = s.joules {
            field(out, "joules");
            push_float(out, j.0);
        }
        if s.interval_ns > 0 {
            field(out, "interval_ns");
            // Point::uint: always an integer (saturating), so the field's type never changes.
            push_int(out, i64::try_from(s.interval_ns).unwrap_or(i64::MAX));
            out.push('i');
        }
        if let (Some(lo), Some(hi)) = (s.min_watts, s.max_watts) {
            field(out, "min_watts");
            push_float(out, lo.0);
            field(out, "max_watts");
            push_float(out, hi.0);
            field(out, "readings");
            push_int(out, s.readings);
            out.push('i');
        }
        if !s.flags.is_empty() {
            field(out, "flags");
            out.push('"');
            // Flags are checked words (domain::power_flags), but escape as Point::write_line does.
            for (i, f) in s.flags.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                escape(out, f, &['"', '\\']);
            }
            out.push('"');
        }
        end_line(out, s.time.0);
        true
    }

    fn temperature_line(&self, t: &TemperatureSample, out: &mut String) -> bool {
        if !t.celsius.0.is_finite() || !self.temperature.write_tags(out, &[&t.source, &t.device, &t.sensor]) {
            return false;
        }
        out.push_str(" celsius=");
        push_float(out, t.celsius.0);
        end_line(out, t.time.0);
        true
    }
}

fn end_line(out: &mut String, time_ns: i64) {
    out.push(' ');
    push_int(out, time_ns);
    out.push('\n');
}

fn write_points(points: &[Point], lines: &mut Vec<String>, errors: &mut Vec<LineError>) {
    for p in points {
        let mut line = String::new();
        match p.write_line(&mut line) {
            Ok(()) => lines.push(line),
            Err(e) => errors.push(e),
        }
    }
}

/// The reference encoding the fast path must equal: every point of `batch_points`, encodable or not.
pub fn reference_lines(b: &Batch, tags: &HostTags) -> (Vec<String>, Vec<LineError>) {
    let (mut lines, mut errors) = (Vec::new(), Vec::new());
    write_points(&batch_points(b, tags), &mut lines, &mut errors);
    (lines, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Method;
    use crate::units::{Celsius, Joules, UnixNanos, Watts};
    use crate::v1;

    fn power(source: &str, zone: &str, scope: &str) -> PowerSample {
        PowerSample {
            time: UnixNanos(1_700_000_000_000_000_001),
            source: source.into(),
            zone: zone.into(),
            scope: scope.into(),
            method: Method::Measured,
            watts: Some(Watts(12.5)),
            joules: Some(Joules(3.0)),
            interval_ns: 250_000_000,
            min_watts: Some(Watts(1e-7)),
            max_watts: Some(Watts(1e21)),
            readings: 7,
            full_rate: false,
            flags: Vec::new(),
            // Not stored in InfluxDB (SUM(joules) holds it): no field in any line below.
            joules_total: Some(Joules(1234.5)),
        }
    }

    fn temp(device: &str, sensor: &str) -> TemperatureSample {
        TemperatureSample {
            time: UnixNanos(1_700_000_000_000_000_002),
            source: "hwmon".into(),
            device: device.into(),
            sensor: sensor.into(),
            celsius: Celsius(49.85),
        }
    }

    fn batch() -> Batch {
        Batch {
            agent_id: "a1".into(),
            sequence: 3,
            power: vec![
                power("rapl", "package-0", "package"),
                PowerSample { flags: vec!["deactivated".into(), "estimated".into()], ..power("hwmon", "ina3221 ch 1", "") },
                PowerSample { watts: None, interval_ns: u64::MAX, min_watts: None, ..power("rapl", "psys", "psys") },
                // Not encodable: the slow path reports it, the fast path must skip it the same way.
                PowerSample { watts: Some(Watts(f64::NAN)), ..power("rapl", "dram", "dram") },
                PowerSample { joules: None, min_watts: None, full_rate: true, ..power("hwmon", "ina226/power1", "rail") },
            ],
            temperature: vec![temp("nvme0", "Composite"), temp("coretemp,isa=0", "Package id 0"), temp("nvme1", "bad\nsensor"), temp("S1\\", "x")],
            events: vec![v1::Event { time_ns: 5, kind: "critical_warning".into(), severity: 3, message: "hot".into(), ..Default::default() }],
            probe_runs: Vec::new(),
            power_state_changes: Vec::new(),
            // Records take the reference path inside the fast encoder too: absent readings must
            // leave the same (missing) fields in both.
            nvme_smart: vec![
                v1::NvmeSmart { time_ns: 9, device: "nvme0".into(), composite_celsius: Some(40.0), data_units_read: Some(0), ..Default::default() },
                v1::NvmeSmart { time_ns: 10, device: "nvme0".into(), media_errors: Some(3), ..Default::default() },
            ],
            electrical: Vec::new(),
            idle_profiles: Vec::new(),
            drive_power_modes: Vec::new(),
            drive_identities: Vec::new(),
            efficiency: Vec::new(),
            joules_total_start: Some(UnixNanos(1_600_000_000_000_000_000)),
        }
    }

    fn tags(labels: &[(&str, &str)]) -> HostTags {
        HostTags { host: "a1".into(), labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() }
    }

    #[test]
    fn identical_to_points_with_labels_sorting_between_the_sample_tags() {
        for t in [tags(&[]), tags(&[("rack", "r 7"), ("role", "storage"), ("aa", "first"), ("site", "")]), tags(&[("zzz", "last")])] {
            let b = batch();
            let mut fast = Vec::new();
            let fast_errors = BatchEncoder::new(&t).encode(&b, &mut fast);
            let (reference, errors) = reference_lines(&b, &t);
            assert_eq!(fast, reference, "tags {t:?}");
            // NaN != NaN: compare the messages.
            let text = |e: &[LineError]| e.iter().map(ToString::to_string).collect::<Vec<_>>();
            assert_eq!(text(&fast_errors), text(&errors));
            assert_eq!(errors.len(), 1, "the NaN watts");
        }
    }

    #[test]
    fn exact_lines() {
        let t = tags(&[("rack", "r7")]);
        let mut lines = Vec::new();
        BatchEncoder::new(&t).encode(&batch(), &mut lines);
        assert_eq!(
            lines[0],
            "power,host=a1,method=measured,rack=r7,scope=package,source=rapl,zone=package-0 watts=12.5,joules=3,interval_ns=250000000i,min_watts=0.0000001,max_watts=1000000000000000000000,readings=7i 1700000000000000001\n"
        );
        assert_eq!(lines[1], "power,host=a1,method=measured,rack=r7,source=hwmon,zone=ina3221\\ ch\\ 1 watts=12.5,joules=3,interval_ns=250000000i,min_watts=0.0000001,max_watts=1000000000000000000000,readings=7i,flags=\"deactivated,estimated\" 1700000000000000001\n");
        assert_eq!(
            lines[2],
            "power,host=a1,method=measured,rack=r7,scope=psys,source=rapl,zone=psys joules=3,interval_ns=9223372036854775807i 1700000000000000001\n"
        );
        assert_eq!(lines[5], "temperature,device=coretemp\\,isa\\=0,host=a1,rack=r7,sensor=Package\\ id\\ 0,source=hwmon celsius=49.85 1700000000000000002\n");
        assert_eq!(lines[6], "temperature,device=nvme1,host=a1,rack=r7,sensor=bad\\nsensor,source=hwmon celsius=49.85 1700000000000000002\n");
        assert_eq!(lines[7], "temperature,device=S1\\\\,host=a1,rack=r7,sensor=x,source=hwmon celsius=49.85 1700000000000000002\n");
        assert_eq!(lines[3], "power,host=a1,method=measured,rack=r7,rate=full,scope=rail,source=hwmon,zone=ina226/power1 watts=12.5,interval_ns=250000000i 1700000000000000001\n");
        assert_eq!(lines.len(), 11, "4 power (the NaN one dropped), 4 temperature, 1 event, 2 nvme_smart");
        assert_eq!(lines[9], "nvme_smart,device=nvme0,host=a1,rack=r7 critical_warning=0i,composite_celsius=40,data_units_read=0i 9\n");
        assert_eq!(lines[10], "nvme_smart,device=nvme0,host=a1,rack=r7 critical_warning=0i,media_errors=3i 10\n");
    }

    #[test]
    fn the_budget_tag_goes_on_the_selected_scopes_only_on_both_paths() {
        let t = tags(&[("rack", "r7")]);
        let budget = BudgetTag { value: "rapl_nvme".into(), scopes: vec!["psys".into(), "rail".into()] };
        let b = batch();
        let mut fast = Vec::new();
        let errors = BatchEncoder::new(&t).encode_tagged(&b, &mut fast, Some(&budget));
        assert_eq!(errors.len(), 1, "the NaN watts");
        let mut reference = Vec::new();
        let mut ref_errors = Vec::new();
        let points: Vec<Point> = b.power.iter().map(|s| power_point(s, &t).tag(BUDGET, budget.value_for(&s.scope))).collect();
        write_points(&points, &mut reference, &mut ref_errors);
        assert_eq!(fast[..4], reference[..], "power lines");
        assert_eq!(fast[0], "power,host=a1,method=measured,rack=r7,scope=package,source=rapl,zone=package-0 watts=12.5,joules=3,interval_ns=250000000i,min_watts=0.0000001,max_watts=1000000000000000000000,readings=7i 1700000000000000001\n");
        assert_eq!(fast[2], "power,budget=rapl_nvme,host=a1,method=measured,rack=r7,scope=psys,source=rapl,zone=psys joules=3,interval_ns=9223372036854775807i 1700000000000000001\n");
        assert_eq!(fast[3], "power,budget=rapl_nvme,host=a1,method=measured,rack=r7,rate=full,scope=rail,source=hwmon,zone=ina226/power1 watts=12.5,interval_ns=250000000i 1700000000000000001\n");
        // A bad label key: the slow path, with the same error for every point as untagged.
        let bad = tags(&[("bad key", "x")]);
        let mut lines = Vec::new();
        let errors = BatchEncoder::new(&bad).encode_tagged(&b, &mut lines, Some(&budget));
        assert_eq!(errors.len(), BatchEncoder::new(&bad).encode(&b, &mut Vec::new()).len());
    }

    #[test]
    fn a_bad_label_key_fails_every_point_as_the_slow_path_does() {
        let t = tags(&[("_bad", "x")]);
        let mut fast = Vec::new();
        let errors = BatchEncoder::new(&t).encode(&batch(), &mut fast);
        let (reference, reference_errors) = reference_lines(&batch(), &t);
        assert_eq!(fast, reference);
        assert!(fast.is_empty());
        assert_eq!(errors.len(), reference_errors.len());
        assert_eq!(errors.len(), 12, "5 power, 4 temperature, 1 event, 2 nvme_smart");
    }
}
