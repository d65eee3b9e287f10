//! `wattflip-agent`: parse the command line, load the config, dispatch to the library.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use wattflip_agent::config::Config;
use wattflip_agent::drives::DriveReport;
use wattflip_agent::runtime::{self, Clock, RunOptions};
use wattflip_agent::sensors::discover_all;

/// Samples power and temperature, runs storage probes, and streams to a wattflip collector.
#[derive(Parser, Debug)]
#[command(name = "wattflip-agent", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Sample sources on an interval and stream them to the collector.
    Run {
        /// Agent config (TOML).
        #[arg(long)]
        config: PathBuf,
        /// Stop after this many sampling ticks, once everything is acknowledged.
        #[arg(long)]
        samples: Option<u64>,
    },
    /// Print the storage devices, power sources and temperature sensors this host has.
    Inventory {
        /// Agent config (for sysfs_root and the enabled sources); defaults apply without it.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Read sysfs from here instead of /sys (overrides the config).
        #[arg(long)]
        sysfs_root: Option<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Check a config file and print every problem, then exit.
    CheckConfig {
        #[arg(long)]
        config: PathBuf,
    },
    /// Run uFLIP micro-benchmarks on a file or block device and write the results to a folder.
    Probe(Box<ProbeCli>),
    /// Shunt and oscilloscope traces.
    #[command(subcommand)]
    Trace(TraceCommand),
    /// NVMe power governor (FID 02h, Intel FID C6h): show the power states, set one, or sweep them
    /// with IO probes.
    #[command(subcommand)]
    Governor(GovernorCli),
    /// Render the HTML report of a probe result folder, or of one host's probes from InfluxDB.
    Report {
        /// Result folder of a probe (holds report.json).
        #[arg(long = "in", required_unless_present = "influx_url", conflicts_with = "influx_url")]
        input: Option<PathBuf>,
        /// Read the probes of --host from this InfluxDB (the collector's), e.g. http://influx:8086.
        #[arg(long, requires = "host")]
        influx_url: Option<String>,
        /// InfluxDB database the collector writes.
        #[arg(long, default_value = "wattflip", requires = "influx_url")]
        influx_db: String,
        /// Agent id (the `host` tag) whose probes to report.
        #[arg(long, requires = "influx_url")]
        host: Option<String>,
        /// How far back to look in InfluxDB (24h, 7d, 90m).
        #[arg(long, default_value = "24h", requires = "influx_url")]
        since: String,
        /// Output HTML file.
        #[arg(short = 'o', long = "out", default_value = "report.html")]
        output: PathBuf,
    },
}

