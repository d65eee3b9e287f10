//! Fleet roll-ups per drive model, or per model and firmware (`wattflip-collector plan rollup`):
//! the distribution of idle power over devices, J/MiB per baseline pattern and IO size, the
//! background-work class each experiment was found to have, throttle events per device-day and
//! the datasheet-vs-measured energy ratio. InfluxDB aggregates per device (bounded: one series
//! per device, model, firmware and experiment or pattern); the fleet statistics are computed here
//! so they are tested exactly. The queries are documented in `docs/analyses.md`. The efficiency
//! roll-up (`device_efficiency` figures per profile) is its own file, `rollup/efficiency.rs`.

pub mod efficiency;

use super::{lit, Influx, PlanError, Series};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// The roll-ups, by their `--metric` name.
pub const METRICS: &[&str] = &["idle", "j-per-mib", "background", "throttle", "datasheet", "efficiency"];

/// How groups are formed: per model, or per (model, firmware).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum By {
    Model,
    ModelFirmware,
}

impl std::str::FromStr for By {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.replace(' ', "").as_str() {
            "model" => Ok(By::Model),
            "model,firmware" | "firmware,model" => Ok(By::ModelFirmware),
            _ => Err(format!("--by `{s}`: write `model` or `model,firmware`")),
        }
    }
}

/// `--metric idle,throttle` → the named roll-ups; empty → all of them.
pub fn parse_metrics(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for m in s.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        if !METRICS.contains(&m) {
            return Err(format!("--metric `{m}`: unknown roll-up; choose from {}", METRICS.join(", ")));
        }
        if !out.iter().any(|o| o == m) {
            out.push(m.to_string());
        }
    }
    Ok(out)
}

