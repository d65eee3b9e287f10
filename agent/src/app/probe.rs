//! `wattflip-agent probe`: runs uFLIP micro-benchmarks (or `--calibrate`, or the load `--ladder`)
//! on a file or block device with power recorded around them, writes the result folder
//! (`report::folder`), prints the tables, and streams the results when `--collector` is given. A
//! new probe mode is a flag of [`ProbeCli`] and a branch in [`command`] calling into `probes/`.

use super::session::send_results;
use crate::clock::Clock;
use crate::config::Config;
use crate::probes::{self, convert, ProbeArgs};
use crate::report::folder;
use std::path::PathBuf;
use wattflip_infra::duration::{Bounded, HOUR};

#[derive(clap::Args, Debug)]
pub struct ProbeCli {
    /// File (created and preallocated) or block device to probe.
    #[arg(long, default_value = "wattflip-out/scratch.dat")]
    pub target: PathBuf,
    /// Size of a file target, e.g. 1GiB, 4GiB.
    #[arg(long, default_value = "1GiB")]
    pub size: String,
    /// Micro-benchmarks: comma-separated names (granularity, alignment, locality, partitioning,
    /// order, parallelism, mix, pause, bursts) or `all`.
    #[arg(long, default_value = "all")]
    pub bench: String,
    /// Reduced Granularity plan (SR, RR, SW, RW at 4, 32, 128 KiB): well under a minute on a file.
    #[arg(long)]
    pub quick: bool,
    /// Value lists and IO counts: spec (docs/uflip-method.md §4.3 lists, §2 counts: 1 044 runs with all; for a
    /// real drive), small (3–4 points per experiment, fits a 1 GiB file) or quick (--quick's).
    #[arg(long, default_value = "small", conflicts_with = "quick")]
    pub values: String,
    /// Bring the target to a known state first: random (uFLIP's), seq, or none.
    #[arg(long, default_value = "none")]
    pub format: String,
    /// Repetitions per value (uFLIP's nbRun).
    #[arg(long)]
    pub repetitions: Option<u32>,
    /// Seed of placements and random addresses (recorded in the report).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Result folder.
    #[arg(long, default_value = "wattflip-out")]
    pub out: PathBuf,
    /// Also write each run as a fio iolog v2 into this folder (byte-identical replay with fio).
    #[arg(long)]
    pub emit_fio_iolog: Option<PathBuf>,
    /// Also write every IO's response time as one CSV per run into this folder.
    #[arg(long)]
    pub io_trace: Option<PathBuf>,
    /// Serial (or identity) of a block device, or path of an existing file, whose data may be
    /// destroyed; repeatable.
    #[arg(long = "destroy-consent")]
    pub destroy_consent: Vec<String>,
    /// Also write a consented device or file that carries a filesystem, LUKS, LVM, RAID, swap or
    /// partition-table signature (found by libblkid). Separate from --destroy-consent on purpose.
    #[arg(long)]
    pub overwrite_signatures: bool,
    /// Run only the read-only benchmarks (allowed on any device without consent).
    #[arg(long)]
    pub read_only: bool,
    /// Also stream the results to this collector, e.g. http://127.0.0.1:50051.
    #[arg(long)]
    pub collector: Option<String>,
    /// Agent config: agent id and labels of streamed results, and the power sources
    /// (sysfs_root, rapl, hwmon, ipmi) recorded during the probe for per-run energy.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Time between power reads during the probe.
    #[arg(long, default_value = "5ms")]
    #[arg(value_parser = |s: &str| probes::config::POWER_INTERVAL.parse(s))]
    pub power_interval: std::time::Duration,
    /// Idle time recorded before the first run (the idle baseline of every run).
    #[arg(long, default_value = "1s")]
    #[arg(value_parser = |s: &str| probes::config::IDLE.parse(s))]
    pub idle: std::time::Duration,
    /// Wait after preparing the target (creating, filling or growing it) before the idle window,
    /// so the baseline is the idle device's, not its write-back of the fill.
    #[arg(long, default_value = "1s")]
    #[arg(value_parser = |s: &str| probes::config::SETTLE.parse(s))]
    pub settle: std::time::Duration,
    /// Relative 95 % half-width each run's energy should reach, e.g. 2%; `off` (the default) sets
    /// none and keeps uFLIP's IOCounts. With a target, a pilot measures how long each run takes,
    /// runs too short for the power source are lengthened (IOCount) within --energy-budget, and
    /// the plan is printed before the first run; runs that still miss it are low_confidence with
    /// the reason.
    #[arg(long, default_value = "off")]
    pub energy_target: String,
    /// Run time that lengthening runs for --energy-target may add to the probe, in all.
    #[arg(long, default_value = "10m")]
    #[arg(value_parser = |s: &str| probes::config::ENERGY_BUDGET.parse(s))]
    pub energy_budget: std::time::Duration,
    /// Time recorded after the last run, to see its background work.
    #[arg(long, default_value = "1s")]
    #[arg(value_parser = |s: &str| probes::config::TAIL.parse(s))]
    pub tail: std::time::Duration,
    /// Power zone to attribute energy to (default: the most drive-specific one found; a CPU/RAPL
    /// zone only when named here, since RAPL does not see the drive).
    #[arg(long)]
    pub power_zone: Option<String>,
    /// Pause between runs: a duration, or `auto` to choose each pause from the background tails
    /// measured on this target (earlier probes' in --out/tails/, and this probe's own as they
    /// end when power is recorded); see docs/energy-method.md.
    #[arg(long)]
    pub pause: Option<String>,
    /// Calibrate instead of probing: run uFLIP's preparation runs (SPE and the long SIO runs),
    /// choose IgnoreIO (start-up phase) and IOCount (running phase) per baseline, and store them in
    /// --out/calibration/ under the target's identity (serial, or a file's path), where later
    /// probes of the same target, also scheduled ones with this `out`, pick them up.
    #[arg(long)]
    pub calibrate: bool,
    /// Run the load ladder instead of uFLIP: active idle, then RR and RW at graduated fractions of
    /// the measured maximum IOPS, with power recorded (energy proportionality).
    #[arg(long)]
    pub ladder: bool,
    /// Ladder levels in percent of the maximum.
    #[arg(long, default_value = "10,20,30,40,50,60,70,80,90,100", value_delimiter = ',')]
    pub ladder_levels: Vec<u32>,
    /// How long each ladder level (and the active idle) is held.
    #[arg(long, default_value = "5s")]
    #[arg(value_parser = |s: &str| Bounded::new(std::time::Duration::from_millis(100), HOUR).parse(s))]
    pub ladder_hold: std::time::Duration,
    /// Ladder patterns (random read and write by default).
    #[arg(long, default_value = "RR,RW", value_delimiter = ',')]
    pub ladder_patterns: Vec<String>,
    /// Also climb a read/write mix: this percentage of reads (1 … 99), as uFLIP's RR-RW Mix,
    /// rounded to the nearest ratio it can interleave (70 → 2 RR : 1 RW).
    #[arg(long)]
    pub ladder_mix: Option<u32>,
    /// Do not record power during the probe.
    #[arg(long)]
    pub no_power: bool,
    /// The efficiency preset's flags (`--efficiency`, `--efficiency-*`, `--capacity`).
    #[command(flatten)]
    pub eff: super::efficiency::EfficiencyCli,
}

