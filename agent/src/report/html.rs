//! The HTML report: facts, per device and micro-benchmark the uFLIP Figure-4-style charts (mean
//! response time against the varying parameter, one line per pattern), throughput, energy per IO
//! and J/MB and background-work tails when the runs have energy, a power timeline of the probe
//! window, summary tables, and what could not run. Charts are drawn with plotters' SVG backend and
//! inlined: the file has no scripts and no external assets. Renders a [`Report`] whatever its
//! source; a new chart is a call to [`chart`] in the section that shows it.

use super::model::{utc, DeviceRuns, PowerTrace, Report, Run};
use super::ticks::{fmt_y, log_ticks};
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use wattflip_uflip::ProbeReport;

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Renders the report of a local probe with its per-run energy and the power trace of its window
/// (both empty when the agent had no power source). Callers go through
/// `folder::render_html`, which also serves `report --in`.
pub fn render_with_power(report: &ProbeReport, energy: Option<&crate::energy::ProbeEnergy>, power: Vec<PowerTrace>) -> String {
    render_report(&Report::from_probe(report, energy, power))
}

type Series = Vec<(String, Vec<(f64, f64)>)>;

/// What a chart plots per run; `None` leaves the run out.
type Metric = Box<dyn Fn(&Run) -> Option<f64>>;

/// Mean of a metric per (pattern, value) over repetitions, patterns in first-seen order; runs
/// without the metric are left out.
fn series(runs: &[&Run], metric: impl Fn(&Run) -> Option<f64>) -> Series {
    let mut order: Vec<String> = Vec::new();
    let mut acc: BTreeMap<String, BTreeMap<i64, (f64, f64, u32)>> = BTreeMap::new();
    for r in runs {
        let Some(y) = metric(r).filter(|y| y.is_finite()) else { continue };
        let name = r.probe.experiment.split('/').nth(1).unwrap_or(&r.probe.pattern).to_string();
        if !order.contains(&name) {
            order.push(name.clone());
        }
        // Key by value scaled to keep f64 ordering in a BTreeMap.
        let e = acc.entry(name).or_default().entry((r.probe.value * 1000.0) as i64).or_insert((r.probe.value, 0.0, 0));
        e.1 += y;
        e.2 += 1;
    }
    order
        .into_iter()
        .map(|n| {
            let pts = acc.get(&n).map(|m| m.values().map(|&(x, sum, k)| (x, sum / f64::from(k))).collect()).unwrap_or_default();
            (n, pts)
        })
        .collect()
}

/// What a chart shows besides its data.
struct ChartSpec<'a> {
    title: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    fmt_x: &'a dyn Fn(f64) -> String,
    /// uFLIP's few parameter values: a log axis with ticks exactly at the values when they span
    /// most of a decade (IO sizes); otherwise, and always for time, regular linear ticks.
    x_at_values: bool,
    /// An x range to shade (the probe window on a power timeline), with its legend label.
    band: Option<(f64, f64, &'a str)>,
    /// Draw markers on the points (sparse uFLIP values), not on dense time series.
    markers: bool,
    size: (u32, u32),
    /// Per series, the relative 95 % half-width at each x (energy charts): drawn as error bars.
    bars: Option<&'a Series>,
}

const CHART_SIZE: (u32, u32) = (560, 340);
const WIDE_CHART_SIZE: (u32, u32) = (1100, 380);
const BAND_COLOR: RGBColor = RGBColor(255, 200, 80);

/// Distinct line colours that stay readable on white (plotters' Palette99 starts with pale ones).
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// uFLIP's baseline patterns keep one colour and one legend position in every chart, so charts
/// of different devices compare at a glance.
const BASELINE: [&str; 4] = ["SR", "RR", "SW", "RW"];

/// One drawn line: its name, its points and its colour.
type Line<'a> = (&'a str, &'a [(f64, f64)], RGBColor);

