//! The `efficiency` roll-up of `plan rollup` (issue 42): per group, profile (and NVMe power state
//! when the preset ran per state), the fleet's efficiency figures from `device_efficiency`: each
//! device's latest stable phase in the window, their median over the devices with the spread
//! (min, max), and bounds on the median from the devices' 95 % intervals (docs/analyses.md).
//! Unstable and unmeasured phases carry no figure: they are left out and counted. A new figure is
//! a field in [`figures_of`] and in [`query`]'s column list.

use super::{key, lit, tag, By, Device, Key, Series};
use serde::Serialize;
use std::collections::BTreeMap;
use wattflip_proto::domain::EFFICIENCY_PROFILES;

/// The fields the roll-up reads (each with its `_u95`).
const FIELDS: [&str; 4] = ["watts", "watts_per_tb", "iops_per_watt", "mib_per_s_per_watt"];

/// The figures rolled up for a profile: its headline ratio first, then its mean power.
pub fn figures_of(profile: &str) -> [&'static str; 2] {
    match profile {
        "ready_idle" => ["watts_per_tb", "watts"],
        "seq_read_128k" | "seq_write_128k" => ["mib_per_s_per_watt", "watts"],
        _ => ["iops_per_watt", "watts"],
    }
}

/// One figure over the devices of a group: the median of each device's latest stable value, its
/// spread, and the median's 95 % bounds (absent when a device's half-width is unknown).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FleetFigure {
    pub metric: String,
    pub devices: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub low95: Option<f64>,
    pub high95: Option<f64>,
}

/// A profile of a group: its figures, and the phases that had none.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProfileEfficiency {
    pub profile: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_state: Option<u32>,
    /// Devices with a stable phase of the profile in the window.
    pub devices: usize,
    pub figures: Vec<FleetFigure>,
    /// Phases left out: no stable interval within their budget, or no drive-side power source.
    pub unstable_phases: usize,
    pub not_measured_phases: usize,
}

/// The query: every phase in the window, one series per device, profile, verdict and power state.
/// `windows` is in every point, so unstable phases (no figure) are rows too. `rp`: the retention
/// policy holding the whole copies when the window reaches beyond the raw points.
pub fn query(since: &str, model: Option<&str>, rp: Option<&str>) -> String {
    let cols: Vec<String> = FIELDS.iter().flat_map(|f| [format!("\"{f}\""), format!("\"{f}_u95\"")]).collect();
    let from = rp.map(|rp| format!("\"{rp}\".\"device_efficiency\"")).unwrap_or_else(|| "\"device_efficiency\"".into());
    format!(
        "SELECT \"windows\", {} FROM {from} WHERE time > now() - {since}{} GROUP BY \"host\", \"device\", \"model\", \"firmware\", \"profile\", \"verdict\", \"power_state\"",
        cols.join(", "),
        model.map(|m| format!(" AND \"model\" = {}", lit(m))).unwrap_or_default()
    )
}

/// (group, profile, power state).
type ProfileKey = (Key, String, Option<u32>);
/// A stable phase's figures: field → (value, u95).
type Figures = BTreeMap<&'static str, (f64, Option<f64>)>;

#[derive(Default)]
struct Acc {
    /// Per device: the time of its latest stable phase and that phase's (value, u95) per field.
    latest: BTreeMap<Device, (i64, Figures)>,
    unstable: usize,
    not_measured: usize,
}

/// Median (mean of the two middle values for an even count) of a non-empty slice.
fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// The figure over the devices' (value, u95): the median is non-decreasing in every value, so
/// when each device's true value lies in its interval, the true median lies between the median
/// of the lower ends and the median of the upper ends.
pub fn fleet_figure(metric: &str, values: &[(f64, Option<f64>)]) -> Option<FleetFigure> {
    if values.is_empty() {
        return None;
    }
    let v: Vec<f64> = values.iter().map(|x| x.0).collect();
    let u: Option<Vec<f64>> = values.iter().map(|x| x.1).collect();
    let bound = |sign: f64| u.as_ref().map(|u| median(&v.iter().zip(u).map(|(v, u)| v + sign * u).collect::<Vec<_>>()));
    Some(FleetFigure {
        metric: metric.to_string(),
        devices: v.len(),
        median: median(&v),
        min: v.iter().copied().fold(f64::INFINITY, f64::min),
        max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        low95: bound(-1.0),
        high95: bound(1.0),
    })
}

/// The stable phase of row `i` as (time, field → (value, u95)).
fn row(s: &Series, i: usize) -> Option<(i64, Figures)> {
    let t = s.values.get(i)?.get(s.columns.iter().position(|c| c == "time")?)?.as_i64()?;
    let figures = FIELDS.iter().filter_map(|f| s.f(i, f).map(|v| (*f, (v, s.f(i, &format!("{f}_u95")))))).collect();
    Some((t, figures))
}

