//! `wattflip-agent`: parses the command line and dispatches to `app/`, one module per command.
//! A new command is a variant of [`Command`] (its help text is the doc comment) and one arm.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use wattflip_agent::app::governor::GovernorCli;
use wattflip_agent::app::probe::ProbeCli;
use wattflip_agent::app::trace::TraceCommand;
use wattflip_agent::app::{self, governor, inventory, probe, report, run, trace};

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

fn main() -> std::process::ExitCode {
    wattflip_infra::cli::main_with("wattflip-agent", || dispatch(Cli::parse()))
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run { config, samples } => run::command(config, samples),
        Command::Inventory { config, sysfs_root, json } => inventory::command(config, sysfs_root, json),
        Command::CheckConfig { config } => app::check_config(config),
        Command::Probe(p) => probe::command(*p),
        Command::Trace(t) => trace::command(t),
        Command::Governor(g) => governor::command(g),
        Command::Report { input, influx_url, influx_db, host, since, output } => report::command(input, influx_url, influx_db, host, since, output),
    }
}