/// `probe`: the uFLIP probe (or `--calibrate`, or `--ladder`) with power recorded, its result
/// folder, and the collector when given.
pub fn command(p: ProbeCli) -> anyhow::Result<()> {
    let size = probes::parse_size(&p.size).map_err(|e| anyhow::anyhow!("--size {e}"))?;
    let benches = probes::parse_benches(&p.bench).map_err(|e| anyhow::anyhow!("--bench: {e}"))?;
    let format = probes::parse_format(&p.format).map_err(|e| anyhow::anyhow!("--format {e}"))?;
    let values = probes::ValuesProfile::parse(&p.values).map_err(|e| anyhow::anyhow!("--values {e}"))?;
    let cfg = super::load_config(p.config.as_deref())?;
    let mut args = probe_args(&p, size, benches, format, values)?;
    let started = std::time::Instant::now();
    let show = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // SIGINT, SIGTERM and SIGHUP stop the IO of every mode between two IOs; what completed is
    // written, and the command fails saying so.
    let stop = stop_on_signal()?;
    args.stop = Some(stop.clone());
    if p.calibrate {
        return calibrate(&args, show, &cfg);
    }
    if let Some((c, from)) = probes::apply_stored_calibration(&mut args) {
        println!("using the calibration of {} from {} (IOCount {:?}, IgnoreIO {:?})", c.target, from.display(), c.counts.io_count, c.counts.ignore_io);
    }
    let energy_opts = probes::EnergyOptions {
        sysfs_root: cfg.sysfs_root.clone(),
        kinds: cfg.kinds.clone(),
        period: p.power_interval,
        idle: p.idle,
        settle: p.settle,
        tail: p.tail,
        zone: p.power_zone.clone(),
        drives: cfg.drives.clone(),
        energy_target: crate::energy::recorded::parse_target(&p.energy_target).map_err(|e| anyhow::anyhow!("--energy-target {e}"))?,
        energy_budget: p.energy_budget,
    };
    let host = probes::Host { clock: Clock::new(), runner: std::sync::Arc::new(wattflip_drives::SystemRunner::new()) };
    if p.ladder {
        return ladder(&p, &args, size, &cfg, &energy_opts, &host);
    }
    if p.eff.efficiency {
        return super::efficiency::command(&p.eff, &efficiency_target(&p, size), &cfg, &energy_opts, &host, stop);
    }
    let tags = wattflip_proto::schema::HostTags { host: cfg.agent_id.clone(), labels: cfg.labels.clone() };
    let measured = match probes::run_probe_maybe_measured(&args, show, (!p.no_power).then_some(&energy_opts), "--no-power", &host) {
        Err(probes::ProbeCmdError::Probe(wattflip_uflip::ProbeError::Interrupted(report))) => {
            let written = folder::write_all(&p.out, &report, None, None, &tags)?;
            anyhow::bail!(
                "interrupted by a signal after {} completed run(s): they are in {}/ ({} line-protocol points, no per-run energy); the target was left as it is",
                report.runs.len(),
                p.out.display(),
                written.lines
            );
        }
        r => r?,
    };
    let batches = if p.collector.is_some() { convert::batches(&measured) } else { Vec::new() };
    let full_rate: usize = measured.recording.iter().map(|z| z.t.len()).sum();
    let report = measured.report;
    let written = folder::write_all(&p.out, &report, measured.energy.as_ref(), measured.power.as_ref(), &tags)?;
    print!("{}", wattflip_uflip::summary_table(&report));
    match &measured.energy {
        Some(e) => print!("\n{}", crate::energy::summary_table(e)),
        None => println!("\nNo per-run energy: {}", measured.energy_note),
    }
    let unsupported = report.runs.iter().filter(|r| r.status != wattflip_uflip::RunStatus::Ok).count();
    println!(
        "\n{} runs ({} unsupported) on {} in {:.1} s; results in {}/ ({} line-protocol points): {}",
        report.runs.len(),
        unsupported,
        report.target.path.display(),
        started.elapsed().as_secs_f64(),
        p.out.display(),
        written.lines,
        written.files.iter().filter_map(|f| f.file_name()).map(|f| f.to_string_lossy().into_owned()).collect::<Vec<_>>().join(", ")
    );
    if let Some(url) = p.collector {
        let n = batches.len();
        send_results(&url, &cfg, batches, &p.out, "probe")?;
        println!("sent {full_rate} full-rate power samples ({} zones) in {} batches", measured.recording.len(), n.saturating_sub(1));
    }
    Ok(())
}

