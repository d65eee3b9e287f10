//! `wattflip-collector`: parse flags, load the config, serve until SIGINT/SIGTERM.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use wattflip_collector::config::{Config, Overrides};
use wattflip_collector::service::revocation::Revocation;
use wattflip_collector::service::server::{serve, Stats};
use wattflip_infra::tls::TlsMode;

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
    /// Lines InfluxDB refused, kept in `influx.dead_letter_dir`.
    DeadLetter {
        #[command(subcommand)]
        action: DeadLetterCommand,
    },
    /// Capacity-planning answers from the measurements in InfluxDB.
    Plan {
        #[command(subcommand)]
        plan: PlanCommand,
        /// How far back to look (an InfluxQL duration: 30d, 12h).
        #[arg(long, default_value = "30d", global = true)]
        since: String,
        /// Print JSON instead of a table.
        #[arg(long, global = true)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum DeadLetterCommand {
    /// Every refused line with its class and InfluxDB's reason, and the counts by class.
    List,
    /// Writes the lines again (after the cause is fixed); stored ones leave the store, lines
    /// refused again stay. Exits 1 when some are still refused.
    Replay {
        /// Give up when InfluxDB is not writable for this long (a humantime duration).
        #[arg(long, default_value = "60s")]
        #[arg(value_parser = |s: &str| wattflip_infra::duration::Bounded::new(std::time::Duration::from_secs(1), wattflip_infra::duration::DAY).parse(s))]
        timeout: std::time::Duration,
    },
}

#[derive(Subcommand, Debug)]
enum PlanCommand {
    /// Fleet power saved and throughput lost if every drive of a model ran in a power state.
    PowerCap {
        #[arg(long)]
        model: String,
        #[arg(long)]
        state: u32,
        /// TOML file with `[mix]` weights per sweep pattern, e.g. `"SW:128KiB" = 0.7`.
        #[arg(long)]
        mix: Option<PathBuf>,
    },
    /// Which racks or hosts exceed a power budget at their measured peak, and everyone's headroom.
    Budget {
        /// `rack`, `host`, or any agent label.
        #[arg(long, default_value = "rack")]
        group_by: String,
        #[arg(long)]
        budget_w: f64,
        /// Averaging window of the peak (an InfluxQL duration).
        #[arg(long, default_value = "1m")]
        bucket: String,
        /// `auto` (the hourly tier with the 1-minute rollups at the window's edges when the
        /// database has it and --bucket is 1m, 1-minute rollups when it has them and --bucket is
        /// whole minutes, else raw points), `raw`, `rollup` (1-minute) or `hourly`.
        #[arg(long, default_value = "auto")]
        resolution: String,
    },
    /// How many drives of a model fit a power budget at a workload, and what they deliver.
    Capacity {
        #[arg(long)]
        model: String,
        #[arg(long)]
        budget_w: f64,
        /// PATTERN:SIZE, e.g. RR:4KiB or SW:128KiB.
        #[arg(long)]
        workload: String,
    },
    /// Fleet roll-ups per model (and firmware): idle W distribution, J/MiB per pattern and IO
    /// size, background-work class per experiment, throttle events per device-day, datasheet ratio.
    Rollup {
        /// `model` or `model,firmware`.
        #[arg(long, default_value = "model")]
        by: String,
        /// Only this model.
        #[arg(long)]
        model: Option<String>,
        /// Comma-separated roll-ups (idle, j-per-mib, background, throttle, datasheet); all when absent.
        #[arg(long, default_value = "")]
        metric: String,
    },
}

fn main() -> std::process::ExitCode {
    wattflip_infra::cli::main_with("wattflip-collector", || run(Cli::parse()))
}

