//! The efficiency preset's result folder (`probe --efficiency`, `docs/efficiency.md`):
//! `efficiency/report.json` (the whole [`EfficiencyReport`]), `efficiency/report.html` (a table and
//! a chart per drive: the headline ratio by profile with its 95 % interval, idle W/TB) and
//! `efficiency/efficiency.lp` (`device_efficiency` points, `docs/schema.md`), and the same phases
//! as the collector's `Batch.efficiency` records ([`phases`]). A per-state run has one row per
//! (profile, power state), each record tagged with its `power_state`, and a row per state that
//! was not set. A new column is a metric in [`metric_fields`] (and `v1::EfficiencyPhase`) and
//! [`table`] (page).

use super::html::esc;
use crate::probes::efficiency::metrics::Figure;
use crate::probes::efficiency::run::{EfficiencyReport, PhaseReport};
use crate::probes::ProbeCmdError;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use wattflip_proto::lineproto::Point;
use wattflip_proto::schema::{self, EfficiencyPhase, HostTags};
use wattflip_proto::v1;

/// The folder under `--out` the preset writes into.
pub const DIR: &str = "efficiency";

/// Writes report.json, report.html and efficiency.lp into `<out>/efficiency/`.
pub fn write(out: &Path, r: &EfficiencyReport, tags: &HostTags) -> Result<Vec<PathBuf>, ProbeCmdError> {
    let dir = out.join(DIR);
    std::fs::create_dir_all(&dir).map_err(|e| ProbeCmdError::Output { path: dir.clone(), source: e })?;
    let json = serde_json::to_string_pretty(r).map_err(|e| ProbeCmdError::Output { path: dir.join("report.json"), source: std::io::Error::other(e) })?;
    let mut lp = String::new();
    for p in points(r, tags) {
        let _ = p.write_line(&mut lp);
    }
    let mut files = Vec::new();
    for (name, body) in [("report.json", json), ("report.html", render_html(r)), ("efficiency.lp", lp)] {
        let path = dir.join(name);
        std::fs::write(&path, body).map_err(|e| ProbeCmdError::Output { path: path.clone(), source: e })?;
        files.push(path);
    }
    Ok(files)
}

/// A figure's value and, when known, its `_u95` field.
fn push(out: &mut Vec<(&'static str, f64)>, names: (&'static str, &'static str), f: Option<&Figure>) {
    if let Some(f) = f {
        out.push((names.0, f.value));
        if let Some(u) = f.u95 {
            out.push((names.1, u));
        }
    }
}

/// The metric fields of a phase (none unless it is stable).
pub fn metric_fields(p: &PhaseReport) -> Vec<(&'static str, f64)> {
    let mut m = Vec::new();
    if let Some(i) = &p.idle {
        push(&mut m, ("watts", "watts_u95"), Some(&i.watts));
        push(&mut m, ("watts_per_tb", "watts_per_tb_u95"), i.watts_per_tb.as_ref());
        push(&mut m, ("gb_per_watt", "gb_per_watt_u95"), i.gb_per_watt.as_ref());
    }
    if let Some(a) = &p.active {
        m.push(("iops", a.iops));
        m.push(("mib_per_s", a.mib_per_s));
        push(&mut m, ("watts", "watts_u95"), Some(&a.watts));
        push(&mut m, ("iops_per_watt", "iops_per_watt_u95"), Some(&a.iops_per_watt));
        push(&mut m, ("mib_per_s_per_watt", "mib_per_s_per_watt_u95"), Some(&a.mib_per_s_per_watt));
        push(&mut m, ("joules_per_io", "joules_per_io_u95"), Some(&a.joules_per_io));
        push(&mut m, ("joules_per_mib", "joules_per_mib_u95"), Some(&a.joules_per_mib));
        push(&mut m, ("joules_per_io_above_idle", "joules_per_io_above_idle_u95"), a.joules_per_io_above_idle.as_ref());
        push(&mut m, ("joules_per_mib_above_idle", "joules_per_mib_above_idle_u95"), a.joules_per_mib_above_idle.as_ref());
    }
    m
}

/// The phases of a report as the collector gets them (`Batch.efficiency`), one per phase.
pub fn phases(r: &EfficiencyReport) -> Vec<v1::EfficiencyPhase> {
    r.phases
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let a = &p.assessment;
            let mut e = v1::EfficiencyPhase {
                // Phases without an interval keep distinct timestamps (same tags, one per phase).
                time_ns: p.interval_start_ns.unwrap_or(r.started_ns + i as i64),
                device: r.device.clone(),
                model: r.model.clone(),
                firmware: r.firmware.clone(),
                serial: r.serial.clone(),
                profile: p.profile.name().to_string(),
                power_state: p.power_state,
                verdict: p.verdict.to_string(),
                energy_source: r.energy_source.clone(),
                probe_id: r.started_ns.to_string(),
                windows: p.windows_run as u64,
                interval_s: p.interval_start_ns.zip(p.interval_end_ns).filter(|_| p.verdict == "stable").map(|(a, b)| (b - a) as f64 / 1e9),
                max_deviation: Some(a.max_deviation).filter(|v| v.is_finite()),
                trend_change: Some(a.trend_change).filter(|v| v.is_finite()),
                ..Default::default()
            };
            for (k, v) in metric_fields(p).into_iter().filter(|(_, v)| v.is_finite()) {
                e.set_metric(k, v);
            }
            e
        })
        .collect()
}