/// `probe --efficiency`'s target, seed, result folder and collector (a file target of `size` bytes).
fn efficiency_target(p: &ProbeCli, size: u64) -> super::efficiency::Target {
    super::efficiency::Target {
        path: p.target.clone(),
        size,
        destroy_consent: p.destroy_consent.clone(),
        seed: p.seed,
        out: p.out.clone(),
        collector: p.collector.clone(),
    }
}

/// A flag set on SIGINT, SIGTERM or SIGHUP ([`super::drive_signal`]), watched by a thread of its
/// own; the handlers are installed before this returns, so no signal during the probe's IO kills
/// the process with a run half done.
fn stop_on_signal() -> anyhow::Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (armed_tx, armed_rx) = std::sync::mpsc::channel();
    let flag = stop.clone();
    std::thread::spawn(move || {
        rt.block_on(async {
            let mut signal = std::pin::pin!(super::drive_signal());
            // The first poll installs the handlers.
            let early = tokio::select! { biased; _ = signal.as_mut() => true, _ = std::future::ready(()) => false };
            let _ = armed_tx.send(());
            if !early {
                signal.await;
            }
            tracing::warn!("signal received: stopping the probe's IO; the completed runs are kept");
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
        })
    });
    armed_rx.recv().map_err(|_| anyhow::anyhow!("the signal watcher did not start"))?;
    Ok(stop)
}