/// Series in legend order (baseline patterns first) with their colours.
fn coloured(data: &Series) -> Vec<Line<'_>> {
    // (baseline position, first-seen index, series)
    let mut v: Vec<_> = data.iter().enumerate().map(|(i, d)| (BASELINE.iter().position(|b| *b == d.0), i, d)).collect();
    v.sort_by_key(|&(b, i, _)| (b.unwrap_or(usize::MAX), i));
    let any_baseline = v.iter().any(|e| e.0.is_some());
    let mut others = 0;
    v.into_iter()
        .enumerate()
        .map(|(i, (b, _, (n, p)))| {
            let c = match b {
                Some(k) => COLORS[k],
                None if any_baseline => {
                    others += 1;
                    COLORS[BASELINE.len() + (others - 1) % (COLORS.len() - BASELINE.len())]
                }
                None => COLORS[i % COLORS.len()],
            };
            (n.as_str(), p.as_slice(), c)
        })
        .collect()
}

/// A chart's axes: ranges padded, log scales where values span a decade, and tick positions.
struct Axes {
    x: (f64, f64),
    y: (f64, f64),
    log_x: bool,
    log_y: bool,
    x_keys: Vec<f64>,
    y_keys: Vec<f64>,
}

/// The axes of `data` (`None` without data).
fn axes(spec: &ChartSpec<'_>, data: &Series) -> Option<Axes> {
    let xs: Vec<f64> = data.iter().flat_map(|(_, p)| p.iter().map(|q| q.0)).collect();
    let ys: Vec<f64> = data.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)).filter(|y| y.is_finite()).collect();
    if xs.is_empty() || ys.is_empty() {
        return None;
    }
    let (xmin, xmax) = xs.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    let (ymin, ymax) = ys.iter().fold((f64::MAX, f64::MIN), |(a, b), &y| (a.min(y), b.max(y)));
    let log_x = spec.x_at_values && xmin > 0.0 && xmax / xmin >= 8.0;
    let log_y = ymin > 0.0 && ymax / ymin >= 10.0;
    let pad = |lo: f64, hi: f64, log: bool| {
        if log {
            (lo / 1.3, hi * 1.3)
        } else if hi > lo {
            (lo - (hi - lo) * 0.05, hi + (hi - lo) * 0.05)
        } else {
            (lo - 1.0, hi + 1.0)
        }
    };
    let (x0, x1) = pad(xmin, xmax, log_x);
    // Linear y starts at 0 so that equal heights compare.
    let (y0, y1) = if log_y { pad(ymin, ymax, true) } else { (ymin.min(0.0), if ymax > 0.0 { ymax * 1.08 } else { 1.0 }) };
    let mut x_keys: Vec<f64> = Vec::new();
    for x in &xs {
        if !x_keys.contains(x) {
            x_keys.push(*x);
        }
    }
    x_keys.sort_by(f64::total_cmp);
    let y_keys = if log_y { log_ticks(y0, y1) } else { Vec::new() };
    Some(Axes { x: (x0, x1), y: (y0, y1), log_x, log_y, x_keys, y_keys })
}