fn run(cli: Cli) -> anyhow::Result<()> {
    // `plan` and `dead-letter` only talk to InfluxDB: without a config file they need no
    // listener TLS settings.
    let plan_only = matches!(cli.command, Some(Command::Plan { .. } | Command::DeadLetter { .. })) && cli.config.is_none();
    let ov = Overrides { listen: cli.listen, influx_url: cli.influx_url, influx_db: cli.influx_db, insecure_loopback: cli.insecure_loopback || plan_only };
    let cfg = Config::load(cli.config.as_deref(), &ov)?;
    match cli.command {
        Some(Command::CheckConfig) => {
            // What `run` builds from the files before it listens: the server's TLS config with
            // the CRL in its verifier (Config::load has parsed each file already).
            if let TlsMode::Mutual(m) = &cfg.tls {
                Revocation::load(m, cfg.revocation.clone())?;
            }
            let tls = if cfg.tls.is_insecure() { "plaintext (loopback only)" } else { "mutual TLS" };
            println!("config OK: listen {} ({tls}), InfluxDB {} database {}", cfg.listen, cfg.influx.url, cfg.influx.database);
            for sink in &cfg.sinks.0 {
                println!("{}", sink.describe());
            }
            return Ok(());
        }
        Some(Command::Plan { plan, since, json }) => return run_plan(&cfg, plan, &since, json),
        Some(Command::DeadLetter { action }) => return run_dead_letter(&cfg, action),
        None => {}
    }
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    rt.block_on(async move {
        let listener =
            tokio::net::TcpListener::bind(cfg.listen).await.with_context(|| format!("cannot listen on {} (is another collector running?)", cfg.listen))?;
        let stats = Arc::new(Stats::default());
        serve(cfg, listener, shutdown_signal(), stats, Duration::from_secs(10)).await?;
        tracing::info!("collector stopped");
        Ok(())
    })
}

fn run_dead_letter(cfg: &Config, action: DeadLetterCommand) -> anyhow::Result<()> {
    use wattflip_collector::sinks::influx::dead_letter::DeadLetterStore;
    use wattflip_collector::sinks::influx::replay::replay;
    let store = DeadLetterStore::new(cfg.influx.dead_letter_dir.clone());
    match action {
        DeadLetterCommand::List => {
            let mut by_class = std::collections::BTreeMap::<String, usize>::new();
            let mut total = 0;
            let files = store.files()?;
            for f in &files {
                for e in store.read(f)? {
                    println!("{}\t{}\t{}\t{}", f.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(), e.class, e.reason, e.line);
                    *by_class.entry(e.class).or_default() += 1;
                    total += 1;
                }
            }
            let classes: Vec<String> = by_class.iter().map(|(c, n)| format!("{c}={n}")).collect();
            println!(
                "{total} line(s) in {} file(s) in {}{}{}",
                files.len(),
                store.dir().display(),
                if classes.is_empty() { "" } else { ": " },
                classes.join(" ")
            );
            Ok(())
        }
        DeadLetterCommand::Replay { timeout } => {
            let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            // With rollups on, the minutes of the lines stored are recomputed afterwards: the
            // running collector never saw these writes.
            let dirty = cfg.influx.retention.as_ref().map(|r| Arc::new(wattflip_collector::rollup::Dirty::new(r.max_dirty, Arc::default())));
            let observer = dirty.clone().map(|d| d as Arc<dyn wattflip_collector::sinks::influx::StoredLines>);
            let r = rt.block_on(replay(&cfg.influx, timeout, observer))?;
            if let Some(d) = dirty {
                let (done, failed) = rt.block_on(wattflip_collector::rollup::task::recompute_now(&cfg.influx, d));
                println!(
                    "recomputed the rollups of {done} bucket(s) (measurement, host, minute){}",
                    if failed > 0 { format!("; {failed} statement(s) failed") } else { String::new() }
                );
                anyhow::ensure!(failed == 0, "{failed} rollup statement(s) failed after the replay (see the log): the lines are stored, but their minutes' rollups miss them until points of those minutes are written again");
            }
            let again: usize = r.still_refused.values().sum();
            let classes: Vec<String> = r.still_refused.iter().map(|(c, n)| format!("{c}={n}")).collect();
            println!(
                "replayed {} file(s): {} line(s) stored, {again} refused again{}{}",
                r.files,
                r.stored,
                if classes.is_empty() { "" } else { ": " },
                classes.join(" ")
            );
            anyhow::ensure!(
                again == 0,
                "{again} line(s) are still refused by InfluxDB and stay in {}; see `wattflip-collector dead-letter list`",
                store.dir().display()
            );
            Ok(())
        }
    }
}

