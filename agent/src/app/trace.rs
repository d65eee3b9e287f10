//! `wattflip-agent trace import`: aligns a shunt or oscilloscope trace (CSV, or raw f32/i16 with a
//! sidecar; `energy::trace`) with a probe's runs, computes per-run energy with the paper's
//! formula, updates the result folder and optionally streams the runs. A new trace subcommand is
//! a [`TraceCommand`] variant and its arm in [`command`].

use super::session::send_results;
use anyhow::Context as _;
use std::path::PathBuf;

#[derive(clap::Subcommand, Debug)]
pub enum TraceCommand {
    /// Align a shunt trace (CSV time,V_shunt; or raw f32/i16 with a sidecar) with a probe's runs and
    /// compute per-run energy with the paper's formula.
    Import {
        /// The trace file.
        file: PathBuf,
        /// The probe's result folder (holds report.json); energy.jsonl and probe_run.lp are updated.
        #[arg(long = "in")]
        input: PathBuf,
        /// Only this run (the engine's run index); default: every run the trace covers.
        #[arg(long)]
        run: Option<usize>,
        /// Shunt resistor R in ohms (CSV traces).
        #[arg(long)]
        shunt_ohms: Option<f64>,
        /// Supply voltage U in volts (CSV traces).
        #[arg(long)]
        supply_volts: Option<f64>,
        /// Unit of the CSV time column: s, ms, us or ns.
        #[arg(long, default_value = "s")]
        time_unit: String,
        /// UTC nanoseconds of time 0 in the CSV.
        #[arg(long)]
        time_origin_ns: Option<i64>,
        /// "Datasheet" power of the device (W), e.g. its NVMe power state's maximum: each run then
        /// gets the ratio of datasheet W × duration to the measured energy (docs/uflip-method.md §11.7).
        #[arg(long)]
        datasheet_w: Option<f64>,
        /// Also send the runs with their energy to this collector.
        #[arg(long)]
        collector: Option<String>,
        /// Agent config, for the agent id and labels.
        #[arg(long)]
        config: Option<PathBuf>,
        /// `check` (default): refuse a trace whose offset or rate error, estimated from the runs'
        /// rises, is beyond 1 ms or 0.05 %, naming the estimate. `auto`: correct the trace's time
        /// origin (and a raw trace's sample rate) by the estimate, say so, and analyse again.
        #[arg(long, default_value = "check")]
        align: String,
    },
}

/// `trace import`.
pub fn command(t: TraceCommand) -> anyhow::Result<()> {
    let TraceCommand::Import { file, input, run, shunt_ohms, supply_volts, time_unit, time_origin_ns, datasheet_w, collector, config, align } = t;
    let auto = match align.as_str() {
        "check" => false,
        "auto" => true,
        other => anyhow::bail!("--align `{other}`: use check or auto"),
    };
    let unit = match time_unit.as_str() {
        "s" => wattflip_energy::TimeUnit::Seconds,
        "ms" => wattflip_energy::TimeUnit::Millis,
        "us" => wattflip_energy::TimeUnit::Micros,
        "ns" => wattflip_energy::TimeUnit::Nanos,
        other => anyhow::bail!("--time-unit `{other}`: use s, ms, us or ns"),
    };
    let cfg = super::load_config(config.as_deref())?;
    let csv = crate::energy::trace::CsvCircuit { shunt_ohms, supply_volts, time_unit: unit, time_origin_ns };
    let path = input.join("report.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {} (is {} a probe result folder?)", path.display(), input.display()))?;
    let mut report: wattflip_uflip::ProbeReport = serde_json::from_str(&text).with_context(|| format!("{} is not a probe report", path.display()))?;
    if let Some(r) = run {
        anyhow::ensure!(report.runs.iter().any(|x| x.run_id == r), "--run {r}: no such run in {}", path.display());
    }
    let (series, summary, mut fine) = crate::energy::trace::import(&file, &csv)?;
    // The probe's idle window: the trace before its first run (at most 1 s, ending where the
    // detector's start search begins; a format pass counts as a run, its IO is not idle);
    // without it each run falls back to the idle before it.
    let detect = wattflip_energy::RunDetectConfig::default();
    let idle = report.runs.iter().filter(|r| r.status == wattflip_uflip::RunStatus::Ok).map(|r| r.start_ns).min().map(|first| {
        let first = wattflip_energy::UnixNanos(i64::try_from(first).unwrap_or(i64::MAX));
        (first.minus(wattflip_energy::Nanos::from_secs_f64(1.0)), first.minus(detect.start_slack))
    });
    let source = format!("trace:{}", file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default());
    let analyse = |series: &wattflip_energy::PowerSeries, fine: &mut dyn wattflip_energy::FineSamples| {
        crate::energy::analyze_trace(&report, series, idle, &source, &detect, datasheet_w, fine)
            .with_context(|| format!("{}: second pass over the trace", file.display()))
    };
    let (mut energy, applied) = aligned(&file, &csv, auto, analyse(&series, fine.as_mut())?, analyse)?;
    if let Some(a) = &energy.alignment {
        println!("alignment: {}", a.describe());
    }
    println!(
        "{}: {} samples, {} gap samples, {:.6} J over {:.3} s (mean {:.3} W)",
        file.display(),
        summary.samples,
        summary.gap_samples,
        summary.energy.0,
        summary.duration.as_secs_f64(),
        summary.mean_power.0
    );
    if let Some(why) = &energy.refused {
        anyhow::bail!("{}: {why}; nothing was written", file.display());
    }
    widen_by_alignment(&mut energy, &report);
    if let Some(r) = run {
        // Every run was analysed (its neighbours bound it); only this one is kept.
        energy.runs.retain(|x| x.run_id == r);
        energy.skipped.retain(|x| x.0 == r);
        report.runs.retain(|x| x.run_id == r);
    }
    print!("{}", crate::energy::summary_table(&energy));
    for w in &energy.warnings {
        eprintln!("warning: {}: {w}", file.display());
    }
    let tags = wattflip_proto::schema::HostTags { host: cfg.agent_id.clone(), labels: cfg.labels.clone() };
    let only = wattflip_uflip::ProbeReport { runs: report.runs.iter().filter(|r| energy.for_run(r.run_id).is_some()).cloned().collect(), ..report.clone() };
    let mut written = crate::report::folder::write_energy(&input, &only, &energy, &tags)?;
    if let Some(a) = &energy.alignment {
        written.push(write_alignment(&input, &file, a, &applied)?);
    }
    println!("wrote {}", written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
    if let Some(url) = collector {
        send_results(&url, &cfg, vec![crate::probes::convert::batch(&only, Some(&energy))], &input, "trace")?;
    }
    Ok(())
}