/// One line chart as an SVG string followed by its HTML legend; log y where every value is
/// positive and spans a decade.
fn chart(spec: &ChartSpec<'_>, data: &Series) -> Result<String, String> {
    let Axes { x: (x0, x1), y: (y0, y1), log_x, log_y, x_keys, y_keys } = axes(spec, data).ok_or("no data")?;
    let series = coloured(data);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, spec.size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut b = ChartBuilder::on(&root);
        b.caption(spec.title, ("sans-serif", 16)).margin(12).x_label_area_size(42).y_label_area_size(64);
        let fmt_x = |v: &f64| (spec.fmt_x)(*v);
        let fmt_yl = |v: &f64| fmt_y(*v);
        macro_rules! draw {
            ($chart:expr) => {{
                let mut c = $chart.map_err(|e| e.to_string())?;
                c.configure_mesh()
                    .x_desc(spec.x_desc)
                    .y_desc(spec.y_desc)
                    .x_labels(10)
                    .y_labels(6)
                    .x_label_formatter(&fmt_x)
                    .y_label_formatter(&fmt_yl)
                    .bold_line_style(BLACK.mix(0.08))
                    .light_line_style(WHITE.mix(0.0))
                    .label_style(("sans-serif", 12))
                    .axis_desc_style(("sans-serif", 13))
                    .draw()
                    .map_err(|e| e.to_string())?;
                if let Some((a, z, _)) = spec.band {
                    let band = BAND_COLOR.mix(0.25);
                    c.draw_series(std::iter::once(Rectangle::new([(a.max(x0), y0), (z.min(x1), y1)], band.filled()))).map_err(|e| e.to_string())?;
                }
                for &(name, pts, color) in &series {
                    c.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2))).map_err(|e| e.to_string())?;
                    if spec.markers {
                        c.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(|e| e.to_string())?;
                    }
                    let rel = spec.bars.and_then(|b| b.iter().find(|(n, _)| n == name)).map(|(_, r)| r.as_slice()).unwrap_or_default();
                    let bar = |&(x, y): &(f64, f64)| {
                        rel.iter()
                            .find(|r| r.0 == x)
                            .map(|r| ErrorBar::new_vertical(x, (y * (1.0 - r.1)).max(y0), y, y * (1.0 + r.1), color.stroke_width(1), 6))
                    };
                    c.draw_series(pts.iter().filter_map(bar)).map_err(|e| e.to_string())?;
                }
            }};
        }
        // Each axis kind is its own type in plotters, hence one arm per combination.
        let (xk, yk) = (x_keys.clone(), y_keys.clone());
        match (log_x, log_y) {
            (true, true) => draw!(b.build_cartesian_2d((x0..x1).log_scale().with_key_points(xk), (y0..y1).log_scale().with_key_points(yk))),
            (true, false) => draw!(b.build_cartesian_2d((x0..x1).log_scale().with_key_points(xk), y0..y1)),
            (false, true) => draw!(b.build_cartesian_2d(x0..x1, (y0..y1).log_scale().with_key_points(yk))),
            (false, false) => draw!(b.build_cartesian_2d(x0..x1, y0..y1)),
        }
        root.present().map_err(|e| e.to_string())?;
    }
    // The legend is HTML under the chart: it never hides data and long channel names wrap.
    legend(&mut svg, spec, series.iter().map(|(name, _, color)| (*name, *color)));
    Ok(svg)
}

/// The legend of a chart: a swatch and name per series, and the band's label.
fn legend<'a>(svg: &mut String, spec: &ChartSpec<'_>, series: impl Iterator<Item = (&'a str, RGBColor)>) {
    let swatch = |c: RGBColor| format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2);
    svg.push_str("<div class=legend>");
    for (name, color) in series {
        let _ = write!(svg, "<span><i style=\"background:{}\"></i>{}</span>", swatch(color), esc(name));
    }
    if let Some((_, _, label)) = spec.band {
        let _ = write!(svg, "<span><i class=band style=\"background:{}\"></i>{}</span>", swatch(BAND_COLOR), esc(label));
    }
    svg.push_str("</div>");
}

/// Appends a chart, or a note saying why it is missing.
fn push_chart(h: &mut String, spec: &ChartSpec<'_>, data: &Series) {
    match chart(spec, data) {
        Ok(svg) => {
            let _ = write!(h, "<div class=chart>{svg}</div>");
        }
        Err(e) => {
            let _ = writeln!(h, "<p class=note>{}: chart unavailable: {}</p>", esc(spec.title), esc(&e));
        }
    }
}

fn x_label(varying: &str, v: f64) -> String {
    crate::probes::convert::fmt_value(varying, v)
}

fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map(|x| format!("{x:.decimals$}")).unwrap_or_else(|| "—".into())
}

