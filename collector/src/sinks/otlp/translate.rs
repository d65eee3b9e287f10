//! From the collector's checked data to OTLP data points ([`Translator`]), with the state the
//! cumulative sums need. An energy sample that carries the agent's `joules_total` is sent as that
//! total, started at the batch's `joules_total_start` (the agent's energy epoch): a function of
//! the data, so a batch resent to a restarted collector exports the same values (issue 38). From
//! older agents (no total) each counter series keeps a stable start time (its first interval's
//! start) and its running total in the collector's memory; a sample not newer than the series'
//! last one (a resent batch) is not added twice, but a restarted collector counts it again. Host totals (`hw.host.*`) come only from the points of the host's budget tier
//! (the `budget` tag of docs/schema.md), so overlapping scopes are never summed. A new payload is
//! a function here that pushes [`DataPoint`]s, called from [`Translator::batch`].

use crate::sinks::otlp::efficiency;
use crate::sinks::otlp::model::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use wattflip_proto::domain::{Batch, Hello, PowerSample};
use wattflip_proto::encoder::BudgetTag;
use wattflip_proto::schema::{HostTags, ThrottleEvent};
use wattflip_proto::v1;

/// A zone of the host's tier stops counting in `hw.host.power` once its newest point is this far
/// behind the host's newest tier point (the collector's tier choice uses the same bound:
/// `service::budget::SILENT_NS`, not imported: the service depends on the sinks, not back).
pub const SILENT_NS: i64 = 5 * 60 * 1_000_000_000;

/// One cumulative series: when it started, its total, and its newest sample's time.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Running {
    start_ns: i64,
    total: f64,
    last_ns: i64,
}

/// A zone of a host's tier: its newest sample.
#[derive(Debug, Clone, Copy, PartialEq)]
struct TierZone {
    time_ns: i64,
    watts: Option<f64>,
    /// A counter source (the sample carried joules).
    counter: bool,
    /// The agent's energy total carried by that sample.
    total: Option<f64>,
}

#[derive(Debug, Default)]
struct HostTotals {
    tier: String,
    zones: BTreeMap<String, TierZone>,
    /// Each tier zone's newest agent energy total, kept while the tier stays (a silent zone's
    /// energy does not leave the host's sum).
    totals: BTreeMap<String, f64>,
    energy: Option<Running>,
    last_power_ns: i64,
}

/// Translation state shared by every stream of the collector (behind the sink handle's mutex).
#[derive(Debug, Default)]
pub struct Translator {
    sums: HashMap<String, Running>,
    hosts: HashMap<String, HostTotals>,
    episodes: HashMap<String, BTreeSet<i64>>,
    /// Counter samples not newer than their series' newest (resent or late): not added again.
    pub stale_samples: u64,
}