/// Idle power over the devices of a group (each device: the median of its runs' idle baselines).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IdleDistribution {
    pub devices: usize,
    pub min_w: f64,
    pub median_w: f64,
    pub p90_w: f64,
    pub max_w: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JPerMib {
    pub pattern: String,
    pub io_size_bytes: u64,
    /// Mean over the runs of their total energy per MiB moved.
    pub j_per_mib: f64,
    pub runs: usize,
    pub devices: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BackgroundClass {
    pub experiment: String,
    /// The class most devices had (`A/B` when tied).
    pub class: String,
    /// Devices per class (each device: its latest classification of the experiment).
    pub devices: BTreeMap<String, usize>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Throttling {
    /// Drives of the group in the inventory that reported a temperature in the window.
    pub devices: usize,
    /// Σ over those drives of the UTC days in which they reported a temperature.
    pub device_days: u64,
    pub events: u64,
    pub events_per_device_day: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DatasheetRatio {
    pub devices: usize,
    /// Mean over devices of each device's mean `datasheet_ratio` (datasheet estimate ÷ measured).
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct GroupRollup {
    pub model: String,
    /// Absent with `--by model`; empty when the runs did not record one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub firmware: Option<String>,
    pub idle: Option<IdleDistribution>,
    pub j_per_mib: Vec<JPerMib>,
    pub background: Vec<BackgroundClass>,
    pub throttle: Option<Throttling>,
    pub datasheet_ratio: Option<DatasheetRatio>,
    /// Per profile (and power state): the `device_efficiency` figures over the devices.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub efficiency: Vec<efficiency::ProfileEfficiency>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Rollup {
    pub by: By,
    pub since: String,
    pub metrics: Vec<String>,
    pub groups: Vec<GroupRollup>,
    /// Roll-ups that had no data at all, with what is needed to get them.
    pub missing: BTreeMap<String, String>,
}

/// (model, firmware when grouped by it).
type Key = (String, Option<String>);
/// (host, device).
type Device = (String, String);
/// Per (group, pattern, IO size): the runs' J/MiB and the devices they ran on.
type JAcc = BTreeMap<(Key, String, u64), (Vec<f64>, BTreeSet<Device>)>;

fn model_filter(model: Option<&str>) -> String {
    model.map(|m| format!(" AND \"model\" = {}", lit(m))).unwrap_or_default()
}

pub fn idle_query(since: &str, model: Option<&str>) -> String {
    format!(
        "SELECT median(\"idle_baseline_w\") FROM \"probe_run\" WHERE \"bench\" != 'governor_sweep' AND time > now() - {since}{} \
         GROUP BY \"host\", \"device\", \"model\", \"firmware\"",
        model_filter(model)
    )
}

pub fn j_per_mib_query(since: &str, model: Option<&str>) -> String {
    format!(
        "SELECT \"j_per_mib\", \"value\" FROM \"probe_run\" WHERE \"bench\" = 'granularity' AND \"j_per_mib\" > 0 AND time > now() - {since}{} \
         GROUP BY \"host\", \"device\", \"model\", \"firmware\", \"pattern\"",
        model_filter(model)
    )
}

pub fn background_query(since: &str, model: Option<&str>) -> String {
    format!(
        "SELECT last(\"background_class\") FROM \"probe_run\" WHERE \"background_class\" != '' AND time > now() - {since}{} \
         GROUP BY \"host\", \"device\", \"model\", \"firmware\", \"experiment\"",
        model_filter(model)
    )
}

pub fn datasheet_query(since: &str, model: Option<&str>) -> String {
    format!(
        "SELECT mean(\"datasheet_ratio\") FROM \"probe_run\" WHERE time > now() - {since}{} \
         GROUP BY \"host\", \"device\", \"model\", \"firmware\"",
        model_filter(model)
    )
}

/// The three queries of the throttling roll-up: drives (inventory), their observed days
/// (temperature), and the episodes (throttle_event).
pub fn throttle_queries(since: &str, model: Option<&str>) -> [String; 3] {
    [
        format!("SELECT last(\"capacity_bytes\") AS \"capacity_bytes\", last(\"firmware\") AS \"firmware\" FROM \"inventory\" WHERE time > now() - {since}{} GROUP BY \"host\", \"device\", \"model\"", model_filter(model)),
        format!("SELECT count(\"celsius\") FROM \"temperature\" WHERE time > now() - {since} GROUP BY time(1d), \"host\", \"device\" fill(none)"),
        format!("SELECT count(\"duration_s\") FROM \"throttle_event\" WHERE time > now() - {since} GROUP BY \"host\", \"device\""),
    ]
}

fn tag(s: &Series, k: &str) -> String {
    s.tags.get(k).cloned().unwrap_or_default()
}

fn key(s: &Series, by: By) -> Key {
    (tag(s, "model"), (by == By::ModelFirmware).then(|| tag(s, "firmware")))
}

/// The controller a block device belongs to: `nvme0n1` → `nvme0` (the device tag of temperatures
/// and throttle events); other devices are their own.
pub fn controller_of(device: &str) -> String {
    if let Some(rest) = device.strip_prefix("nvme") {
        if let Some((ctrl, ns)) = rest.split_once('n') {
            if !ctrl.is_empty() && ctrl.bytes().all(|b| b.is_ascii_digit()) && !ns.is_empty() && ns.bytes().all(|b| b.is_ascii_digit()) {
                return format!("nvme{ctrl}");
            }
        }
    }
    device.to_string()
}

/// Median (mean of the two middle values for an even count) of a sorted, non-empty slice.
fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// Nearest-rank percentile of a sorted, non-empty slice: the ⌈p·n⌉-th smallest value.
fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn idle_distribution(per_device: &[f64]) -> Option<IdleDistribution> {
    let mut v: Vec<f64> = per_device.iter().copied().filter(|w| w.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(IdleDistribution { devices: v.len(), min_w: v[0], median_w: median(&v), p90_w: nearest_rank(&v, 0.9), max_w: v[v.len() - 1] })
}

/// One value per device per group: the mean of the device's series (a device seen under two
/// firmware revisions has two series when grouped by model only).
fn per_device(series: &[Series], by: By, col: &str) -> BTreeMap<Key, BTreeMap<Device, Vec<f64>>> {
    let mut out: BTreeMap<Key, BTreeMap<Device, Vec<f64>>> = BTreeMap::new();
    for s in series {
        for i in 0..s.values.len() {
            if let Some(v) = s.f(i, col) {
                out.entry(key(s, by)).or_default().entry((tag(s, "host"), tag(s, "device"))).or_default().push(v);
            }
        }
    }
    out
}

fn device_means(m: &BTreeMap<Device, Vec<f64>>) -> Vec<f64> {
    m.values().map(|v| v.iter().sum::<f64>() / v.len() as f64).collect()
}

fn hint(metric: &str) -> &'static str {
    match metric {
        "idle" => {
            "probe runs with energy carry `idle_baseline_w`: run `wattflip-agent probe` with a power source (drive rail, PSU, RAPL) or import a shunt trace"
        }
        "j-per-mib" => "needs Granularity runs with energy: `wattflip-agent probe --bench granularity` with a power source",
        "background" => "the background-work class is classified from probe runs with energy: run `wattflip-agent probe` with a power source",
        "throttle" => "needs the drives in the inventory (`wattflip-agent run`) and their temperatures (hwmon, nvme-cli or smartctl)",
        "efficiency" => {
            "needs efficiency probes sent to the collector: `wattflip-agent probe --efficiency --collector URL`, or `[[probes]]` with `efficiency = true`"
        }
        _ => "`datasheet_ratio` needs probe runs with energy on an NVMe block device whose power states nvme-cli can read (`[drives] nvme_cli = true`, root)",
    }
}

/// Computes the requested roll-ups (`metrics` empty: all). An explicitly requested roll-up without
/// data is an error; with all requested, the empty ones are listed in `missing`, and it is an
/// error only when none has data. An unknown `model` or a window without any data is an error.
pub async fn rollup(db: &Influx, by: By, model: Option<&str>, metrics: &[String], since: &str) -> Result<Rollup, PlanError> {
    let explicit = !metrics.is_empty();
    let metrics: Vec<String> = if explicit { metrics.to_vec() } else { METRICS.iter().map(|m| m.to_string()).collect() };
    let mut found: BTreeSet<String> = BTreeSet::new();
    let mut results: BTreeMap<Key, GroupRollup> = BTreeMap::new();
    for metric in &metrics {
        match metric.as_str() {
            "idle" => {
                let series = db.query(&idle_query(since, model)).await?;
                for (k, devs) in per_device(&series, by, "median") {
                    if let Some(d) = idle_distribution(&device_means(&devs)) {
                        entry(&mut results, &k).idle = Some(d);
                        found.insert(metric.clone());
                    }
                }
            }
            "j-per-mib" => {
                let series = db.query(&j_per_mib_query(since, model)).await?;
                let mut acc = JAcc::new();
                for s in &series {
                    for i in 0..s.values.len() {
                        let (Some(j), Some(size)) = (s.f(i, "j_per_mib"), s.f(i, "value")) else {
                            continue;
                        };
                        let e = acc.entry((key(s, by), tag(s, "pattern"), size as u64)).or_default();
                        e.0.push(j);
                        e.1.insert((tag(s, "host"), tag(s, "device")));
                    }
                }
                for ((k, pattern, io_size_bytes), (v, devs)) in acc {
                    let j_per_mib = v.iter().sum::<f64>() / v.len() as f64;
                    entry(&mut results, &k).j_per_mib.push(JPerMib { pattern, io_size_bytes, j_per_mib, runs: v.len(), devices: devs.len() });
                    found.insert(metric.clone());
                }
            }
            "background" => {
                if background_rollup(db, by, model, since, &mut results).await? {
                    found.insert(metric.clone());
                }
            }
            "throttle" => {
                if throttle_rollup(db, by, model, since, &mut results).await? {
                    found.insert(metric.clone());
                }
            }
            "efficiency" => {
                let series = db.query(&efficiency::query(since, model, db.whole_rp.as_deref())).await?;
                for (k, profiles) in efficiency::rollup(&series, by) {
                    entry(&mut results, &k).efficiency = profiles;
                    found.insert(metric.clone());
                }
            }
            _ => {
                let series = db.query(&datasheet_query(since, model)).await?;
                for (k, devs) in per_device(&series, by, "mean") {
                    let v = device_means(&devs);
                    if v.is_empty() {
                        continue;
                    }
                    let (min, max) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(*x), b.max(*x)));
                    entry(&mut results, &k).datasheet_ratio = Some(DatasheetRatio { devices: v.len(), mean: v.iter().sum::<f64>() / v.len() as f64, min, max });
                    found.insert(metric.clone());
                }
            }
        }
    }
    if found.is_empty() {
        return Err(nothing_found(db, model, &metrics, since).await);
    }
    let missing: BTreeMap<String, String> = metrics.iter().filter(|m| !found.contains(*m)).map(|m| (m.clone(), hint(m).to_string())).collect();
    if explicit {
        if let Some((m, h)) = missing.iter().next() {
            return Err(PlanError::NoData { what: format!("data for the `{m}` roll-up{}", for_model(model)), since: since.into(), hint: h.clone() });
        }
    }
    Ok(Rollup { by, since: since.into(), metrics, groups: results.into_values().collect(), missing })
}

/// The background-work roll-up: per group and experiment, the class most devices have. Whether
/// any group has data.
async fn background_rollup(db: &Influx, by: By, model: Option<&str>, since: &str, results: &mut BTreeMap<Key, GroupRollup>) -> Result<bool, PlanError> {
    let mut found = false;
    let series = db.query(&background_query(since, model)).await?;
    let mut acc: BTreeMap<(Key, String), BTreeMap<Device, String>> = BTreeMap::new();
    for s in &series {
        // The latest classification of the device under this key.
        if let Some(c) = (0..s.values.len()).rev().find_map(|i| s.s(i, "last")).filter(|c| !c.is_empty()) {
            acc.entry((key(s, by), tag(s, "experiment"))).or_default().insert((tag(s, "host"), tag(s, "device")), c);
        }
    }
    for ((k, experiment), devs) in acc {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for c in devs.values() {
            *counts.entry(c.clone()).or_default() += 1;
        }
        let top = counts.values().copied().max().unwrap_or(0);
        let class = counts.iter().filter(|(_, n)| **n == top).map(|(c, _)| c.as_str()).collect::<Vec<_>>().join("/");
        entry(results, &k).background.push(BackgroundClass { experiment, class, devices: counts });
        found = true;
    }
    Ok(found)
}

/// The throttling roll-up: per group, events per device-day over the drives observed in the
/// window. Whether any group has data.
async fn throttle_rollup(db: &Influx, by: By, model: Option<&str>, since: &str, results: &mut BTreeMap<Key, GroupRollup>) -> Result<bool, PlanError> {
    let mut found = false;
    let [inv_q, days_q, events_q] = throttle_queries(since, model);
    // (host, controller) → group; a controller's namespaces are one drive.
    let mut drives: BTreeMap<Device, Key> = BTreeMap::new();
    for s in db.query(&inv_q).await? {
        let fw = (0..s.values.len()).rev().find_map(|i| s.s(i, "firmware")).unwrap_or_default();
        let k = (tag(&s, "model"), (by == By::ModelFirmware).then(|| fw.trim().to_string()));
        drives.insert((tag(&s, "host"), controller_of(&tag(&s, "device"))), k);
    }
    let mut days: BTreeMap<Device, u64> = BTreeMap::new();
    for s in db.query(&days_q).await? {
        let d = (tag(&s, "host"), tag(&s, "device"));
        if drives.contains_key(&d) {
            *days.entry(d).or_default() += (0..s.values.len()).filter(|&i| s.f(i, "count").is_some_and(|c| c > 0.0)).count() as u64;
        }
    }
    let mut events: BTreeMap<Device, u64> = BTreeMap::new();
    for s in db.query(&events_q).await? {
        let n: f64 = (0..s.values.len()).filter_map(|i| s.f(i, "count")).sum();
        events.insert((tag(&s, "host"), tag(&s, "device")), n as u64);
    }
    let mut acc: BTreeMap<Key, Throttling> = BTreeMap::new();
    for (d, k) in &drives {
        // A drive never observed has no device-days: it says nothing about throttling.
        let Some(&dd) = days.get(d).filter(|n| **n > 0) else {
            continue;
        };
        let t = acc.entry(k.clone()).or_insert(Throttling { devices: 0, device_days: 0, events: 0, events_per_device_day: 0.0 });
        t.devices += 1;
        t.device_days += dd;
        t.events += events.get(d).copied().unwrap_or(0);
    }
    for (k, mut t) in acc {
        t.events_per_device_day = t.events as f64 / t.device_days as f64;
        entry(results, &k).throttle = Some(t);
        found = true;
    }
    Ok(found)
}

fn entry<'a>(results: &'a mut BTreeMap<Key, GroupRollup>, k: &Key) -> &'a mut GroupRollup {
    results.entry(k.clone()).or_insert_with(|| GroupRollup { model: k.0.clone(), firmware: k.1.clone(), ..Default::default() })
}

