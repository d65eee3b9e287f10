//! `wattflip-agent`: parse the command line, load the config, dispatch to the library.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use wattflip_agent::config::Config;
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
    Probe(ProbeCli),
    /// Render the HTML report of a probe result folder.
    Report {
        /// Result folder of a probe (holds report.json).
        #[arg(long = "in")]
        input: PathBuf,
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
    /// Serial (or identity) of a block device whose data may be destroyed; repeatable.
    #[arg(long = "destroy-consent")]
    destroy_consent: Vec<String>,
    /// Also stream the results to this collector, e.g. http://127.0.0.1:50051.
    #[arg(long)]
    collector: Option<String>,
    /// Agent config, for the agent id and labels of streamed results.
    #[arg(long)]
    config: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match dispatch(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wattflip-agent: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    // One rustls provider for the process, installed before anything can touch TLS.
    wattflip_proto::tls::install_crypto_provider();
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
            let hello = runtime::hello(&cfg, &found, &clock);
            let inv = hello.inventory.unwrap_or_default();
            if json {
                println!("{}", serde_json::to_string_pretty(&inventory_json(&inv, &mut found))?);
            } else {
                print!("{}", inventory_table(&inv, &mut found));
            }
            Ok(())
        }
        Command::Probe(p) => probe(p),
        Command::Report { input, output } => {
            let path = input.join("report.json");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {} (is {} a probe result folder?)", path.display(), input.display()))?;
            let report: wattflip_uflip::ProbeReport =
                serde_json::from_str(&text).with_context(|| format!("{} is not a probe report", path.display()))?;
            std::fs::write(&output, wattflip_agent::report::html::render(&report))
                .with_context(|| format!("cannot write {}", output.display()))?;
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

fn probe(p: ProbeCli) -> anyhow::Result<()> {
    use wattflip_agent::probes::{self, convert, output, ProbeArgs};
    let size = p
        .size
        .parse::<bytesize::ByteSize>()
        .map_err(|e| anyhow::anyhow!("--size `{}`: {e}; write e.g. 1GiB or 512MiB", p.size))?
        .as_u64();
    let benches = wattflip_uflip::Bench::parse_list(&p.bench).map_err(|e| anyhow::anyhow!("--bench: {e}"))?;
    let format = match p.format.as_str() {
        "none" => None,
        "random" => Some(wattflip_uflip::FormatKind::Random),
        "seq" => Some(wattflip_uflip::FormatKind::Sequential),
        other => anyhow::bail!("--format `{other}`: use random, seq or none"),
    };
    let cfg = match &p.config {
        Some(c) => Config::from_file(c)?,
        None => Config::defaults()?,
    };
    let args = ProbeArgs {
        target: p.target,
        size,
        benches,
        quick: p.quick,
        format,
        repetitions: p.repetitions,
        out: p.out.clone(),
        emit_fio_iolog: p.emit_fio_iolog,
        destroy_consent: p.destroy_consent,
        seed: p.seed,
    };
    let started = std::time::Instant::now();
    let report = probes::run_probe(&args, std::io::IsTerminal::is_terminal(&std::io::stderr()))?;
    let tags = wattflip_proto::schema::HostTags { host: cfg.agent_id.clone(), labels: cfg.labels.clone() };
    let written = output::write_all(&p.out, &report, &tags)?;
    print!("{}", wattflip_uflip::summary_table(&report));
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
        let clock = Clock::new();
        let found = wattflip_agent::sensors::Discovered::default();
        let hello = runtime::hello(&cfg, &found, &clock);
        let mut cfg = cfg;
        cfg.collector.urls = vec![url.clone()];
        let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
        let s = rt.block_on(probes::stream::send(&cfg, hello, convert::batch(&report), std::time::Duration::from_secs(60)))
            .context("--collector needs --config with a [tls] section")?;
        if s.acked == 0 {
            anyhow::bail!("the collector at {url} did not acknowledge the results (they are still in {})", p.out.display());
        }
        println!("sent to the collector at {url}: acknowledged");
    }
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
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}