fn series_key(host: &str, m: &MetricDef, attrs: &[(&'static str, String)]) -> String {
    let mut k = format!("{host}\u{0}{}", m.name);
    for (a, v) in attrs {
        k.push('\u{0}');
        k.push_str(a);
        k.push('=');
        k.push_str(v);
    }
    k
}

/// OTel `hw.type` of a power zone by its scope (docs/schema.md, *OTLP export*).
pub fn hw_type(scope: &str) -> &'static str {
    match scope {
        "package" | "package_mmio" | "package_hwmon" | "core" | "uncore" | "soc" => "cpu",
        "dram" => "memory",
        "drive" => "physical_disk",
        "psu_in" | "psu_out" | "rail" => "power_supply",
        "gpu" => "gpu",
        _ => "enclosure",
    }
}

/// The attributes of a power zone: `hw.id` `<source>:<zone>` (unique within the host), its type,
/// name and parent (the zone path's head: `rapl:package-0` for `package-0/core`), and wattflip's
/// scope, source and method, so a query keeps to one scope as the InfluxDB ones do, and the host's
/// tier (`wattflip.budget`, InfluxDB's `budget` tag) on the zones that make up its power.
fn power_attrs(s: &PowerSample, tier: &str) -> Vec<(&'static str, String)> {
    let mut a = vec![("hw.id", format!("{}:{}", s.source, s.zone)), ("hw.type", hw_type(&s.scope).to_string()), ("hw.name", s.zone.clone())];
    if let Some((parent, _)) = s.zone.rsplit_once('/') {
        a.push(("hw.parent", format!("{}:{parent}", s.source)));
    }
    if !tier.is_empty() {
        a.push(("wattflip.budget", tier.to_string()));
    }
    a.extend([("wattflip.method", s.method.as_str().to_string()), ("wattflip.scope", s.scope.clone()), ("wattflip.source", s.source.clone())]);
    a
}

impl Translator {
    /// Adds `delta` to the cumulative series and returns the point, or None when `time_ns` is not
    /// after the series' newest (counted in `stale_samples`). `start_ns`: where a new series starts.
    fn add(&mut self, host: &str, m: &'static MetricDef, attrs: Vec<(&'static str, String)>, time_ns: i64, start_ns: i64, delta: f64) -> Option<DataPoint> {
        let r = self.sums.entry(series_key(host, m, &attrs)).or_insert(Running { start_ns: start_ns.min(time_ns), total: 0.0, last_ns: i64::MIN });
        if time_ns <= r.last_ns {
            self.stale_samples += 1;
            return None;
        }
        r.total += delta;
        r.last_ns = time_ns;
        Some(DataPoint { metric: m, attrs, time_ns, start_ns: r.start_ns, value: r.total })
    }

    /// The agent's own total as the series' point, started at the agent's energy epoch
    /// (`start_ns`), or None when `time_ns` is not after the series' newest (a resend this
    /// collector sent already: the same value).
    fn set(&mut self, host: &str, m: &'static MetricDef, attrs: Vec<(&'static str, String)>, time_ns: i64, start_ns: i64, total: f64) -> Option<DataPoint> {
        let r = self.sums.entry(series_key(host, m, &attrs)).or_insert(Running { start_ns, total, last_ns: i64::MIN });
        if time_ns <= r.last_ns {
            self.stale_samples += 1;
            return None;
        }
        *r = Running { start_ns: start_ns.min(time_ns), total, last_ns: time_ns };
        Some(DataPoint { metric: m, attrs, time_ns, start_ns: r.start_ns, value: total })
    }

    /// A non-monotonic sum's point: its value as is, its start the series' first time.
    fn level(&mut self, host: &str, m: &'static MetricDef, attrs: Vec<(&'static str, String)>, time_ns: i64, value: f64) -> DataPoint {
        let r = self.sums.entry(series_key(host, m, &attrs)).or_insert(Running { start_ns: time_ns, total: 0.0, last_ns: i64::MIN });
        DataPoint { metric: m, attrs, time_ns, start_ns: r.start_ns, value }
    }

    /// The points of one checked batch of `tags.host`, whose power points of the scopes `budget`
    /// names make up the host's power, and the throttling episodes its analysis wrote.
    pub fn batch(&mut self, tags: &HostTags, b: &Batch, budget: Option<&BudgetTag>, episodes: &[ThrottleEvent]) -> Vec<DataPoint> {
        let mut out = Vec::new();
        self.power(&tags.host, &b.power, b.joules_total_start.map(|t| t.0), budget, &mut out);
        for t in &b.temperature {
            let attrs = vec![
                ("hw.id", format!("{}:{}/{}", t.source, t.device, t.sensor)),
                ("hw.type", "temperature".to_string()),
                ("hw.name", t.sensor.clone()),
                ("hw.parent", t.device.clone()),
                ("wattflip.source", t.source.clone()),
            ];
            out.push(DataPoint { metric: &HW_TEMPERATURE, attrs, time_ns: t.time.0, start_ns: 0, value: t.celsius.0 });
        }
        for s in &b.nvme_smart {
            self.smart(&tags.host, s, &mut out);
        }
        for r in &b.probe_runs {
            probe_run(r, &mut out);
        }
        for e in &b.efficiency {
            efficiency::phase_points(e, &mut out);
        }
        for e in episodes {
            self.episode(&tags.host, e, &mut out);
        }
        out
    }

    /// `hw.power` and `hw.energy` per zone (window aggregates only: full-rate points repeat them;
    /// the energy is the agent's `joules_total` from `epoch_ns` when it sent one), then the host
    /// totals from the tier's zones.
    fn power(&mut self, host: &str, power: &[PowerSample], epoch_ns: Option<i64>, budget: Option<&BudgetTag>, out: &mut Vec<DataPoint>) {
        let mut samples: Vec<&PowerSample> = power.iter().filter(|s| !s.full_rate).collect();
        samples.sort_by_key(|s| s.time.0);
        let mut tier: Vec<(&PowerSample, bool)> = Vec::new();
        for s in samples {
            let tier_value = budget.map(|b| b.value_for(&s.scope)).unwrap_or_default();
            let attrs = power_attrs(s, tier_value);
            if let Some(w) = s.watts {
                out.push(DataPoint { metric: &HW_POWER, attrs: attrs.clone(), time_ns: s.time.0, start_ns: 0, value: w.0 });
            }
            let mut new = true;
            if let Some(j) = s.joules {
                let start = s.time.0.saturating_sub(i64::try_from(s.interval_ns).unwrap_or(0));
                let point = match (s.joules_total, epoch_ns) {
                    (Some(total), Some(epoch)) => self.set(host, &HW_ENERGY, attrs, s.time.0, epoch, total.0),
                    _ => self.add(host, &HW_ENERGY, attrs, s.time.0, start, j.0),
                };
                match point {
                    Some(p) => out.push(p),
                    None => new = false,
                }
            }
            if !tier_value.is_empty() {
                tier.push((s, new));
            }
        }
        if let (Some(b), false) = (budget, tier.is_empty()) {
            self.host_totals(host, &b.value, &tier, epoch_ns, out);
        }
    }

    /// `hw.host.power` (Σ over the tier's zones of each one's newest watts, at the newest tier
    /// point's time; a zone silent for [`SILENT_NS`] no longer counts) and `hw.host.energy` (Σ of
    /// the tier zones' joules, only while every tier zone is a counter: an instantaneous meter's
    /// energy is not known, and is not sent; while every tier zone carries the agent's total, the
    /// sum of their newest totals from `epoch_ns`). A tier change starts the host's series over.
    fn host_totals(&mut self, host: &str, tier: &str, samples: &[(&PowerSample, bool)], epoch_ns: Option<i64>, out: &mut Vec<DataPoint>) {
        let h = self.hosts.entry(host.to_string()).or_default();
        if h.tier != tier {
            *h = HostTotals { tier: tier.to_string(), ..Default::default() };
        }
        let (mut joules, mut first_start) = (0.0, i64::MAX);
        for (s, new) in samples {
            let id = format!("{}:{}", s.source, s.zone);
            let z = h.zones.entry(id.clone()).or_insert(TierZone { time_ns: i64::MIN, watts: None, counter: false, total: None });
            if s.time.0 > z.time_ns {
                let total = s.joules_total.filter(|_| epoch_ns.is_some()).map(|t| t.0);
                *z = TierZone { time_ns: s.time.0, watts: s.watts.map(|w| w.0), counter: s.joules.is_some(), total };
                if let Some(t) = total {
                    h.totals.insert(id, t);
                }
            }
            if let (Some(j), true) = (s.joules, *new) {
                joules += j.0;
                first_start = first_start.min(s.time.0.saturating_sub(i64::try_from(s.interval_ns).unwrap_or(0)));
            }
        }
        let newest = h.zones.values().map(|z| z.time_ns).max().unwrap_or(i64::MIN);
        h.zones.retain(|_, z| newest.saturating_sub(z.time_ns) <= SILENT_NS);
        if newest <= h.last_power_ns {
            return;
        }
        h.last_power_ns = newest;
        let attrs = vec![("hw.id", host.to_string()), ("wattflip.budget", tier.to_string())];
        if h.zones.values().any(|z| z.watts.is_some()) {
            let watts: f64 = h.zones.values().filter_map(|z| z.watts).sum();
            out.push(DataPoint { metric: &HW_HOST_POWER, attrs: attrs.clone(), time_ns: newest, start_ns: 0, value: watts });
        }
        if !h.zones.values().all(|z| z.counter) {
            h.energy = None;
            return;
        }
        let e = if let (Some(epoch), true) = (epoch_ns, h.zones.values().all(|z| z.total.is_some())) {
            h.energy.insert(Running { start_ns: epoch.min(newest), total: h.totals.values().sum(), last_ns: newest })
        } else {
            let e = h.energy.get_or_insert(Running { start_ns: first_start.min(newest), total: 0.0, last_ns: i64::MIN });
            e.total += joules;
            e
        };
        e.last_ns = newest;
        out.push(DataPoint { metric: &HW_HOST_ENERGY, attrs, time_ns: newest, start_ns: e.start_ns, value: e.total });
    }

    /// `hw.physical_disk.endurance_utilization` (remaining = 1 − percentage used), one
    /// `hw.physical_disk.smart` per reported SMART field, and `hw.status` from the critical
    /// warning (0: ok; bit 3, read-only media: failed; any other bit: degraded).
    fn smart(&mut self, host: &str, s: &v1::NvmeSmart, out: &mut Vec<DataPoint>) {
        let disk = |extra: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
            let mut a = vec![("hw.id", s.device.clone()), ("hw.type", "physical_disk".to_string())];
            if !s.serial.is_empty() {
                a.push(("hw.serial_number", s.serial.clone()));
            }
            a.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
            a
        };
        let t = s.time_ns;
        if let Some(used) = s.percentage_used {
            let remaining = (100.0 - f64::from(used)).max(0.0) / 100.0;
            out.push(DataPoint {
                metric: &HW_DISK_ENDURANCE,
                attrs: disk(&[("hw.physical_disk.state", "remaining")]),
                time_ns: t,
                start_ns: 0,
                value: remaining,
            });
        }
        let fields: [(&str, Option<f64>); 14] = [
            ("critical_warning", Some(f64::from(s.critical_warning))),
            ("composite_celsius", s.composite_celsius),
            ("percentage_used", s.percentage_used.map(f64::from)),
            ("data_units_read", s.data_units_read.map(|v| v as f64)),
            ("data_units_written", s.data_units_written.map(|v| v as f64)),
            ("warning_temp_time_min", s.warning_temp_time_min.map(|v| v as f64)),
            ("critical_temp_time_min", s.critical_temp_time_min.map(|v| v as f64)),
            ("thm_temp1_trans_count", s.thm_temp1_trans_count.map(|v| v as f64)),
            ("thm_temp2_trans_count", s.thm_temp2_trans_count.map(|v| v as f64)),
            ("thm_temp1_total_time_s", s.thm_temp1_total_time_s.map(|v| v as f64)),
            ("thm_temp2_total_time_s", s.thm_temp2_total_time_s.map(|v| v as f64)),
            ("power_on_hours", s.power_on_hours.map(|v| v as f64)),
            ("unsafe_shutdowns", s.unsafe_shutdowns.map(|v| v as f64)),
            ("media_errors", s.media_errors.map(|v| v as f64)),
        ];
        for (name, v) in fields {
            if let Some(v) = v {
                out.push(DataPoint { metric: &HW_DISK_SMART, attrs: disk(&[("hw.physical_disk.smart_attribute", name)]), time_ns: t, start_ns: 0, value: v });
            }
        }
        let state = match s.critical_warning {
            0 => "ok",
            w if w & 0b1000 != 0 => "failed",
            _ => "degraded",
        };
        for st in ["degraded", "failed", "ok"] {
            let p = self.level(host, &HW_STATUS, disk(&[("hw.state", st)]), t, if st == state { 1.0 } else { 0.0 });
            out.push(p);
        }
    }

    /// `wattflip.throttle.episodes`: distinct onsets per drive and trigger (an episode the
    /// detector writes again when it changes is one episode), stamped at the newest onset.
    fn episode(&mut self, host: &str, e: &ThrottleEvent, out: &mut Vec<DataPoint>) {
        let attrs = vec![("hw.id", e.device.clone()), ("hw.type", "physical_disk".to_string()), ("wattflip.trigger", e.trigger.clone())];
        let onsets = self.episodes.entry(series_key(host, &THROTTLE_EPISODES, &attrs)).or_default();
        if !onsets.insert(e.time_ns) {
            return;
        }
        let (count, first, newest) = (onsets.len() as f64, onsets.first().copied().unwrap_or(e.time_ns), onsets.last().copied().unwrap_or(e.time_ns));
        out.push(DataPoint { metric: &THROTTLE_EPISODES, attrs, time_ns: newest, start_ns: first, value: count });
    }

    /// `hw.physical_disk.size` of every drive of a `run` Hello's inventory with a known capacity.
    pub fn hello(&mut self, hello: &Hello) -> Vec<DataPoint> {
        let mut out = Vec::new();
        for d in hello.inventory.storage_devices.iter() {
            let Some(bytes) = d.capacity_bytes else { continue };
            let mut attrs = vec![("hw.id", d.name.clone()), ("hw.type", "physical_disk".to_string())];
            for (k, v) in [("hw.firmware_version", &d.firmware), ("hw.model", &d.model), ("hw.parent", &d.controller), ("hw.serial_number", &d.serial)] {
                if !v.is_empty() {
                    attrs.push((k, v.clone()));
                }
            }
            if let Some(r) = d.rotational {
                attrs.push(("hw.physical_disk.type", if r { "HDD" } else { "SSD" }.to_string()));
            }
            out.push(self.level(&hello.agent_id, &HW_DISK_SIZE, attrs, hello.time.0, bytes as f64));
        }
        out
    }
}