/// The `device_efficiency` points of a report, one per phase: the points the collector writes
/// for the same phases ([`phases`], `schema::record_points`).
pub fn points(r: &EfficiencyReport, tags: &HostTags) -> Vec<Point> {
    phases(r).iter().map(|e| schema::device_efficiency_point(&EfficiencyPhase::from(e), tags)).collect()
}

/// The headline ratio of a phase: W/TB for ready idle (or W without a capacity), MiB/s/W for
/// sequential profiles, IOPS/W otherwise.
pub fn headline(p: &PhaseReport) -> Option<(Figure, &'static str)> {
    if let Some(i) = &p.idle {
        return Some(match i.watts_per_tb {
            Some(f) => (f, "W/TB"),
            None => (i.watts, "W"),
        });
    }
    let a = p.active.as_ref()?;
    Some(if p.profile.sequential() { (a.mib_per_s_per_watt, "MiB/s/W") } else { (a.iops_per_watt, "IOPS/W") })
}

/// The verdict column: `stable`, or why not.
fn verdict(p: &PhaseReport) -> String {
    match p.verdict {
        "stable" => format!(
            "stable ({} windows, max dev {:.1} %, trend {:+.1} %)",
            p.interval_windows,
            p.assessment.max_deviation * 100.0,
            p.assessment.trend_change * 100.0
        ),
        "not_measured" => "not measured (no drive-side power source)".into(),
        _ => {
            let why: Vec<String> = p.assessment.reasons.iter().map(|r| serde_json::to_string(r).unwrap_or_default()).collect();
            format!("UNSTABLE after {} windows: {}", p.windows_run, why.join("; "))
        }
    }
}

/// A phase's power state as the page writes it (`PS2`, or `—` when not known).
fn state_label(p: &PhaseReport) -> String {
    p.power_state.map(|s| format!("PS{s}")).unwrap_or_else(|| "—".into())
}

fn table(r: &EfficiencyReport, s: &mut String) {
    let _ = writeln!(
        s,
        "<table><tr><th>profile</th><th>power state</th><th>verdict</th><th>headline</th><th>W</th><th>IOPS</th><th>MiB/s</th><th>J/IO</th><th>J/MiB</th></tr>"
    );
    let f = |x: Option<Figure>, d: usize| x.map(|x| esc(&x.describe(d))).unwrap_or_else(|| "—".into());
    for p in &r.phases {
        let head = headline(p).map(|(x, unit)| format!("{} {unit}", esc(&x.describe(3)))).unwrap_or_else(|| "—".into());
        let w = p.idle.map(|i| i.watts).or(p.active.map(|a| a.watts));
        let a = p.active;
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{head}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            p.profile.name(),
            state_label(p),
            esc(&verdict(p)),
            f(w, 3),
            a.map(|a| format!("{:.0}", a.iops)).unwrap_or_else(|| "—".into()),
            a.map(|a| format!("{:.1}", a.mib_per_s)).unwrap_or_else(|| "—".into()),
            f(a.map(|a| a.joules_per_io), 6),
            f(a.map(|a| a.joules_per_mib), 4),
        );
    }
    for st in r.power_states.iter().filter(|st| st.status != "measured") {
        let why = if st.detail.is_empty() { String::new() } else { format!(": {}", st.detail) };
        let _ = writeln!(s, "<tr><td>—</td><td>PS{}</td><td colspan=\"7\">{}{}</td></tr>", st.state, esc(&st.status.replace('_', " ")), esc(&why));
    }
    s.push_str("</table>\n");
}

