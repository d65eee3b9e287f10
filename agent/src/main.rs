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
    match cli.command {
        Command::Run { config, samples } => {
            let cfg = Config::from_file(&config)?;
            let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            let s = rt.block_on(runtime::run(cfg, RunOptions { samples }, shutdown_signal()));
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
                None => Config::from_str(std::path::Path::new("<defaults>"), "")?,
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
        Command::CheckConfig { config } => {
            let cfg = Config::from_file(&config)?;
            println!(
                "{}: OK (agent {}, collector {}, interval {:?}, sysfs {})",
                config.display(),
                cfg.agent_id,
                cfg.collector.url,
                cfg.sampling_interval,
                cfg.sysfs_root.display()
            );
            Ok(())
        }
    }
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