/// A run's energy, background energy and J/MiB (each only when measured: never a zero), at its
/// first IO's time, tagged with its drive, experiment, varying value and background class.
fn probe_run(r: &v1::ProbeRun, out: &mut Vec<DataPoint>) {
    let mut attrs = vec![("hw.id", r.device.clone()), ("hw.type", "physical_disk".to_string())];
    for (k, v) in [("hw.firmware_version", &r.firmware), ("hw.model", &r.model), ("wattflip.background_class", &r.background_class)] {
        if !v.is_empty() {
            attrs.push((k, v.clone()));
        }
    }
    attrs.extend([
        ("wattflip.bench", r.bench.clone()),
        ("wattflip.experiment", r.experiment.clone()),
        ("wattflip.pattern", r.pattern.clone()),
        ("wattflip.value", format!("{}", r.value)),
        ("wattflip.varying", r.varying.clone()),
    ]);
    for (m, v) in [
        (&RUN_ENERGY, r.energy_j),
        (&RUN_BACKGROUND_ENERGY, r.background_energy_j),
        (&RUN_J_PER_MIB, r.j_per_mib),
        (&RUN_ENERGY_U95, r.energy_u95_j),
        (&RUN_BACKGROUND_ENERGY_U95, r.background_energy_u95_j),
        (&RUN_J_PER_MIB_U95, r.j_per_mib_u95),
    ] {
        if let Some(v) = v {
            out.push(DataPoint { metric: m, attrs: attrs.clone(), time_ns: r.start_ns, start_ns: 0, value: v });
        }
    }
}