/// The probe's arguments from the command line (a file target of `size` bytes).
fn probe_args(
    p: &ProbeCli,
    size: u64,
    benches: Vec<wattflip_uflip::Bench>,
    format: Option<wattflip_uflip::FormatKind>,
    values: probes::ValuesProfile,
) -> anyhow::Result<ProbeArgs> {
    Ok(ProbeArgs {
        target: p.target.clone(),
        size,
        benches,
        quick: p.quick,
        values,
        overrides: probes::PlanOverrides::default(),
        format,
        repetitions: p.repetitions,
        out: p.out.clone(),
        emit_fio_iolog: p.emit_fio_iolog.clone(),
        io_trace: p.io_trace.clone(),
        destroy_consent: p.destroy_consent.clone(),
        overwrite_signatures: p.overwrite_signatures,
        seed: p.seed,
        read_only: p.read_only,
        counts: None,
        stop: None,
        pause: pause_choice(p)?,
    })
}

/// `--pause`: the plan's, a fixed duration, or `auto` (saying where its tails come from).
fn pause_choice(p: &ProbeCli) -> anyhow::Result<probes::PauseChoice> {
    Ok(match p.pause.as_deref() {
        None => probes::PauseChoice::Plan,
        Some("auto") => {
            match probes::pauses::stored_tails(&p.out, &p.target) {
                Some((_, from)) => println!("--pause auto: per-run pauses from the background tails in {}", from.display()),
                None => println!(
                    "--pause auto: no tails of {} stored in {}; per-run pauses from the tails this probe measures, the plan's pause until then",
                    p.target.display(),
                    p.out.join(probes::pauses::TAILS_DIR).display()
                ),
            }
            probes::PauseChoice::Auto
        }
        Some(s) => probes::PauseChoice::Fixed(Bounded::new(std::time::Duration::ZERO, HOUR).parse(s).map_err(|e| anyhow::anyhow!("--pause: {e}, or auto"))?),
    })
}

/// Where `probe --calibrate` stopped by a signal writes the preparation runs it completed.
pub const CALIBRATION_INTERRUPTED_DIR: &str = "calibration-interrupted";

