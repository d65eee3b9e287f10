//! The HTML report of one probe: target and run facts, a uFLIP Figure-4-style chart per
//! micro-benchmark (mean response time against the varying parameter, one line per pattern), a
//! throughput chart, the summary table, and what could not run. Charts are drawn with plotters'
//! SVG backend and inlined.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use plotters::prelude::*;
use wattflip_uflip::{ProbeReport, RunResult, RunStatus};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Mean of a metric per (series, value) over repetitions, series in first-seen order.
fn series(runs: &[&RunResult], metric: impl Fn(&RunResult) -> f64) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut order: Vec<String> = Vec::new();
    let mut acc: BTreeMap<String, BTreeMap<i64, (f64, f64, u32)>> = BTreeMap::new();
    for r in runs {
        let name = r.experiment.split('/').nth(1).unwrap_or(&r.pattern).to_string();
        if !order.contains(&name) {
            order.push(name.clone());
        }
        // Key by value scaled to keep f64 ordering in a BTreeMap.
        let e = acc.entry(name).or_default().entry((r.value * 1000.0) as i64).or_insert((r.value, 0.0, 0));
        e.1 += metric(r);
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

fn x_label(varying: &str, v: f64) -> String {
    crate::probes::output::fmt_value(varying, v)
}

/// One line chart as an SVG string; log axes where every value is positive and spans a decade.
fn chart(title: &str, varying: &str, y_desc: &str, data: &[(String, Vec<(f64, f64)>)]) -> Result<String, String> {
    let xs: Vec<f64> = data.iter().flat_map(|(_, p)| p.iter().map(|q| q.0)).collect();
    let ys: Vec<f64> = data.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)).filter(|y| y.is_finite()).collect();
    if xs.is_empty() || ys.is_empty() {
        return Err("no data".into());
    }
    let (xmin, xmax) = xs.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    let (ymin, ymax) = ys.iter().fold((f64::MAX, f64::MIN), |(a, b), &y| (a.min(y), b.max(y)));
    let log_x = xmin > 0.0 && xmax / xmin >= 8.0;
    let log_y = ymin > 0.0 && ymax / ymin >= 10.0;
    let pad = |lo: f64, hi: f64, log: bool| if log { (lo / 1.3, hi * 1.3) } else if hi > lo { (lo - (hi - lo) * 0.05, hi + (hi - lo) * 0.05) } else { (lo - 1.0, hi + 1.0) };
    let (x0, x1) = pad(xmin, xmax, log_x);
    let (y0, y1) = pad(if log_y { ymin } else { ymin.min(0.0) }, ymax, log_y);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 400)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut b = ChartBuilder::on(&root);
        b.caption(title, ("sans-serif", 18)).margin(12).x_label_area_size(42).y_label_area_size(70);
        let fmt_x = |v: &f64| x_label(varying, *v);
        let fmt_y = |v: &f64| if v.abs() >= 100.0 { format!("{v:.0}") } else { format!("{v:.2}") };
        macro_rules! draw {
            ($chart:expr) => {{
                let mut c = $chart.map_err(|e| e.to_string())?;
                c.configure_mesh()
                    .x_desc(varying)
                    .y_desc(y_desc)
                    .x_label_formatter(&fmt_x)
                    .y_label_formatter(&fmt_y)
                    .light_line_style(WHITE.mix(0.0))
                    .draw()
                    .map_err(|e| e.to_string())?;
                for (i, (name, pts)) in data.iter().enumerate() {
                    let color = Palette99::pick(i).to_rgba();
                    c.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                        .map_err(|e| e.to_string())?
                        .label(name.as_str())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
                    c.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(|e| e.to_string())?;
                }
                c.configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK.mix(0.3))
                    .draw()
                    .map_err(|e| e.to_string())?;
            }};
        }
        match (log_x, log_y) {
            (true, true) => draw!(b.build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())),
            (true, false) => draw!(b.build_cartesian_2d((x0..x1).log_scale(), y0..y1)),
            (false, true) => draw!(b.build_cartesian_2d(x0..x1, (y0..y1).log_scale())),
            (false, false) => draw!(b.build_cartesian_2d(x0..x1, y0..y1)),
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