#[derive(clap::Args, Debug)]
struct ProbeCli {
    /// File (created and preallocated) or block device to probe.
    #[arg(long, default_value = "wattflip-out/scratch.dat")]
    target: PathBuf,
    /// Size of a file target, e.g. 1GiB, 4GiB.
    #[arg(long, default_value = "1GiB")]
    size: String,
    /// Micro-benchmarks: comma-separated names (granularity, alignment, locality, partitioning,
    /// order, parallelism, mix, pause, bursts) or `all`.
    #[arg(long, default_value = "all")]
    bench: String,
    /// Reduced Granularity plan (SR, RR, SW, RW at 4, 32, 128 KiB): well under a minute on a file.
    #[arg(long)]
    quick: bool,
    /// Value lists and IO counts: spec (ufip.md §4.3 lists, §2 counts: 1 044 runs with all; for a
    /// real drive), small (3–4 points per experiment, fits a 1 GiB file) or quick (--quick's).
    #[arg(long, default_value = "small", conflicts_with = "quick")]
    values: String,
    /// Bring the target to a known state first: random (uFLIP's), seq, or none.
    #[arg(long, default_value = "none")]
    format: String,
    /// Repetitions per value (uFLIP's nbRun).
    #[arg(long)]
    repetitions: Option<u32>,
    /// Seed of placements and random addresses (recorded in the report).
    #[arg(long)]
    seed: Option<u64>,
    /// Result folder.
    #[arg(long, default_value = "wattflip-out")]
    out: PathBuf,
    /// Also write each run as a fio iolog v2 into this folder (byte-identical replay with fio).
    #[arg(long)]
    emit_fio_iolog: Option<PathBuf>,
    /// Also write every IO's response time as one CSV per run into this folder.
    #[arg(long)]
    io_trace: Option<PathBuf>,
    /// Serial (or identity) of a block device whose data may be destroyed; repeatable.
    #[arg(long = "destroy-consent")]
    destroy_consent: Vec<String>,
    /// Run only the read-only benchmarks (allowed on any device without consent).
    #[arg(long)]
    read_only: bool,
    /// Also stream the results to this collector, e.g. http://127.0.0.1:50051.
    #[arg(long)]
    collector: Option<String>,
    /// Agent config: agent id and labels of streamed results, and the power sources
    /// (sysfs_root, rapl, hwmon, ipmi) recorded during the probe for per-run energy.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Time between power reads during the probe.
    #[arg(long, default_value = "5ms")]
    power_interval: humantime::Duration,
    /// Idle time recorded before the first run (the idle baseline of every run).
    #[arg(long, default_value = "1s")]
    idle: humantime::Duration,
    /// Time recorded after the last run, to see its background work.
    #[arg(long, default_value = "1s")]
    tail: humantime::Duration,
    /// Power zone to attribute energy to (default: the most drive-specific one found; a CPU/RAPL
    /// zone only when named here, since RAPL does not see the drive).
    #[arg(long)]
    power_zone: Option<String>,
    /// Pause between runs: a duration, or `auto` to choose each pause from the background tails
    /// measured on this target (earlier probes' in --out/tails/, and this probe's own as they
    /// end when power is recorded); see docs/energy-method.md.
    #[arg(long)]
    pause: Option<String>,
    /// Calibrate instead of probing: run uFLIP's preparation runs (SPE and the long SIO runs),
    /// choose IgnoreIO (start-up phase) and IOCount (running phase) per baseline, and store them in
    /// --out/calibration/ under the target's identity (serial, or a file's path), where later
    /// probes of the same target, also scheduled ones with this `out`, pick them up.
    #[arg(long)]
    calibrate: bool,
    /// Run the load ladder instead of uFLIP: active idle, then RR and RW at graduated fractions of
    /// the measured maximum IOPS, with power recorded (energy proportionality).
    #[arg(long)]
    ladder: bool,
    /// Ladder levels in percent of the maximum.
    #[arg(long, default_value = "10,20,30,40,50,60,70,80,90,100", value_delimiter = ',')]
    ladder_levels: Vec<u32>,
    /// How long each ladder level (and the active idle) is held.
    #[arg(long, default_value = "5s")]
    ladder_hold: humantime::Duration,
    /// Ladder patterns (random read and write by default).
    #[arg(long, default_value = "RR,RW", value_delimiter = ',')]
    ladder_patterns: Vec<String>,
    /// Also climb a read/write mix: this percentage of reads (1 … 99), as uFLIP's RR-RW Mix,
    /// rounded to the nearest ratio it can interleave (70 → 2 RR : 1 RW).
    #[arg(long)]
    ladder_mix: Option<u32>,
    /// Do not record power during the probe.
    #[arg(long)]
    no_power: bool,
}