/// One bar chart: the headline ratio per stable profile of one unit, with its 95 % interval.
fn chart(r: &EfficiencyReport, unit: &str, s: &mut String) {
    let name = |p: &PhaseReport| match p.power_state {
        Some(s) => format!("{} PS{s}", p.profile.name()),
        None => p.profile.name().to_string(),
    };
    let bars: Vec<(String, Figure)> = r.phases.iter().filter_map(|p| headline(p).filter(|h| h.1 == unit).map(|(f, _)| (name(p), f))).collect();
    let max = bars.iter().map(|(_, f)| f.value + f.u95.unwrap_or(0.0)).fold(0.0f64, f64::max);
    if bars.is_empty() || max <= 0.0 {
        return;
    }
    let (w, row) = (360.0, 22.0);
    let _ = writeln!(s, "<h3>{}</h3><svg width=\"560\" height=\"{}\" role=\"img\">", esc(unit), bars.len() as f64 * row + 10.0);
    for (i, (name, f)) in bars.iter().enumerate() {
        let y = i as f64 * row + 4.0;
        let len = f.value / max * w;
        let _ = writeln!(
            s,
            "<text x=\"0\" y=\"{:.0}\" font-size=\"12\">{name}</text><rect x=\"140\" y=\"{y:.0}\" width=\"{len:.1}\" height=\"14\" fill=\"#4a7\"/>",
            y + 12.0
        );
        if let Some(u) = f.u95 {
            let (a, b) = (140.0 + (f.value - u) / max * w, 140.0 + (f.value + u) / max * w);
            let _ = writeln!(s, "<line x1=\"{a:.1}\" x2=\"{b:.1}\" y1=\"{:.0}\" y2=\"{:.0}\" stroke=\"#000\"/>", y + 7.0, y + 7.0);
        }
        let _ = writeln!(s, "<text x=\"{:.0}\" y=\"{:.0}\" font-size=\"12\">{}</text>", 150.0 + len, y + 12.0, esc(&f.describe(3)));
    }
    s.push_str("</svg>\n");
}

/// The page: one drive's table and charts (no scripts, no external assets).
pub fn render_html(r: &EfficiencyReport) -> String {
    let mut s = String::from("<!doctype html><html><head><meta charset=\"utf-8\"><title>wattflip efficiency</title></head><body>\n");
    let cap = r.capacity_bytes.map(|c| format!("{:.3} TB", c as f64 / 1e12)).unwrap_or_else(|| "unknown (file target: pass --capacity)".into());
    let _ = writeln!(
        s,
        "<h1>Efficiency of {} ({} {})</h1><p>serial {} · capacity {} · power from {} ({})</p>",
        esc(&r.device),
        esc(&r.model),
        esc(&r.firmware),
        esc(&r.serial),
        esc(&cap),
        esc(if r.energy_source.is_empty() { "no source" } else { &r.energy_source }),
        esc(if r.energy_note.is_empty() { &r.energy_scope } else { &r.energy_note })
    );
    s.push_str("<p>Figures only for stable measurement intervals; ± is the 95 % interval propagated from the energy figure, “unknown” where the source's uncertainty is not modelled (docs/efficiency.md).</p>\n");
    table(r, &mut s);
    for unit in ["IOPS/W", "MiB/s/W", "W/TB", "W"] {
        chart(r, unit, &mut s);
    }
    s.push_str("</body></html>\n");
    s
}
