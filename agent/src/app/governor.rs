//! `wattflip-agent governor show|set|sweep`: parses the request, opens the controller
//! (`drives::governor`), runs it (`set`, Intel mode, or the sweep of `probes::power_sweep`), and
//! delivers the records: `<out>/<command>.lp` always, and the collector when given. Only here are
//! the command runner, the clock and the tokio runtime of a governor command created. A new
//! governor subcommand is a [`GovernorCli`] variant, a [`Request`] and its arm in [`execute`].

use super::session::{command_hello, send};
use crate::clock::Clock;
use crate::config::Config;
use crate::drives::changes::ChangeLog;
use crate::drives::governor::{intel_mode_until_signal, set, Controller, GovernorCmdError};
use crate::drives::sweep::SweepPattern;
use crate::probes::power_sweep::{sweep_until_signal, SweepArgs, SweepHost};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wattflip_drives::CommandRunner;
use wattflip_infra::duration::{Bounded, DAY};
use wattflip_proto::v1;

#[derive(clap::Subcommand, Debug)]
pub enum GovernorCli {
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
pub struct GovernorCommon {
    /// NVMe controller or namespace, e.g. /dev/nvme0 or /dev/nvme0n1.
    #[arg(long)]
    pub device: String,
    /// Agent config ([drives] tool paths, state_dir, patterns; agent id and labels).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Also stream the records to this collector, e.g. http://127.0.0.1:50051.
    #[arg(long)]
    pub collector: Option<String>,
    /// Folder for the records (`governor-<command>.lp`).
    #[arg(long, default_value = "wattflip-out")]
    pub out: PathBuf,
}

/// `governor show|set|sweep`: the request from the command line, run by [`execute`].
pub fn command(g: GovernorCli) -> anyhow::Result<()> {
    let (common, req) = match g {
        GovernorCli::Show { common } => (common, None),
        GovernorCli::Set { common, state, intel_mode, hold } => {
            let req = match (state, intel_mode) {
                (Some(state), _) => Request::Set { state },
                (None, Some(mode)) => {
                    let hold = hold.map(|h| Bounded::new(Duration::from_secs(1), DAY).parse(&h).map_err(|e| anyhow::anyhow!("--hold: {e}"))).transpose()?;
                    Request::IntelMode { mode, hold }
                }
                (None, None) => anyhow::bail!("governor set needs --state N or --intel-mode N"),
            };
            (common, Some(req))
        }
        GovernorCli::Sweep { common, target, size, patterns, settle, seed } => {
            let cfg = super::load_config(common.config.as_deref())?;
            let size = size.parse::<bytesize::ByteSize>().map_err(|e| anyhow::anyhow!("--size `{size}`: {e}; write e.g. 1GiB"))?.as_u64();
            let patterns = match patterns {
                Some(list) => {
                    list.split(',').map(|p| p.parse::<SweepPattern>()).collect::<Result<Vec<_>, _>>().map_err(|e| anyhow::anyhow!("--patterns: {e}"))?
                }
                None => cfg.drives.sweep_patterns.clone(),
            };
            let settle = match settle {
                Some(s) => crate::drives::config::SWEEP_SETTLE.parse(&s).map_err(|e| anyhow::anyhow!("--settle: {e}"))?,
                None => cfg.drives.sweep_settle,
            };
            (common, Some(Request::Sweep(SweepArgs { target, size, patterns, settle, seed })))
        }
    };
    let cfg = super::load_config(common.config.as_deref())?;
    let text = execute(cfg, &common.device, req.unwrap_or(Request::Show), &common.out, common.collector.as_deref(), super::drive_signal())?;
    print!("{text}");
    Ok(())
}

/// A governor command from the command line.
#[derive(Debug, Clone)]
pub enum Request {
    Show,
    Set {
        state: u32,
    },
    /// Intel FID C6h mode, held for `hold` (`None`: until SIGTERM/SIGINT), then restored.
    IntelMode {
        mode: u32,
        hold: Option<Duration>,
    },
    Sweep(SweepArgs),
}

impl Request {
    fn name(&self) -> &'static str {
        match self {
            Request::Show => "governor-show",
            Request::Set { .. } | Request::IntelMode { .. } => "governor-set",
            Request::Sweep(_) => "governor-sweep",
        }
    }
}

