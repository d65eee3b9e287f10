//! `wattflip-collector`: parse flags, load the config, serve until SIGINT/SIGTERM.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use wattflip_collector::config::{Config, Overrides};
use wattflip_collector::service::server::{serve, Stats};

/// Receives measurements from wattflip agents over gRPC and writes them to InfluxDB.
#[derive(Parser, Debug)]
#[command(name = "wattflip-collector", version)]
struct Cli {
    /// TOML config file (flags below override it).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// gRPC listen address (default 127.0.0.1:50051).
    #[arg(long)]
    listen: Option<String>,
    /// InfluxDB base URL, e.g. http://127.0.0.1:8086.
    #[arg(long)]
    influx_url: Option<String>,
    /// InfluxDB database (created if missing).
    #[arg(long)]
    influx_db: Option<String>,
    /// No TLS and no certificate identity: a loopback-only demo mode that refuses any other
    /// listen address (same as `tls.insecure_plaintext_loopback_only = true`).
    #[arg(long)]
    insecure_loopback: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check the config file and print every problem, then exit.
    CheckConfig,
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wattflip-collector: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    // One rustls provider for the process, installed before anything can touch TLS.
    wattflip_proto::tls::install_crypto_provider();
    let ov = Overrides { listen: cli.listen, influx_url: cli.influx_url, influx_db: cli.influx_db, insecure_loopback: cli.insecure_loopback };
    let cfg = Config::load(cli.config.as_deref(), &ov)?;
    if let Some(Command::CheckConfig) = cli.command {
        let tls = if cfg.tls.is_insecure() { "plaintext (loopback only)" } else { "mutual TLS" };
        println!("config OK: listen {} ({tls}), InfluxDB {} database {}", cfg.listen, cfg.influx.url, cfg.influx.database);
        return Ok(());
    }
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .with_context(|| format!("cannot listen on {} (is another collector running?)", cfg.listen))?;
        let stats = Arc::new(Stats::default());
        serve(cfg, listener, shutdown_signal(), stats, Duration::from_secs(10)).await?;
        tracing::info!("collector stopped");
        Ok(())
    })
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
    tracing::info!("shutting down: finishing queued writes");
}