fn for_model(model: Option<&str>) -> String {
    model.map(|m| format!(" of model {m}")).unwrap_or_default()
}

/// Why nothing came back: a window without any measurement, an unknown model, or only the
/// requested roll-ups missing.
async fn nothing_found(db: &Influx, model: Option<&str>, metrics: &[String], since: &str) -> PlanError {
    let seen = db.models(since).await;
    if seen == "none" {
        return super::empty_window(since);
    }
    if let Some(m) = model.filter(|m| !seen.split(", ").any(|s| s == *m)) {
        return PlanError::UnknownModel { model: m.into(), since: since.into(), seen };
    }
    let names = metrics.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ");
    let what = format!("data for the {names} roll-up{}{}", if metrics.len() > 1 { "s" } else { "" }, for_model(model));
    PlanError::NoData { what, since: since.into(), hint: metrics.iter().map(|m| hint(m)).collect::<Vec<_>>().join("; ") }
}

pub fn rollup_table(r: &Rollup) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Fleet roll-up per {} over the last {}", if r.by == By::Model { "model" } else { "model and firmware" }, r.since);
    for g in &r.groups {
        let fw = g.firmware.as_deref().map(|f| format!(" firmware {}", if f.is_empty() { "(unknown)" } else { f })).unwrap_or_default();
        let _ = writeln!(s, "\n== model {}{fw}", g.model);
        if let Some(i) = &g.idle {
            let _ = writeln!(s, "idle W over {} devices: min {:.3}  median {:.3}  p90 {:.3}  max {:.3}", i.devices, i.min_w, i.median_w, i.p90_w, i.max_w);
        }
        if !g.j_per_mib.is_empty() {
            let _ = writeln!(s, "{:<8} {:>12} {:>12} {:>6} {:>8}", "pattern", "IO size B", "J/MiB", "runs", "devices");
            for j in &g.j_per_mib {
                let _ = writeln!(s, "{:<8} {:>12} {:>12.6} {:>6} {:>8}", j.pattern, j.io_size_bytes, j.j_per_mib, j.runs, j.devices);
            }
        }
        for b in &g.background {
            let counts = b.devices.iter().map(|(c, n)| format!("{c}: {n}")).collect::<Vec<_>>().join(", ");
            let _ = writeln!(s, "background {:<24} {:<6} ({counts})", b.experiment, b.class);
        }
        if let Some(t) = &g.throttle {
            let _ = writeln!(
                s,
                "throttle events: {} over {} device-days of {} drives = {:.4} per device-day",
                t.events, t.device_days, t.devices, t.events_per_device_day
            );
        }
        if let Some(d) = &g.datasheet_ratio {
            let _ = writeln!(s, "datasheet/measured energy over {} devices: mean {:.3}  min {:.3}  max {:.3}", d.devices, d.mean, d.min, d.max);
        }
        if !g.efficiency.is_empty() {
            efficiency::table(&g.efficiency, &mut s);
        }
    }
    for (m, h) in &r.missing {
        let _ = writeln!(s, "\nno {m} data: {h}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distribution_controllers_and_arguments() {
        let d = idle_distribution(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((d.devices, d.min_w, d.median_w, d.p90_w, d.max_w), (4, 1.0, 2.5, 4.0, 4.0));
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        let d = idle_distribution(&ten).unwrap();
        assert_eq!((d.median_w, d.p90_w), (5.5, 9.0));
        assert_eq!(idle_distribution(&[]), None);
        assert_eq!(
            (controller_of("nvme0n1"), controller_of("nvme12n3"), controller_of("sda"), controller_of("nvme0")),
            ("nvme0".into(), "nvme12".into(), "sda".into(), "nvme0".into())
        );
        assert_eq!("model,firmware".parse::<By>(), Ok(By::ModelFirmware));
        assert!("rack".parse::<By>().unwrap_err().contains("--by `rack`"));
        assert_eq!(parse_metrics("idle, throttle,idle").unwrap(), vec!["idle", "throttle"]);
        assert!(parse_metrics("idle,watts").unwrap_err().contains("--metric `watts`"));
    }
}