/// The roll-up of the query's series, per group: profiles in the preset's order, then by state.
pub fn rollup(series: &[Series], by: By) -> BTreeMap<Key, Vec<ProfileEfficiency>> {
    let mut acc: BTreeMap<ProfileKey, Acc> = BTreeMap::new();
    for s in series {
        let state = tag(s, "power_state").parse::<u32>().ok();
        let a = acc.entry((key(s, by), tag(s, "profile"), state)).or_default();
        match tag(s, "verdict").as_str() {
            "stable" => {
                for i in 0..s.values.len() {
                    let Some((t, figures)) = row(s, i) else { continue };
                    let slot = a.latest.entry((tag(s, "host"), tag(s, "device"))).or_insert((i64::MIN, BTreeMap::new()));
                    if t > slot.0 {
                        *slot = (t, figures);
                    }
                }
            }
            "not_measured" => a.not_measured += s.values.len(),
            _ => a.unstable += s.values.len(),
        }
    }
    let mut out: BTreeMap<Key, Vec<ProfileEfficiency>> = BTreeMap::new();
    for ((k, profile, power_state), a) in acc {
        let figures = figures_of(&profile)
            .iter()
            .filter_map(|m| fleet_figure(m, &a.latest.values().filter_map(|(_, f)| f.get(m).copied()).collect::<Vec<_>>()))
            .collect();
        let p = ProfileEfficiency { devices: a.latest.len(), figures, unstable_phases: a.unstable, not_measured_phases: a.not_measured, profile, power_state };
        out.entry(k).or_default().push(p);
    }
    for v in out.values_mut() {
        let rank = |p: &str| EFFICIENCY_PROFILES.iter().position(|x| *x == p).unwrap_or(EFFICIENCY_PROFILES.len());
        v.sort_by(|a, b| (rank(&a.profile), &a.profile, a.power_state).cmp(&(rank(&b.profile), &b.profile, b.power_state)));
    }
    out
}