/// What the alignment left (its estimate at the runs' edges plus the rises' scatter) is a time
/// error at every edge: it widens each run's 95 % half-widths.
fn widen_by_alignment(energy: &mut crate::energy::ProbeEnergy, report: &wattflip_uflip::ProbeReport) {
    let Some(a) = energy.alignment.as_ref() else { return };
    let r = a.residual();
    let at = |ns: u64| r.shift_at(wattflip_energy::UnixNanos(i64::try_from(ns).unwrap_or(i64::MAX))).0.abs();
    let worst = report.runs.iter().map(|x| at(x.start_ns).max(at(x.end_ns))).fold(0.0, f64::max) + r.spread.0.abs();
    crate::energy::uncertain::add_align_residual(energy, wattflip_energy::Nanos(worst.round().max(0.0) as u64));
}

/// `alignment.json` in the result folder: the corrections applied and the residual left (the last
/// estimate, not corrected), for the energy's uncertainty.
fn write_alignment(
    dir: &std::path::Path,
    file: &std::path::Path,
    a: &wattflip_energy::Alignment,
    applied: &[wattflip_energy::Alignment],
) -> anyhow::Result<PathBuf> {
    let doc = serde_json::json!({
        "trace": file.display().to_string(),
        "corrections": applied.iter().map(|c| c.describe()).collect::<Vec<_>>(),
        "estimate": a.describe(),
        "residual": a.residual(),
    });
    let path = dir.join("alignment.json");
    std::fs::write(&path, serde_json::to_string_pretty(&doc)?).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The analysis `first`, its alignment checked, not assumed: beyond the bounds the import is
/// refused naming the estimate; with `auto` the trace is corrected and analysed again, each round
/// on the trace as corrected so far, until the runs' rises confirm a residual within
/// `AUTO_MAX_OFFSET` and `AUTO_MAX_RATE_ERROR`, or refused naming why not.
fn aligned(
    file: &std::path::Path,
    csv: &crate::energy::trace::CsvCircuit,
    auto: bool,
    first: crate::energy::ProbeEnergy,
    analyse: impl Fn(&wattflip_energy::PowerSeries, &mut dyn wattflip_energy::FineSamples) -> anyhow::Result<crate::energy::ProbeEnergy>,
) -> anyhow::Result<(crate::energy::ProbeEnergy, Vec<wattflip_energy::Alignment>)> {
    use wattflip_energy::align::{AutoStep, AUTO_MAX_RATE_ERROR, AUTO_RISE_MARGIN};
    let mut energy = first;
    let mut applied = Vec::new();
    let is_csv = file.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    while let Some(a) = energy.alignment.filter(|_| energy.refused.is_none()) {
        if !auto {
            anyhow::ensure!(
                a.acceptable(),
                "{}: trace not aligned with the probe: {}; fix --time-origin-ns / start_time_utc_ns / sample_rate_hz, or pass --align auto to correct it; nothing was written",
                file.display(),
                a.describe()
            );
            break;
        }
        match a.auto_step(applied.len()) {
            AutoStep::Done(_) => break,
            AutoStep::Refuse(why) => anyhow::bail!("{}: --align auto: {why}; nothing was written", file.display()),
            AutoStep::Correct => {}
        }
        // A CSV's time column cannot be rescaled: only its origin moves, so a rate error stays.
        anyhow::ensure!(
            !(is_csv && !applied.is_empty() && a.rate_estimated && a.rate_error.abs() > AUTO_MAX_RATE_ERROR),
            "{}: --align auto: a CSV's time column cannot be rescaled and its rate error stays beyond ±{} %: {}; convert it to raw f32 with a sidecar, or use --align check; nothing was written",
            file.display(),
            AUTO_MAX_RATE_ERROR * 100.0,
            a.describe()
        );
        println!(
            "aligned: corrected by {} (rises put {} ms after their first submits{})",
            a.describe(),
            AUTO_RISE_MARGIN.0 as f64 / 1e6,
            if is_csv { "; a CSV: its origin only" } else { "" }
        );
        // A CSV's origin is moved to put the rises right at the first run; moving it as if the rate
        // were rescaled too would leave the rate's drift since the origin as an offset.
        applied.push(if is_csv { wattflip_energy::Alignment { rate_error: 0.0, ..a.correction() } } else { a.correction() });
        let (series, _, mut fine) = crate::energy::trace::import_corrected(file, csv, &applied)?;
        energy = analyse(&series, fine.as_mut())?;
    }
    Ok((energy, applied))
}