/// Distinct values of a key in first-seen order.
fn distinct<'a>(runs: impl Iterator<Item = &'a Run>, key: impl Fn(&Run) -> &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in runs {
        if !out.iter().any(|k| k == key(r)) {
            out.push(key(r).to_string());
        }
    }
    out
}

/// The charts of one device: per micro-benchmark response time and throughput, plus energy and
/// background tails when its runs have them.
fn device_charts(h: &mut String, d: &DeviceRuns) {
    for bench in distinct(d.runs.iter(), |r| &r.probe.bench) {
        let runs: Vec<&Run> = d.runs.iter().filter(|r| r.probe.bench == bench).collect();
        let varying = runs.first().map(|r| r.probe.varying.clone()).unwrap_or_default();
        let fmt_x = |v: f64| x_label(&varying, v);
        let x_desc = varying.replace('_', " ");
        let _ = writeln!(h, "<h3>{}</h3>\n<div class=charts>", esc(&bench));
        let mut charts: Vec<(String, &str, Metric)> = vec![
            (format!("{bench}: mean response time"), "mean response time (µs)", Box::new(|r: &Run| Some(r.probe.mean_us))),
            (format!("{bench}: throughput"), "MiB/s", Box::new(|r: &Run| Some(r.probe.mib_per_s))),
        ];
        if runs.iter().any(|r| r.probe.energy_j.is_some()) {
            charts.push((format!("{bench}: energy per IO"), "mJ per IO", Box::new(Run::millijoules_per_io)));
            charts.push((format!("{bench}: energy per MB"), "J/MB", Box::new(Run::joules_per_mb)));
        }
        if runs.iter().any(|r| r.background.is_some()) {
            charts.push((format!("{bench}: background-work tail"), "tail after last IO (s)", Box::new(|r: &Run| r.background.as_ref().map(|b| b.duration_s))));
        }
        for (title, y, metric) in &charts {
            // Energy per IO and per MB carry the energy's relative 95 % half-width.
            let rel = series(&runs, |r: &Run| r.probe.energy_u95_j.zip(r.probe.energy_j).filter(|(_, e)| *e > 0.0).map(|(u, e)| u / e));
            let bars = y.contains("per IO") || y.contains("MB");
            let spec = ChartSpec {
                title,
                x_desc: &x_desc,
                y_desc: y,
                fmt_x: &fmt_x,
                x_at_values: true,
                band: None,
                markers: true,
                size: CHART_SIZE,
                bars: bars.then_some(&rel),
            };
            push_chart(h, &spec, &series(&runs, metric));
        }
        h.push_str("</div>\n");
    }
}