fn run_plan(cfg: &Config, plan: PlanCommand, since: &str, json: bool) -> anyhow::Result<()> {
    use wattflip_collector::plan::{self, Influx};
    anyhow::ensure!(
        since.chars().last().is_some_and(|c| c.is_ascii_alphabetic()) && since.chars().next().is_some_and(|c| c.is_ascii_digit()),
        "--since `{since}`: an InfluxQL duration such as 30d or 12h"
    );
    // `now() - 0d` selects nothing: every plan would report missing data for a window that was
    // never a window.
    anyhow::ensure!(since.chars().any(|c| c.is_ascii_digit() && c != '0'), "--since `{since}`: the time range is empty; give a positive duration such as 30d");
    let mut db = Influx::new(&cfg.influx.url, &cfg.influx.database);
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let (table, value) = rt.block_on(async {
        // Runs, inventory and events: raw within the raw retention, else their whole copies.
        let whole = plan::resolution::whole_policy(&db.storage().await?, since);
        if whole.is_rollup() {
            db.whole_rp = Some(wattflip_collector::sinks::influx::config::ROLLUP_RP.to_string());
        }
        let db = &db;
        let with_line = |table: String| format!("{table}resolution: {}\n", whole.describe());
        Ok::<_, anyhow::Error>(match plan {
            PlanCommand::PowerCap { model, state, mix } => {
                let mix = match mix {
                    Some(f) => {
                        let text = std::fs::read_to_string(&f).with_context(|| format!("--mix: cannot read {}", f.display()))?;
                        Some(plan::parse_mix(&f.display().to_string(), &text)?)
                    }
                    None => None,
                };
                let p = plan::power_cap(db, &model, state, mix, since).await?;
                (with_line(plan::power_cap_table(&p)), with_resolution(serde_json::to_value(&p)?, whole.describe()))
            }
            PlanCommand::Budget { group_by, budget_w, bucket, resolution } => {
                let choice = resolution.parse().map_err(anyhow::Error::msg)?;
                let p = plan::budget(db, &group_by, budget_w, &bucket, since, choice).await?;
                (plan::budget_table(&p), serde_json::to_value(&p)?)
            }
            PlanCommand::Capacity { model, budget_w, workload } => {
                let p = plan::capacity(db, &model, budget_w, &workload, since).await?;
                (with_line(plan::capacity_table(&p)), with_resolution(serde_json::to_value(&p)?, whole.describe()))
            }
            PlanCommand::Rollup { by, model, metric } => {
                let by: plan::rollup::By = by.parse().map_err(anyhow::Error::msg)?;
                let metrics = plan::rollup::parse_metrics(&metric).map_err(anyhow::Error::msg)?;
                let p = plan::rollup::rollup(db, by, model.as_deref(), &metrics, since).await?;
                (with_line(plan::rollup::rollup_table(&p)), with_resolution(serde_json::to_value(&p)?, whole.describe()))
            }
        })
    })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{table}");
    }
    Ok(())
}

/// The plan's JSON with the resolution it read (`resolution`, as the table's last line).
fn with_resolution(mut v: serde_json::Value, resolution: &str) -> serde_json::Value {
    if let Some(o) = v.as_object_mut() {
        o.insert("resolution".into(), resolution.into());
    }
    v
}

async fn shutdown_signal() {
    wattflip_infra::cli::shutdown_signal().await;
    tracing::info!("shutting down: finishing queued writes");
}