/// `probe --calibrate`: the preparation runs, and the counts stored for the target. Stopped by a
/// signal, it writes the completed preparation runs to `<out>/calibration-interrupted/` (not over
/// the probe results of `<out>`), stores no calibration, and fails saying so.
fn calibrate(args: &ProbeArgs, show: bool, cfg: &Config) -> anyhow::Result<()> {
    let (report, c, stored_in) = match probes::calibrate(args, show) {
        Err(probes::ProbeCmdError::Probe(wattflip_uflip::ProbeError::Interrupted(report))) => {
            let dir = args.out.join(CALIBRATION_INTERRUPTED_DIR);
            let tags = wattflip_proto::schema::HostTags { host: cfg.agent_id.clone(), labels: cfg.labels.clone() };
            folder::write_all(&dir, &report, None, None, &tags)?;
            anyhow::bail!(
                "interrupted by a signal after {} completed preparation run(s): they are in {}/ (runs.jsonl, report.json); no calibration was stored (a partial one would size later probes with default counts for the baselines it missed); the target was left as it is",
                report.runs.len(),
                dir.display()
            );
        }
        r => r?,
    };
    println!("{} preparation runs on {}", report.runs.len(), report.target.path.display());
    println!("{:<4} {:>10} {:>10}", "base", "IgnoreIO", "IOCount");
    for (i, b) in ["SR", "RR", "SW", "RW"].iter().enumerate() {
        println!("{b:<4} {:>10} {:>10}", c.counts.ignore_io[i], c.counts.io_count[i]);
    }
    match &c.spe {
        Some(e) => println!("{}", e.describe()),
        None => println!("SPE: no completed SPE run in this calibration"),
    }
    println!("stored in {} for {}", stored_in.display(), c.target);
    Ok(())
}

/// `probe --ladder`: the load ladder with power recorded, its files, and the collector.
fn ladder(p: &ProbeCli, args: &ProbeArgs, size: u64, cfg: &Config, energy_opts: &probes::EnergyOptions, host: &probes::Host) -> anyhow::Result<()> {
    let mut patterns = Vec::new();
    for name in &p.ladder_patterns {
        patterns.push(wattflip_uflip::Baseline::parse(name).ok_or_else(|| anyhow::anyhow!("--ladder-patterns: `{name}` is not SR, RR, SW or RW"))?);
    }
    anyhow::ensure!(
        p.ladder_levels.iter().all(|&l| (1..=100).contains(&l)) && p.ladder_levels.contains(&100),
        "--ladder-levels: percentages in 1..=100, including 100 (the peak that normalises the curve)"
    );
    let mix_ratio = match p.ladder_mix {
        Some(pct) => {
            let (ratio, got) = probes::ladder::mix_ratio(pct).map_err(anyhow::Error::msg)?;
            if (got - f64::from(pct)).abs() > 1e-9 {
                println!("--ladder-mix {pct}: uFLIP's Mix interleaves ratio {ratio}, {got:.1} % reads");
            }
            Some(ratio)
        }
        None => None,
    };
    let args = probes::ladder::LadderArgs {
        target: args.target.clone(),
        size,
        destroy_consent: args.destroy_consent.clone(),
        patterns,
        mix_ratio,
        io_size: 4096,
        levels: p.ladder_levels.clone(),
        hold: p.ladder_hold,
        seed: p.seed.unwrap_or(200),
        stop: args.stop.clone(),
    };
    let l = probes::ladder::run(&args, energy_opts, host)?;
    print!("{}", probes::ladder::table(&l));
    let tags = wattflip_proto::schema::HostTags { host: cfg.agent_id.clone(), labels: cfg.labels.clone() };
    folder::write_ladder(&p.out, &l, &tags)?;
    if l.interrupted {
        anyhow::bail!(
            "interrupted by a signal after {} completed ladder level(s): they are in {}/ (ladder.jsonl, ladder.lp; the level in progress is left out, nothing was sent); the target was left as it is",
            l.levels.len(),
            p.out.display()
        );
    }
    println!("results in {}/ (ladder.jsonl, ladder.lp)", p.out.display());
    if let Some(url) = &p.collector {
        send_results(url, cfg, vec![wattflip_proto::v1::Batch { probe_runs: l.runs, ..Default::default() }], &p.out, "probe")?;
    }
    Ok(())
}