/// Energy per experiment and value (means over repetitions), for runs with energy.
fn energy_table(h: &mut String, d: &DeviceRuns) {
    let mut groups: Vec<((String, String), Vec<&Run>)> = Vec::new();
    for r in d.runs.iter().filter(|r| r.probe.energy_j.is_some()) {
        let key = (r.probe.experiment.clone(), x_label(&r.probe.varying, r.probe.value));
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    if groups.is_empty() {
        return;
    }
    let mean = |rs: &[&Run], f: &dyn Fn(&Run) -> Option<f64>| {
        let v: Vec<f64> = rs.iter().filter_map(|r| f(r)).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    h.push_str("<table><tr><th class=l>experiment</th><th>value</th><th>runs</th><th>energy J</th><th>above idle J</th><th>mJ per IO</th><th>J/MB</th></tr>\n");
    for ((exp, value), rs) in &groups {
        let _ = writeln!(
            h,
            "<tr><td class=l>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(exp),
            esc(value),
            rs.len(),
            opt(mean(rs, &|r| r.probe.energy_j), 3),
            opt(mean(rs, &|r| r.probe.energy_above_idle_j), 3),
            opt(mean(rs, &Run::millijoules_per_io), 4),
            opt(mean(rs, &Run::joules_per_mb), 3),
        );
    }
    h.push_str("</table>\n");
}

/// Background work per experiment: class, longest tail, its energy and share of the run energy.
fn background_table(h: &mut String, d: &DeviceRuns) -> bool {
    let exps = distinct(d.runs.iter().filter(|r| r.background.is_some()), |r| &r.probe.experiment);
    if exps.is_empty() {
        return false;
    }
    h.push_str("<table><tr><th class=l>experiment</th><th class=l>class</th><th>runs with a tail</th><th>longest tail s</th><th>background J</th><th>share of run energy</th></tr>\n");
    for exp in exps {
        let rs: Vec<&Run> = d.runs.iter().filter(|r| r.probe.experiment == exp).collect();
        let bgs: Vec<_> = rs.iter().filter_map(|r| r.background.as_ref()).collect();
        let class = bgs.iter().rev().find_map(|b| b.class.clone()).unwrap_or_else(|| "—".into());
        let longest = bgs.iter().map(|b| b.duration_s).fold(0.0, f64::max);
        let bg_j: Vec<f64> = bgs.iter().filter_map(|b| b.energy_j).collect();
        let run_j: f64 = rs.iter().filter_map(|r| r.probe.energy_j).sum();
        let bg_sum = (!bg_j.is_empty()).then(|| bg_j.iter().sum::<f64>());
        let share = bg_sum.filter(|_| run_j > 0.0).map(|b| format!("{:.1} %", 100.0 * b / run_j)).unwrap_or_else(|| "—".into());
        let _ = writeln!(
            h,
            "<tr><td class=l>{}</td><td class=l>{}</td><td>{}</td><td>{longest:.3}</td><td>{}</td><td>{share}</td></tr>",
            esc(&exp),
            esc(&class),
            bgs.iter().filter(|b| b.duration_s > 0.0).count(),
            opt(bg_sum, 3),
        );
    }
    h.push_str("</table>\n");
    true
}

fn runs_table(h: &mut String, d: &DeviceRuns) {
    let energy = d.runs.iter().any(|r| r.probe.energy_j.is_some());
    h.push_str("<table><tr><th class=l>experiment</th><th>value</th><th>rep</th><th>IOs</th><th>mean µs</th><th>min µs</th><th>max µs</th><th>std-dev µs</th><th>p99 µs</th><th>IOPS</th><th>MiB/s</th>");
    if energy {
        h.push_str("<th>energy J</th>");
    }
    h.push_str("</tr>\n");
    for r in &d.runs {
        let _ = write!(
            h,
            "<tr><td class=l>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.0}</td><td>{:.1}</td>",
            esc(&r.probe.experiment), esc(&x_label(&r.probe.varying, r.probe.value)), r.probe.repetition, r.probe.io_count, r.probe.mean_us, r.probe.min_us, r.probe.max_us, r.probe.stddev_us, r.probe.p99_us, r.probe.iops, r.probe.mib_per_s
        );
        if energy {
            let _ = write!(h, "<td>{}</td>", opt(r.probe.energy_j, 3));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
}

/// The power timeline: W per channel against seconds since the first sample, probe window shaded.
fn power_section(h: &mut String, report: &Report) {
    h.push_str("<h2>Power during the probe</h2>\n");
    let Some(t0) = report.power.iter().flat_map(|p| p.points.first()).map(|p| p.0).min() else {
        h.push_str(
            "<p class=note>No power samples were aligned with this probe. Run it on an agent with a power source \
                    (RAPL, hwmon/PMBus, shunt trace) that streams to a collector to see the power timeline.</p>\n",
        );
        return;
    };
    let secs = |ns: i64| (ns - t0) as f64 / 1e9;
    let data: Series = report.power.iter().map(|p| (p.label.clone(), p.points.iter().map(|&(t, w)| (secs(t), w)).collect())).collect();
    let band = report.probe_window().map(|(a, z)| (secs(a), secs(z), "probe runs"));
    let start = utc(u64::try_from(t0).unwrap_or(0));
    let x_desc = format!("seconds since {start}");
    let fmt_x = |v: f64| format!("{v:.0}");
    let spec = ChartSpec {
        title: "power per channel (scopes overlap: never add them)",
        x_desc: &x_desc,
        y_desc: "W",
        fmt_x: &fmt_x,
        x_at_values: false,
        band,
        markers: false,
        size: WIDE_CHART_SIZE,
        bars: None,
    };
    push_chart(h, &spec, &data);
    h.push_str("\n<table><tr><th class=l>channel</th><th>samples</th><th>mean W</th><th>max W</th></tr>\n");
    for p in &report.power {
        let n = p.points.len();
        let mean = p.points.iter().map(|q| q.1).sum::<f64>() / n.max(1) as f64;
        let max = p.points.iter().map(|q| q.1).fold(f64::MIN, f64::max);
        let _ = writeln!(h, "<tr><td class=l>{}</td><td>{n}</td><td>{mean:.1}</td><td>{max:.1}</td></tr>", esc(&p.label));
    }
    h.push_str("</table>\n");
}

/// Renders a whole report.
pub fn render_report(report: &Report) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>wattflip probe report: {subject}</title>\n\
         <style>body{{font-family:sans-serif;max-width:1160px;margin:2em auto;padding:0 1em;color:#222}}\
         table{{border-collapse:collapse;font-size:13px;margin:.5em 0 1em}}\
         td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}th{{background:#f0f0f0}}td.l,th.l{{text-align:left}}\
         .note{{color:#666}} .charts{{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:10px}}\
         .chart svg{{width:100%;height:auto;display:block}} .chart{{border:1px solid #e4e4e4;padding-bottom:4px}}\
         .legend{{font-size:12px;padding:0 10px;display:flex;flex-wrap:wrap;gap:4px 14px}}\
         .legend i{{display:inline-block;width:16px;height:3px;margin:0 5px 3px 0;vertical-align:middle}} .legend i.band{{height:10px;opacity:.5}}\
         h2{{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:1.6em}}</style></head><body>\n\
         <h1>wattflip probe report: {subject}</h1>\n<table>",
        subject = esc(&report.subject),
    );
    for (k, v) in &report.facts {
        let _ = write!(h, "<tr><th class=l>{}</th><td class=l>{}</td></tr>", esc(k), esc(v));
    }
    h.push_str("</table>\n");
    if report.devices.is_empty() {
        h.push_str("<p class=note>No run produced statistics.</p>\n");
    }
    for d in &report.devices {
        let _ = writeln!(h, "<h2>Device {} ({})</h2>", esc(&d.device), esc(&d.model));
        device_charts(&mut h, d);
    }
    power_section(&mut h, report);
    h.push_str("<h2>Energy</h2>\n");
    for d in &report.devices {
        if d.runs.iter().any(|r| r.probe.energy_j.is_some()) {
            let _ = writeln!(h, "<h3>{}</h3>", esc(&d.device));
            energy_table(&mut h, d);
        } else {
            let _ = writeln!(
                h,
                "<p class=note>{}: no power source was aligned with these runs, so no per-run energy is shown. Run the probe on an agent \
                 with a power source (RAPL, hwmon/PMBus, shunt trace) to get J per run and background work.</p>",
                esc(&d.device)
            );
        }
    }
    h.push_str("<h2>Background work</h2>\n");
    let mut any = false;
    for d in &report.devices {
        if d.runs.iter().any(|r| r.background.is_some()) {
            let _ = writeln!(h, "<h3>{}</h3>", esc(&d.device));
            any |= background_table(&mut h, d);
        }
    }
    if !any {
        h.push_str(
            "<p class=note>No background work was measured: it needs a power trace fine enough to see the device after its last IO \
                    (docs/energy-method.md §8).</p>\n",
        );
    }
    h.push_str("<h2>Runs</h2>\n");
    for d in &report.devices {
        let _ = writeln!(h, "<h3>{}</h3>", esc(&d.device));
        runs_table(&mut h, d);
    }
    if !report.unsupported.is_empty() {
        h.push_str("<h2>Not run on this target</h2>\n<ul>\n");
        for u in &report.unsupported {
            let _ = writeln!(h, "<li>{}</li>", esc(u));
        }
        h.push_str("</ul>\n");
    }
    h.push_str("<p class=note data-rendered=\"wattflip\">Generated by wattflip-agent.</p></body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::Background;
    use wattflip_proto::v1;

    fn run(pattern: &str, kib: u64, mean_us: f64, energy: Option<f64>) -> Run {
        let probe = v1::ProbeRun {
            bench: "granularity".into(),
            experiment: format!("granularity/{pattern}"),
            pattern: pattern.into(),
            varying: "io_size".into(),
            value: (kib * 1024) as f64,
            io_count: 1000,
            io_size_bytes: kib * 1024,
            mean_us,
            mib_per_s: 100.0,
            start_ns: 1_000_000_000 * kib as i64,
            end_ns: 1_000_000_000 * kib as i64 + 500_000_000,
            energy_j: energy,
            ..Default::default()
        };
        let background = energy.map(|_| Background { duration_s: 0.25, energy_j: Some(0.5), class: Some("S".into()) });
        Run { probe, background }
    }

    #[test]
    fn log_ticks_are_one_two_five() {
        assert_eq!(log_ticks(40.0, 300.0), vec![50.0, 100.0, 200.0]);
        assert_eq!(log_ticks(1.0, 10.0), vec![1.0, 2.0, 5.0, 10.0]);
        assert!(log_ticks(0.0, 5.0).is_empty(), "a linear axis starting at 0 has no log ticks");
    }

    #[test]
    fn energy_charts_and_tables_appear_only_with_energy() {
        let with = Report {
            subject: "h1".into(),
            devices: vec![DeviceRuns {
                device: "nvme0n1".into(),
                model: "M".into(),
                runs: vec![run("SR", 4, 80.0, Some(2.0)), run("SR", 32, 160.0, Some(4.0)), run("SW", 4, 30.0, Some(1.0))],
            }],
            power: vec![PowerTrace { label: "rapl psys (psys)".into(), points: vec![(0, 10.0), (1_000_000_000, 12.0), (2_000_000_000, 11.0)] }],
            ..Default::default()
        };
        let h = render_report(&with);
        for title in [
            "granularity: mean response time",
            "granularity: throughput",
            "granularity: energy per IO",
            "granularity: energy per MB",
            "granularity: background-work tail",
            "power per channel",
        ] {
            assert!(h.contains(&format!(">{title}<")) || h.contains(title), "missing chart {title}");
        }
        assert_eq!(h.matches("<svg").count(), 6, "five device charts and the power timeline");
        assert!(h.contains("<tr><td class=l>granularity/SR</td><td class=l>S</td><td>2</td><td>0.250</td><td>1.000</td><td>16.7 %</td></tr>"), "{h}");
        assert!(h.contains("<tr><td class=l>rapl psys (psys)</td><td>3</td><td>11.0</td><td>12.0</td></tr>"));

        let without = Report {
            devices: vec![DeviceRuns { runs: vec![run("SR", 4, 80.0, None), run("SR", 32, 160.0, None)], ..Default::default() }],
            ..Default::default()
        };
        let h = render_report(&without);
        assert_eq!(h.matches("<svg").count(), 2, "response time and throughput only");
        assert!(h.contains("No power samples were aligned"));
        assert!(h.contains("No background work was measured"));
        assert!(h.ends_with("<p class=note data-rendered=\"wattflip\">Generated by wattflip-agent.</p></body></html>\n"));
    }
}