fn utc(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Renders the whole report.
pub fn render(report: &ProbeReport) -> String {
    let t = &report.target;
    let ok: Vec<&RunResult> = report.runs.iter().filter(|r| r.status == RunStatus::Ok && r.bench != "format" && r.bench != "prepare").collect();
    let unsupported: Vec<&RunResult> = report.runs.iter().filter(|r| matches!(r.status, RunStatus::Unsupported { .. })).collect();
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>wattflip probe report: {path}</title>\n\
         <style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}}table{{border-collapse:collapse;font-size:13px}}\
         td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}th{{background:#f0f0f0}}td.l,th.l{{text-align:left}}\
         .note{{color:#666}} svg{{max-width:100%;height:auto}}</style></head><body>\n\
         <h1>wattflip probe report</h1>\n<table>\
         <tr><th class=l>target</th><td class=l>{path}</td></tr><tr><th class=l>kind</th><td class=l>{kind}</td></tr>\
         <tr><th class=l>size</th><td class=l>{size:.2} GiB</td></tr><tr><th class=l>logical block size</th><td class=l>{lbs} B</td></tr>\
         <tr><th class=l>model / serial</th><td class=l>{model} / {serial}</td></tr>\
         <tr><th class=l>started</th><td class=l>{start}</td></tr><tr><th class=l>ended</th><td class=l>{end}</td></tr>\
         <tr><th class=l>runs</th><td class=l>{n} ({nok} measured, {nun} unsupported)</td></tr>\
         <tr><th class=l>seed / engine</th><td class=l>{seed} / wattflip-uflip {ver}</td></tr></table>\n",
        path = esc(&t.path.display().to_string()),
        kind = t.kind.as_str(),
        size = t.size as f64 / (1u64 << 30) as f64,
        lbs = t.logical_block_size,
        model = esc(t.model.as_deref().unwrap_or("—")),
        serial = esc(t.serial.as_deref().unwrap_or("—")),
        start = utc(report.started_ns),
        end = utc(report.ended_ns),
        n = report.runs.len(),
        nok = ok.len(),
        nun = unsupported.len(),
        seed = report.seed,
        ver = esc(&report.engine_version),
    );
    let mut benches: Vec<&str> = Vec::new();
    for r in &ok {
        if !benches.contains(&r.bench.as_str()) {
            benches.push(&r.bench);
        }
    }
    for bench in benches {
        let runs: Vec<&RunResult> = ok.iter().copied().filter(|r| r.bench == bench).collect();
        let varying = runs.first().map(|r| r.varying.clone()).unwrap_or_default();
        let _ = writeln!(h, "<h2>{}</h2>", esc(bench));
        for (title, y, m) in [
            ("mean response time (running phase)", "mean response time (µs)", (|r: &RunResult| r.mean_us) as fn(&RunResult) -> f64),
            ("throughput", "MiB/s", |r: &RunResult| r.mib_per_s),
        ] {
            match chart(&format!("{bench}: {title}"), &varying, y, &series(&runs, m)) {
                Ok(svg) => h.push_str(&svg),
                Err(e) => {
                    let _ = writeln!(h, "<p class=note>chart unavailable: {}</p>", esc(&e));
                }
            }
        }
    }
    h.push_str("<h2>Energy</h2>\n<p class=note>No power source was aligned with this probe, so no per-run energy is shown. \
                Run the probe on an agent with a power source (RAPL, hwmon/PMBus, shunt trace) to get J per run and background work.</p>\n");
    h.push_str("<h2>Runs</h2>\n<table><tr><th class=l>experiment</th><th>value</th><th>rep</th><th>IOs</th><th>mean µs</th><th>min µs</th><th>max µs</th><th>std-dev µs</th><th>p99 µs</th><th>IOPS</th><th>MiB/s</th></tr>\n");
    for r in &ok {
        let _ = writeln!(
            h,
            "<tr><td class=l>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.0}</td><td>{:.1}</td></tr>",
            esc(&r.experiment), esc(&x_label(&r.varying, r.value)), r.repetition, r.io_count, r.mean_us, r.min_us, r.max_us, r.stddev_us, r.p99_us, r.iops, r.mib_per_s
        );
    }
    h.push_str("</table>\n");
    if !unsupported.is_empty() {
        h.push_str("<h2>Not run on this target</h2>\n<ul>\n");
        for r in &unsupported {
            if let RunStatus::Unsupported { reason } = &r.status {
                let _ = writeln!(h, "<li>{} {}={}: {}</li>", esc(&r.experiment), esc(&r.varying), esc(&x_label(&r.varying, r.value)), esc(reason));
            }
        }
        h.push_str("</ul>\n");
    }
    h.push_str("<p class=note data-rendered=\"wattflip\">Generated by wattflip-agent.</p></body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_795_000_000_000_000_000), "2026-11-18 11:06:40 UTC");
    }
}