#[derive(Subcommand, Debug)]
enum TraceCommand {
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
        /// gets the ratio of datasheet W × duration to the measured energy (ufip.md §11.7).
        #[arg(long)]
        datasheet_w: Option<f64>,
        /// Also send the runs with their energy to this collector.
        #[arg(long)]
        collector: Option<String>,
        /// Agent config, for the agent id and labels.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum GovernorCli {
    /// Print the power-state table, the current state and whether it can be changed.
    Show {
        #[command(flatten)]
        common: GovernorCommon,
    },
    /// Select a power state (operational states only), read it back, record the outcome. The new
    /// state stays until changed again or the controller resets. With --intel-mode instead: set
    /// Intel's PowerGovernorMode (FID C6h, allow-listed models), hold it, then restore the original.
    Set {
        #[command(flatten)]
        common: GovernorCommon,
        /// Power state to select (PSn).
        #[arg(long, required_unless_present = "intel_mode", conflicts_with = "intel_mode")]
        state: Option<u32>,
        /// Intel PowerGovernorMode (FID C6h): 0 = 25 W, 1 = 20 W, 2 = 10 W. The original mode is
        /// saved in a state file first and put back after --hold, on SIGTERM/SIGINT, on error,
        /// and at the next start after a crash.
        #[arg(long)]
        intel_mode: Option<u32>,
        /// How long to hold --intel-mode before restoring, e.g. 10m; without it, until
        /// SIGTERM/SIGINT.
        #[arg(long, requires = "intel_mode")]
        hold: Option<String>,
    },
    /// Measure IO patterns in every operational power state, then restore the original state
    /// (also on error, SIGTERM/SIGINT, and at the next start after a crash).
    Sweep {
        #[command(flatten)]
        common: GovernorCommon,
        /// File (created) or block device the patterns run on; a block device needs its serial in
        /// drives.destroy_consent for write patterns.
        #[arg(long)]
        target: PathBuf,
        /// Size of a file target, e.g. 1GiB.
        #[arg(long, default_value = "1GiB")]
        size: String,
        /// Patterns, comma-separated (overrides drives.sweep_patterns), e.g. SW:128KiB,RR:4KiB.
        #[arg(long)]
        patterns: Option<String>,
        /// Wait after each state change before measuring (overrides drives.sweep_settle), e.g. 2s.
        #[arg(long)]
        settle: Option<String>,
        /// Seed of the placements and random addresses.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

#[derive(clap::Args, Debug)]
struct GovernorCommon {
    /// NVMe controller or namespace, e.g. /dev/nvme0 or /dev/nvme0n1.
    #[arg(long)]
    device: String,
    /// Agent config ([drives] tool paths, state_dir, patterns; agent id and labels).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Also stream the records to this collector, e.g. http://127.0.0.1:50051.
    #[arg(long)]
    collector: Option<String>,
    /// Folder for the records (`governor-<command>.lp`).
    #[arg(long, default_value = "wattflip-out")]
    out: PathBuf,
}

fn main() -> std::process::ExitCode {
    wattflip_infra::cli::main_with("wattflip-agent", || dispatch(Cli::parse()))
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run { config, samples } => {
            let cfg = Config::from_file(&config)?;
            let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            let s = rt.block_on(runtime::run(cfg, RunOptions { samples }, shutdown_signal()))?;
            eprintln!(
                "wattflip-agent: {} ticks, {} power and {} temperature samples, {} sensor errors; \
                 {} batches sent, {} acknowledged, {} dropped, {} rejected, {} unacknowledged at exit",
                s.ticks, s.power_samples, s.temperature_samples, s.sensor_errors,
                s.export.batches, s.export.acked, s.export.dropped, s.export.rejected, s.export.unacked_at_exit
            );
            if s.export.unacked_at_exit > 0 {
                anyhow::bail!("{} batch(es) were not acknowledged by the collector", s.export.unacked_at_exit);
            }
            Ok(())
        }
        Command::Inventory { config, sysfs_root, json } => {
            let mut cfg = match config {
                Some(c) => Config::from_file(&c)?,
                None => Config::defaults()?,
            };
            if let Some(root) = sysfs_root {
                cfg.sysfs_root = root;
            }
            let clock = Clock::new();
            let mut found = discover_all(&cfg.sysfs_root, &cfg.kinds);
            let drives = DriveReport::gather(&cfg, std::sync::Arc::new(wattflip_drives::SystemRunner::new()), &clock);
            let hello = runtime::hello(&cfg, &found, &drives.inventory, drives.sensors.clone(), &clock);
            let inv = hello.inventory.unwrap_or_default();
            if json {
                let mut v = inventory_json(&inv, &mut found);
                v["drives"] = drives.json();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}{}", inventory_table(&inv, &mut found), drives.table());
            }
            Ok(())
        }
        Command::Probe(p) => probe(*p),
        Command::Trace(TraceCommand::Import { file, input, run, shunt_ohms, supply_volts, time_unit, time_origin_ns, datasheet_w, collector, config }) => {
            let unit = match time_unit.as_str() {
                "s" => wattflip_energy::TimeUnit::Seconds,
                "ms" => wattflip_energy::TimeUnit::Millis,
                "us" => wattflip_energy::TimeUnit::Micros,
                "ns" => wattflip_energy::TimeUnit::Nanos,
                other => anyhow::bail!("--time-unit `{other}`: use s, ms, us or ns"),
            };
            let cfg = load_config(config.as_deref())?;
            let csv = wattflip_agent::energy::trace::CsvCircuit { shunt_ohms, supply_volts, time_unit: unit, time_origin_ns };
            let path = input.join("report.json");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {} (is {} a probe result folder?)", path.display(), input.display()))?;
            let mut report: wattflip_uflip::ProbeReport =
                serde_json::from_str(&text).with_context(|| format!("{} is not a probe report", path.display()))?;
            if let Some(r) = run {
                report.runs.retain(|x| x.run_id == r);
                anyhow::ensure!(!report.runs.is_empty(), "--run {r}: no such run in {}", path.display());
            }
            let (series, summary) = wattflip_agent::energy::trace::import(&file, &csv)?;
            let energy = wattflip_agent::energy::analyze(
                &report,
                &series,
                None,
                &format!("trace:{}", file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()),
                &wattflip_energy::RunDetectConfig::default(),
                datasheet_w,
            );
            println!(
                "{}: {} samples, {:.6} J over {:.3} s (mean {:.3} W)",
                file.display(), summary.samples, summary.energy.0, summary.duration.as_secs_f64(), summary.mean_power.0
            );
            print!("{}", wattflip_agent::energy::summary_table(&energy));
            let tags = wattflip_proto::schema::HostTags { host: cfg.agent_id.clone(), labels: cfg.labels.clone() };
            let only = wattflip_uflip::ProbeReport { runs: report.runs.iter().filter(|r| energy.for_run(r.run_id).is_some()).cloned().collect(), ..report.clone() };
            let written = wattflip_agent::probes::output::write_energy(&input, &only, &energy, &tags)?;
            println!("wrote {}", written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
            if let Some(url) = collector {
                send_results(&url, &cfg, vec![wattflip_agent::probes::convert::batch(&only, Some(&energy))], &input)?;
            }
            Ok(())
        }
        Command::Governor(g) => governor(g),
        Command::Report { input, influx_url, influx_db, host, since, output } => {
            use wattflip_agent::report::{html, influx};
            let page = match (input, influx_url, host) {
                (Some(input), _, _) => {
                    // The same reading and rendering as the probe's own report.html, energy and
                    // recorded power included.
                    use wattflip_agent::probes::output;
                    let f = output::read_folder(&input)?;
                    output::render_html(&f.report, f.energy.as_ref(), f.power.as_ref())
                }
                (None, Some(url), Some(host)) => {
                    html::render_report(&influx::load(&influx::Source { url, database: influx_db, host, since })?)
                }
                // clap enforces --in or --influx-url with --host.
                _ => anyhow::bail!("give --in DIR, or --influx-url URL with --host AGENT_ID"),
            };
            std::fs::write(&output, page).with_context(|| format!("cannot write {}", output.display()))?;
            println!("wrote {}", output.display());
            Ok(())
        }
        Command::CheckConfig { config } => {
            let cfg = Config::from_file(&config)?;
            println!(
                "{}: OK (agent {}, collector {}, interval {:?}, sysfs {})",
                config.display(),
                cfg.agent_id,
                cfg.collector.urls.join(", "),
                cfg.sampling_interval,
                cfg.sysfs_root.display()
            );
            Ok(())
        }
    }
}

fn load_config(path: Option<&std::path::Path>) -> anyhow::Result<Config> {
    Ok(match path {
        Some(c) => Config::from_file(c)?,
        None => Config::defaults()?,
    })
}

fn governor(g: GovernorCli) -> anyhow::Result<()> {
    use wattflip_agent::drives::governor::{execute, Request, SweepArgs};
    use wattflip_agent::drives::sweep::SweepPattern;
    let (common, req) = match g {
        GovernorCli::Show { common } => (common, None),
        GovernorCli::Set { common, state, intel_mode, hold } => {
            let req = match (state, intel_mode) {
                (Some(state), _) => Request::Set { state },
                (None, Some(mode)) => {
                    let hold = hold
                        .map(|h| humantime::parse_duration(&h).map_err(|e| anyhow::anyhow!("--hold `{h}`: {e}; write e.g. 10m")))
                        .transpose()?;
                    Request::IntelMode { mode, hold }
                }
                (None, None) => anyhow::bail!("governor set needs --state N or --intel-mode N"),
            };
            (common, Some(req))
        }
        GovernorCli::Sweep { common, target, size, patterns, settle, seed } => {
            let cfg = load_config(common.config.as_deref())?;
            let size = size.parse::<bytesize::ByteSize>().map_err(|e| anyhow::anyhow!("--size `{size}`: {e}; write e.g. 1GiB"))?.as_u64();
            let patterns = match patterns {
                Some(list) => list.split(',').map(|p| p.parse::<SweepPattern>()).collect::<Result<Vec<_>, _>>()
                    .map_err(|e| anyhow::anyhow!("--patterns: {e}"))?,
                None => cfg.drives.sweep_patterns.clone(),
            };
            let settle = match settle {
                Some(s) => humantime::parse_duration(&s).map_err(|e| anyhow::anyhow!("--settle `{s}`: {e}; write e.g. 2s"))?,
                None => cfg.drives.sweep_settle,
            };
            (common, Some(Request::Sweep(SweepArgs { target, size, patterns, settle, seed })))
        }
    };
    let cfg = load_config(common.config.as_deref())?;
    let text = execute(cfg, &common.device, req.unwrap_or(Request::Show), &common.out, common.collector.as_deref(), shutdown_signal())?;
    print!("{text}");
    Ok(())
}

fn probe(p: ProbeCli) -> anyhow::Result<()> {
    use wattflip_agent::probes::{self, convert, output, ProbeArgs};
    let size = probes::parse_size(&p.size).map_err(|e| anyhow::anyhow!("--size {e}"))?;
    let benches = probes::parse_benches(&p.bench).map_err(|e| anyhow::anyhow!("--bench: {e}"))?;
    let format = probes::parse_format(&p.format).map_err(|e| anyhow::anyhow!("--format {e}"))?;
    let values = probes::ValuesProfile::parse(&p.values).map_err(|e| anyhow::anyhow!("--values {e}"))?;
    let cfg = load_config(p.config.as_deref())?;
    let args = ProbeArgs {
        target: p.target.clone(),
        size,
        benches,
        quick: p.quick,
        values,
        overrides: probes::PlanOverrides::default(),
        format,
        repetitions: p.repetitions,
        out: p.out.clone(),
        emit_fio_iolog: p.emit_fio_iolog,
        io_trace: p.io_trace,
        destroy_consent: p.destroy_consent,
        seed: p.seed,
        read_only: p.read_only,
        counts: None,
        pause: match p.pause.as_deref() {
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
            Some(s) => probes::PauseChoice::Fixed(humantime::parse_duration(s).map_err(|e| anyhow::anyhow!("--pause `{s}`: {e}; write e.g. 200ms or auto"))?),
        },
    };
    let started = std::time::Instant::now();
    let mut args = args;
    let show = std::io::IsTerminal::is_terminal(&std::io::stderr());
    if p.calibrate {
        let (report, c, stored_in) = probes::calibrate(&args, show)?;
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
        return Ok(());
    }
    if let Some((c, from)) = probes::apply_stored_calibration(&mut args) {
        println!("using the calibration of {} from {} (IOCount {:?}, IgnoreIO {:?})", c.target, from.display(), c.counts.io_count, c.counts.ignore_io);
    }
    let energy_opts = probes::EnergyOptions {
        sysfs_root: cfg.sysfs_root.clone(),
        kinds: cfg.kinds.clone(),
        period: p.power_interval.into(),
        idle: p.idle.into(),
        tail: p.tail.into(),
        zone: p.power_zone.clone(),
        drives: cfg.drives.clone(),
    };
    if p.ladder {
        let mut patterns = Vec::new();
        for name in &p.ladder_patterns {
            patterns.push(
                wattflip_uflip::Baseline::parse(name).ok_or_else(|| anyhow::anyhow!("--ladder-patterns: `{name}` is not SR, RR, SW or RW"))?,
            );
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
            hold: p.ladder_hold.into(),
            seed: p.seed.unwrap_or(200),
        };
        let l = probes::ladder::run(&args, &energy_opts)?;
        print!("{}", probes::ladder::table(&l));
        let tags = wattflip_proto::schema::HostTags { host: cfg.agent_id.clone(), labels: cfg.labels.clone() };
        probes::output::write_ladder(&p.out, &l, &tags)?;
        println!("results in {}/ (ladder.jsonl, ladder.lp)", p.out.display());
        if let Some(url) = &p.collector {
            send_results(url, &cfg, vec![wattflip_proto::v1::Batch { probe_runs: l.runs, ..Default::default() }], &p.out)?;
        }
        return Ok(());
    }
    let measured = probes::run_probe_maybe_measured(&args, show, (!p.no_power).then_some(&energy_opts), "--no-power")?;
    let batches = if p.collector.is_some() { convert::batches(&measured) } else { Vec::new() };
    let full_rate: usize = measured.recording.iter().map(|z| z.t.len()).sum();
    let report = measured.report;
    let tags = wattflip_proto::schema::HostTags { host: cfg.agent_id.clone(), labels: cfg.labels.clone() };
    let written = output::write_all(&p.out, &report, measured.energy.as_ref(), measured.power.as_ref(), &tags)?;
    print!("{}", wattflip_uflip::summary_table(&report));
    match &measured.energy {
        Some(e) => print!("\n{}", wattflip_agent::energy::summary_table(e)),
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
        send_results(&url, &cfg, batches, &p.out)?;
        println!("sent {full_rate} full-rate power samples ({} zones) in {} batches", measured.recording.len(), n.saturating_sub(1));
    }
    Ok(())
}

/// Streams batches of results to a collector and waits until all are acknowledged.
fn send_results(url: &str, cfg: &Config, batches: Vec<wattflip_proto::v1::Batch>, kept_in: &std::path::Path) -> anyhow::Result<()> {
    let total = batches.len() as u64;
    let clock = Clock::new();
    let hello = runtime::command_hello(cfg, std::sync::Arc::new(wattflip_drives::SystemRunner::new()), &clock);
    let mut cfg = cfg.clone();
    cfg.collector.urls = vec![url.to_string()];
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let s = rt
        .block_on(wattflip_agent::probes::stream::send(&cfg, hello, batches, std::time::Duration::from_secs(60)))
        .context("--collector needs --config with a [tls] section")?;
    if s.acked < total || s.unacked_at_exit > 0 {
        anyhow::bail!("the collector at {url} did not acknowledge the results (they are still in {})", kept_in.display());
    }
    println!("sent to the collector at {url}: acknowledged");
    Ok(())
}

fn inventory_json(inv: &wattflip_proto::v1::Inventory, found: &mut wattflip_agent::sensors::Discovered) -> serde_json::Value {
    use serde_json::json;
    let temps: Vec<_> = found
        .temperature
        .iter_mut()
        .map(|t| {
            let d = t.describe();
            let reading = t.read();
            json!({"source": d.source, "device": d.device, "sensor": d.sensor, "path": d.path,
                   "celsius": reading.as_ref().ok().map(|c| c.0),
                   "error": reading.err().map(|e| e.to_string())})
        })
        .collect();
    json!({
        "storage_devices": inv.storage_devices.iter().map(|d| json!({
            "name": d.name, "model": d.model, "serial": d.serial, "firmware": d.firmware,
            "capacity_bytes": d.capacity_bytes, "logical_block_size": d.logical_block_size,
            "transport": d.transport, "rotational": d.rotational, "controller": d.controller})).collect::<Vec<_>>(),
        "power_sources": inv.power_sources.iter().map(|p| json!({
            "source": p.source, "zone": p.zone, "scope": p.scope, "counter": p.counter,
            "path": p.path, "usable": p.note.is_empty(), "enabled": p.enabled, "note": p.note})).collect::<Vec<_>>(),
        "temperature_sensors": temps,
        "not_available": found.unavailable,
    })
}

fn inventory_table(inv: &wattflip_proto::v1::Inventory, found: &mut wattflip_agent::sensors::Discovered) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "Storage devices ({})", inv.storage_devices.len());
    let _ = writeln!(s, "  {:<12} {:<28} {:<20} {:>12} {:>6} {:<8}", "DEVICE", "MODEL", "SERIAL", "CAPACITY", "LBS", "TRANSPORT");
    for d in &inv.storage_devices {
        let _ = writeln!(
            s,
            "  {:<12} {:<28} {:<20} {:>10.1}GB {:>6} {:<8}",
            d.name, d.model, d.serial, d.capacity_bytes as f64 / 1e9, d.logical_block_size, d.transport
        );
    }
    let _ = writeln!(s, "Power sources ({})", inv.power_sources.len());
    for p in &inv.power_sources {
        let state = if p.note.is_empty() { "ok".to_string() } else { format!("NOT USABLE: {}", p.note) };
        let _ = writeln!(s, "  {:<6} {:<24} {:<8} {}", p.source, p.zone, p.scope, state);
    }
    let _ = writeln!(s, "Temperature sensors ({})", found.temperature.len());
    for t in found.temperature.iter_mut() {
        let d = t.describe();
        let reading = match t.read() {
            Ok(c) => format!("{c}"),
            Err(e) => format!("ERROR: {e}"),
        };
        let _ = writeln!(s, "  {:<6} {:<20} {:<16} {}", d.source, d.device, d.sensor, reading);
    }
    for n in &found.unavailable {
        let _ = writeln!(s, "Not available on this host: {n}");
    }
    s
}

async fn shutdown_signal() {
    wattflip_infra::cli::shutdown_signal().await
}
