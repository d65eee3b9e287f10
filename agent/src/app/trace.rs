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

/// Corrections `--align auto` applies at most (a coarse one, then from the runs' rises).
const ALIGN_ROUNDS: usize = 3;

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
    let mut energy = aligned(&file, &csv, auto, analyse(&series, fine.as_mut())?, analyse)?;
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
    let written = crate::report::folder::write_energy(&input, &only, &energy, &tags)?;
    println!("wrote {}", written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
    if let Some(url) = collector {
        send_results(&url, &cfg, vec![crate::probes::convert::batch(&only, Some(&energy))], &input, "trace")?;
    }
    Ok(())
}

/// The analysis `first`, its alignment checked, not assumed: beyond the bounds the import is
/// refused naming the estimate, or (`auto`) the trace is corrected and analysed again, each round
/// on the trace as corrected so far.
fn aligned(
    file: &std::path::Path,
    csv: &crate::energy::trace::CsvCircuit,
    auto: bool,
    first: crate::energy::ProbeEnergy,
    analyse: impl Fn(&wattflip_energy::PowerSeries, &mut dyn wattflip_energy::FineSamples) -> anyhow::Result<crate::energy::ProbeEnergy>,
) -> anyhow::Result<crate::energy::ProbeEnergy> {
    let mut energy = first;
    let mut applied = Vec::new();
    while let Some(a) = energy.alignment.filter(|a| energy.refused.is_none() && !a.acceptable()) {
        anyhow::ensure!(
            auto,
            "{}: trace not aligned with the probe: {}; fix --time-origin-ns / start_time_utc_ns / sample_rate_hz, or pass --align auto to correct it; nothing was written",
            file.display(),
            a.describe()
        );
        anyhow::ensure!(
            applied.len() < ALIGN_ROUNDS,
            "{}: still not aligned after {ALIGN_ROUNDS} corrections: {}; nothing was written",
            file.display(),
            a.describe()
        );
        applied.push(a);
        println!("aligned: corrected by {}", a.describe());
        let (series, _, mut fine) = crate::energy::trace::import_corrected(file, csv, &applied)?;
        energy = analyse(&series, fine.as_mut())?;
    }
    Ok(energy)
}
