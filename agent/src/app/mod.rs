//! The application layer: one module per command of `wattflip-agent` (`run`, `schedule` for the
//! probes `run` fires, `probe`, `governor`, `trace`, `inventory`, `report`, and `check-config`
//! below) and the `session` with a collector. Only this layer creates the command runner, the
//! clock and tokio runtimes, and reads [`Config`]; the layers below get the parts of it they need.
//! A new command is a module here with a `command(...)` function and one variant in `main.rs`.

pub mod efficiency;
pub mod governor;
pub mod inventory;
pub mod probe;
pub mod report;
pub mod run;
pub mod samplers;
pub mod schedule;
pub mod session;
pub mod ticks;
pub mod trace;

use crate::config::Config;
use std::path::{Path, PathBuf};

/// The config at `path`, or the defaults (no collector) without one.
pub fn load_config(path: Option<&Path>) -> anyhow::Result<Config> {
    Ok(match path {
        Some(c) => Config::from_file(c)?,
        None => Config::defaults()?,
    })
}

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    wattflip_infra::cli::shutdown_signal().await
}

/// Completes on SIGTERM, SIGINT or SIGHUP: what a command that changes a drive (or writes a
/// probe's target) stops on, so that an SSH hangup, whose default action kills the process, puts
/// the drive back like a Ctrl-C does. The handlers are installed at the first poll; callers poll
/// once before touching the drive.
pub async fn drive_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (signal(SignalKind::terminate()), signal(SignalKind::hangup())) {
        (Ok(mut term), Ok(mut hup)) => tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term.recv() => {},
            _ = hup.recv() => {},
        },
        // Without a handler a signal kills as before; SIGINT is still watched.
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// `check-config`: every problem of the file, or a one-line summary of it.
pub fn check_config(config: PathBuf) -> anyhow::Result<()> {
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