/// The table's lines for one group.
pub fn table(profiles: &[ProfileEfficiency], s: &mut String) {
    use std::fmt::Write as _;
    let _ = writeln!(s, "efficiency: median over devices of each one's latest stable phase [95 % bounds of the median] (min … max)");
    for p in profiles {
        let state = p.power_state.map(|st| format!(" PS{st}")).unwrap_or_default();
        let figures: Vec<String> = p
            .figures
            .iter()
            .map(|f| {
                let bounds = match (f.low95, f.high95) {
                    (Some(lo), Some(hi)) => format!("[{lo:.4} … {hi:.4}]"),
                    _ => "[unknown]".into(),
                };
                format!("{} {:.4} {bounds} ({:.4} … {:.4})", f.metric, f.median, f.min, f.max)
            })
            .collect();
        let _ = writeln!(
            s,
            "{:<16}{state} {} devices: {}; left out: {} unstable, {} not measured",
            p.profile,
            p.devices,
            if figures.is_empty() { "no stable phase".into() } else { figures.join("; ") },
            p.unstable_phases,
            p.not_measured_phases
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// A series of the query's answer: its tags and rows of (time, [(column, value)]).
    fn series(host: &str, device: &str, profile: &str, verdict: &str, state: &str, rows: &[(i64, &[(&str, f64)])]) -> Series {
        let mut columns = vec!["time".to_string(), "windows".to_string()];
        columns.extend(FIELDS.iter().flat_map(|f| [f.to_string(), format!("{f}_u95")]));
        let values = rows
            .iter()
            .map(|(t, cols)| {
                let mut r = vec![Value::Null; columns.len()];
                r[0] = json!(t);
                r[1] = json!(10);
                for (k, v) in *cols {
                    r[columns.iter().position(|c| c == k).unwrap()] = json!(v);
                }
                r
            })
            .collect();
        let tags =
            [("host", host), ("device", device), ("model", "M1"), ("firmware", "F1"), ("profile", profile), ("verdict", verdict), ("power_state", state)];
        Series { tags: tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), columns, values }
    }

    fn figure(metric: &str, devices: usize, (median, min, max): (f64, f64, f64), bounds: Option<(f64, f64)>) -> FleetFigure {
        FleetFigure { metric: metric.into(), devices, median, min, max, low95: bounds.map(|b| b.0), high95: bounds.map(|b| b.1) }
    }

    /// Issue 42: per profile, each device's latest stable phase; the median over devices with its
    /// bounds from the devices' intervals (unknown when one device's is); unstable and unmeasured
    /// phases left out and counted; a power state is its own row.
    #[test]
    fn the_fleet_figures_are_medians_of_each_devices_latest_stable_phase() {
        let s = vec![
            series(
                "h1",
                "nvme0n1",
                "ready_idle",
                "stable",
                "",
                &[(50, &[("watts_per_tb", 5.0)]), (100, &[("watts_per_tb", 2.0), ("watts_per_tb_u95", 0.25), ("watts", 8.0), ("watts_u95", 0.5)])],
            ),
            series(
                "h2",
                "nvme0n1",
                "ready_idle",
                "stable",
                "",
                &[(200, &[("watts_per_tb", 3.0), ("watts_per_tb_u95", 0.5), ("watts", 12.0), ("watts_u95", 1.0)])],
            ),
            series("h3", "nvme1n1", "ready_idle", "stable", "", &[(300, &[("watts_per_tb", 2.5), ("watts_per_tb_u95", 0.125), ("watts", 10.0)])]),
            series("h4", "nvme0n1", "ready_idle", "unstable", "", &[(10, &[]), (20, &[])]),
            series("h5", "sda", "ready_idle", "not_measured", "", &[(30, &[])]),
            series(
                "h1",
                "nvme0n1",
                "rand_read_4k",
                "stable",
                "",
                &[(110, &[("iops_per_watt", 100.0), ("iops_per_watt_u95", 2.0), ("watts", 9.0), ("watts_u95", 0.5)])],
            ),
            series(
                "h2",
                "nvme0n1",
                "rand_read_4k",
                "stable",
                "",
                &[(210, &[("iops_per_watt", 300.0), ("iops_per_watt_u95", 10.0), ("watts", 13.0), ("watts_u95", 1.0)])],
            ),
            series("h1", "nvme0n1", "seq_read_128k", "stable", "1", &[(120, &[("mib_per_s_per_watt", 50.0), ("mib_per_s_per_watt_u95", 1.0)])]),
            series("h2", "nvme0n1", "seq_read_128k", "unstable", "1", &[(220, &[])]),
        ];
        let r = rollup(&s, By::ModelFirmware);
        let want = vec![
            ProfileEfficiency {
                profile: "ready_idle".into(),
                power_state: None,
                devices: 3,
                // W/TB 2 ± 0.25, 3 ± 0.5, 2.5 ± 0.125: median 2.5 within [median(1.75, 2.5, 2.375),
                // median(2.25, 3.5, 2.625)]; the watts of h3 have no half-width: no bounds.
                figures: vec![figure("watts_per_tb", 3, (2.5, 2.0, 3.0), Some((2.375, 2.625))), figure("watts", 3, (10.0, 8.0, 12.0), None)],
                unstable_phases: 2,
                not_measured_phases: 1,
            },
            ProfileEfficiency {
                profile: "rand_read_4k".into(),
                power_state: None,
                devices: 2,
                figures: vec![
                    figure("iops_per_watt", 2, (200.0, 100.0, 300.0), Some((194.0, 206.0))),
                    figure("watts", 2, (11.0, 9.0, 13.0), Some((10.25, 11.75))),
                ],
                unstable_phases: 0,
                not_measured_phases: 0,
            },
            ProfileEfficiency {
                profile: "seq_read_128k".into(),
                power_state: Some(1),
                devices: 1,
                figures: vec![figure("mib_per_s_per_watt", 1, (50.0, 50.0, 50.0), Some((49.0, 51.0)))],
                unstable_phases: 1,
                not_measured_phases: 0,
            },
        ];
        assert_eq!(r.get(&("M1".to_string(), Some("F1".to_string()))), Some(&want), "{r:?}");
        assert_eq!(r.len(), 1);
        let mut text = String::new();
        table(&want, &mut text);
        assert!(text.contains("ready_idle       3 devices: watts_per_tb 2.5000 [2.3750 … 2.6250] (2.0000 … 3.0000); watts 10.0000 [unknown] (8.0000 … 12.0000); left out: 2 unstable, 1 not measured"), "{text}");
        assert!(text.contains("seq_read_128k    PS1 1 devices"), "{text}");
    }

    #[test]
    fn the_query_reads_every_phase_and_the_whole_copies_when_asked() {
        assert_eq!(
            query("30d", Some("M'1"), None),
            "SELECT \"windows\", \"watts\", \"watts_u95\", \"watts_per_tb\", \"watts_per_tb_u95\", \"iops_per_watt\", \"iops_per_watt_u95\", \
             \"mib_per_s_per_watt\", \"mib_per_s_per_watt_u95\" FROM \"device_efficiency\" WHERE time > now() - 30d AND \"model\" = 'M\\'1' \
             GROUP BY \"host\", \"device\", \"model\", \"firmware\", \"profile\", \"verdict\", \"power_state\""
        );
        assert!(query("400d", None, Some("rollup_1m")).contains(" FROM \"rollup_1m\".\"device_efficiency\" WHERE time > now() - 400d GROUP BY"));
    }
}