/// Runs a governor command on `device` and delivers its records: `<out>/<command>.lp` always
/// (when there is anything to record), and the collector at `collector` when given. Returns the
/// text for stdout; on error the records are still delivered first.
pub fn execute(
    cfg: Config,
    device: &str,
    req: Request,
    out: &Path,
    collector: Option<&str>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<String, GovernorCmdError> {
    let rt = tokio::runtime::Runtime::new().map_err(|source| GovernorCmdError::Output { path: out.to_path_buf(), source })?;
    let clock = Clock::new();
    let rec = Arc::new(Mutex::new(ChangeLog::new(clock)));
    let name = req.name();
    let runner: Arc<dyn CommandRunner> = Arc::new(wattflip_drives::SystemRunner::new());
    // A signal that arrives before the command gets to wait for it still ends the wait.
    let mut shutdown = std::pin::pin!(shutdown);
    let result = (|| -> Result<String, GovernorCmdError> {
        let s = Controller::open(&cfg.drives, device, runner.clone(), &mut rec.lock().unwrap_or_else(|p| p.into_inner()))?;
        match req {
            Request::Show => Ok(s.show()),
            Request::Set { state } => {
                set(&s, state, &mut rec.lock().unwrap_or_else(|p| p.into_inner()))?;
                Ok(format!("{}: PS{state} applied and verified\n", s.controller))
            }
            Request::IntelMode { mode, hold } => rt.block_on(intel_mode_until_signal(&cfg.drives.state_dir, &s, mode, hold, &rec, shutdown.as_mut())),
            Request::Sweep(args) => {
                let summary = rt.block_on(sweep_until_signal(sweep_host(&cfg, runner.clone()), s, args, rec.clone(), shutdown.as_mut()))?;
                let mut text = format!("measured power states: {:?}\n", summary.measured);
                if let Some(note) = &summary.power_note {
                    let _ = writeln!(text, "{note}");
                }
                for (st, why) in &summary.skipped {
                    let _ = writeln!(text, "skipped PS{st}: {why}");
                }
                Ok(text)
            }
        }
    })();
    let batch = std::mem::take(&mut rec.lock().unwrap_or_else(|p| p.into_inner()).batch);
    let delivered = deliver(&rt, &cfg, &batch, out, name, collector, || command_hello(&cfg, runner, &clock, "governor"));
    let mut text = result?;
    text.push_str(&delivered?);
    Ok(text)
}

/// Local folder, then the collector. Returns a line per destination.
fn deliver(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    batch: &v1::Batch,
    out: &Path,
    name: &str,
    collector: Option<&str>,
    hello: impl FnOnce() -> v1::Hello,
) -> Result<String, GovernorCmdError> {
    if batch == &v1::Batch::default() {
        return Ok(String::new());
    }
    let tags = wattflip_proto::schema::HostTags { host: cfg.agent_id.clone(), labels: cfg.labels.clone() };
    let path = write_local(out, name, batch, &tags)?;
    let mut text = format!("records written to {}\n", path.display());
    if let Some(url) = collector {
        // Built only when sending: the inventory costs a few tool calls.
        let hello = hello();
        let b = v1::Batch { agent_id: cfg.agent_id.clone(), ..batch.clone() };
        let mut cfg = cfg.clone();
        cfg.collector.urls = vec![url.to_string()];
        let s = rt.block_on(send(&cfg, hello, vec![b], Duration::from_secs(60)));
        if s.map(|s| s.acked).unwrap_or(0) == 0 {
            return Err(GovernorCmdError::NotDelivered { url: url.into(), dir: out.to_path_buf() });
        }
        let _ = writeln!(text, "sent to the collector at {url}: acknowledged");
    }
    Ok(text)
}

/// Writes the records as line protocol (`<name>.lp`, exactly the points the collector would store)
/// into `dir`. Returns the file.
pub fn write_local(dir: &Path, name: &str, batch: &v1::Batch, tags: &wattflip_proto::schema::HostTags) -> Result<PathBuf, GovernorCmdError> {
    let out = |source| GovernorCmdError::Output { path: dir.to_path_buf(), source };
    std::fs::create_dir_all(dir).map_err(out)?;
    let b = v1::Batch { agent_id: String::new(), sequence: 1, ..batch.clone() };
    let domain = wattflip_proto::domain::convert_batch("", b).map_err(|e| out(std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())))?;
    let (body, errors) = wattflip_proto::lineproto::encode_all(&wattflip_proto::schema::batch_points(&domain, tags));
    for e in errors {
        tracing::warn!("a record could not be encoded: {e}");
    }
    let path = dir.join(format!("{name}.lp"));
    std::fs::write(&path, body).map_err(|source| GovernorCmdError::Output { path: path.clone(), source })?;
    Ok(path)
}

/// Where the sweep runs, from the agent config.
fn sweep_host(cfg: &Config, runner: Arc<dyn CommandRunner>) -> SweepHost {
    SweepHost { sysfs_root: cfg.sysfs_root.clone(), kinds: cfg.kinds.clone(), drives: cfg.drives.clone(), runner }
}
