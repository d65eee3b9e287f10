//! `probe --efficiency`: the efficiency preset (`probes::efficiency`, `docs/efficiency.md`) on the
//! probe's target with power recorded, its folder (`report::efficiency`) and a table on stdout.
//! A new preset setting is a `--efficiency-*` flag of [`EfficiencyCli`] mapped in [`options`].

use crate::config::Config;
use crate::probes::efficiency::run::{self as eff, EfficiencyArgs};
use crate::probes::efficiency::states::{PowerStatesArgs, StateSelection};
use crate::probes::efficiency::{EfficiencyOptions, Profile};
use crate::probes::{self, EnergyOptions, Host};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The preset's flags, part of `probe`'s command line.
#[derive(clap::Args, Debug)]
pub struct EfficiencyCli {
    /// Run the efficiency preset instead of uFLIP (docs/efficiency.md): ready idle, random 4 KiB
    /// read and write, sequential 128 KiB read and write, mixed 70/30, each until stable.
    #[arg(long, conflicts_with_all = ["ladder", "calibrate", "no_power"])]
    pub efficiency: bool,
    /// Length of one efficiency window (each window is one uFLIP run, or a wait for idle).
    #[arg(long, default_value = "1s")]
    #[arg(value_parser = |s: &str| crate::probes::config::EFFICIENCY_WINDOW.parse(s))]
    pub efficiency_window: std::time::Duration,
    /// Windows in a measurement interval (the trailing ones tested for stability).
    #[arg(long, default_value_t = 10)]
    pub efficiency_windows: usize,
    /// Time budget per phase: a phase not stable by then is reported unstable, without figures.
    #[arg(long, default_value = "2m")]
    #[arg(value_parser = |s: &str| crate::probes::config::EFFICIENCY_BUDGET.parse(s))]
    pub efficiency_budget: std::time::Duration,
    /// Stability band: every window within this percentage of the interval's mean.
    #[arg(long, default_value_t = 5.0)]
    pub efficiency_band: f64,
    /// Trend tolerance: a significant trend counts when it changes the efficiency by more than
    /// this percentage over the interval.
    #[arg(long, default_value_t = 2.0)]
    pub efficiency_trend: f64,
    /// Capacity for idle W/TB and GB/W when the target is a file (a device's is its size).
    #[arg(long)]
    pub capacity: Option<String>,
    /// Run every phase in each of these NVMe power states: `all` (every operational state) or a
    /// list such as `0,2`. Each state is set and read back first; one the drive does not take is
    /// reported as not set; the original state is put back at the end, on error and on a signal.
    #[arg(long, requires = "efficiency", value_parser = |s: &str| s.parse::<StateSelection>())]
    pub power_states: Option<StateSelection>,
    /// The NVMe controller whose power states `--power-states` switches (default: the target's
    /// own, for a namespace such as /dev/nvme0n1; name it for a file on an NVMe drive).
    #[arg(long, requires = "power_states")]
    pub power_states_controller: Option<String>,
}

/// The probe's target and where results go (from `probe`'s own flags).
pub struct Target {
    pub path: std::path::PathBuf,
    pub size: u64,
    pub destroy_consent: Vec<String>,
    pub seed: Option<u64>,
    pub out: std::path::PathBuf,
    /// `--collector`: where the phases are sent (`Batch.efficiency`) once all are done.
    pub collector: Option<String>,
}

/// The preset's settings from the command line, each checked with the flag named.
pub fn options(p: &EfficiencyCli) -> anyhow::Result<EfficiencyOptions> {
    EfficiencyOptions::new(p.efficiency_window, p.efficiency_windows, p.efficiency_budget, p.efficiency_band, p.efficiency_trend)
        .map_err(|(name, e)| anyhow::anyhow!("--efficiency-{name} {e}"))
}

/// Runs the preset, writes its folder and, with `--collector`, sends its phases (one
/// `device_efficiency` point each, the lines of its `efficiency.lp`). `stop` (set on SIGINT,
/// SIGTERM or SIGHUP) stops it between two IOs: the completed phases are written (not sent, as
/// for the ladder), and it fails saying so.
pub fn command(p: &EfficiencyCli, t: &Target, cfg: &Config, energy_opts: &EnergyOptions, host: &Host, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    let capacity = p.capacity.as_deref().map(probes::parse_size).transpose().map_err(|e| anyhow::anyhow!("--capacity {e}"))?;
    let args = EfficiencyArgs {
        target: t.path.clone(),
        size: t.size,
        destroy_consent: t.destroy_consent.clone(),
        capacity,
        seed: t.seed.unwrap_or(4242),
        options: options(p)?,
        profiles: Profile::ALL.to_vec(),
        stop: Some(stop),
        power_states: p.power_states.clone().map(|selection| PowerStatesArgs { selection, controller: p.power_states_controller.clone() }),
    };
    let r = eff::run(&args, energy_opts, host)?;
    let tags = wattflip_proto::schema::HostTags { host: cfg.agent_id.clone(), labels: cfg.labels.clone() };
    let files = crate::report::efficiency::write(&t.out, &r, &tags)?;
    if !r.energy_note.is_empty() {
        println!("No efficiency figures: {}", r.energy_note);
    }
    for ph in &r.phases {
        let head = crate::report::efficiency::headline(ph).map(|(f, unit)| format!("{} {unit}", f.describe(3))).unwrap_or_else(|| "-".into());
        let ps = ph.power_state.map(|s| format!("PS{s}")).unwrap_or_default();
        println!("{ps:<4} {:<16} {:<13} {:>3} windows  {head}", ph.profile.name(), ph.verdict, ph.windows_run);
    }
    for s in r.power_states.iter().filter(|s| s.status != "measured") {
        println!("PS{:<2} {}: {}", s.state, s.status, s.detail);
    }
    let files = files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ");
    if r.interrupted {
        anyhow::bail!(
            "interrupted by a signal after {} completed phase(s) of {}: they are in {files} (the phase in progress is left out, nothing was sent); the target was left as it is{}",
            r.phases.len(),
            args.profiles.len() * r.power_states.len().max(1),
            if r.power_states.is_empty() { "" } else { "; the original power state was put back" }
        );
    }
    println!("results in {files}");
    if let Some(url) = &t.collector {
        let batch = wattflip_proto::v1::Batch {
            efficiency: crate::report::efficiency::phases(&r),
            power_state_changes: r.changes.clone(),
            events: r.events.clone(),
            ..Default::default()
        };
        super::session::send_results(url, cfg, vec![batch], &t.out, "probe")?;
    }
    Ok(())
}

/// One fire of a scheduled efficiency probe (`[[probes]]` with `efficiency = true`, on a blocking
/// thread; `halt` stops it before its next window): the folder under the entry's `out`
/// (`<name>-<start>/efficiency/`), its phases (`Batch.efficiency`, the `device_efficiency`
/// points of its `efficiency.lp`) and one `efficiency_probe` event naming the folder with each
/// phase's verdict and headline; or a `probe_failed` event.
pub fn scheduled(
    job: &crate::probes::ProbeJob,
    eff: &crate::probes::efficiency::ScheduledEfficiency,
    agent_id: &str,
    halt: Arc<AtomicBool>,
) -> Vec<wattflip_proto::v1::Batch> {
    use wattflip_proto::v1;
    let device = job.args.target.display().to_string();
    let now = || crate::clock::Clock::new().utc_now();
    let failed = |e: String| {
        tracing::warn!(probe = %job.name, "scheduled efficiency probe failed: {e}");
        crate::events::event(now(), "probe_failed", v1::Severity::Warning, &device, format!("probe {}: {e}", job.name))
    };
    let mut phases = Vec::new();
    // The state changes and restores of a per-state run, and their events.
    let mut changes = (Vec::new(), Vec::new());
    let ev = match job.energy.as_ref() {
        None => failed("the efficiency preset needs power recording (power = false)".into()),
        Some(energy) => {
            let args = EfficiencyArgs {
                target: job.args.target.clone(),
                size: job.args.size,
                destroy_consent: job.args.destroy_consent.clone(),
                capacity: eff.capacity,
                seed: job.args.seed.unwrap_or(4242),
                options: eff.options,
                profiles: Profile::ALL.to_vec(),
                stop: Some(halt),
                power_states: eff.power_states.clone(),
            };
            let host = Host { clock: crate::clock::Clock::new(), runner: std::sync::Arc::new(wattflip_drives::SystemRunner::new()) };
            let tags = wattflip_proto::schema::HostTags { host: agent_id.to_string(), ..Default::default() };
            // Nothing partial is reported: a stopped preset is a failure, its phases stay unwritten.
            let done = eff::run(&args, energy, &host).and_then(|r| {
                if r.interrupted {
                    return Err(crate::probes::ProbeCmdError::Input {
                        path: args.target.clone(),
                        reason: "the efficiency probe was stopped by the agent's shutdown".into(),
                    });
                }
                let dir = job.args.out.join(format!("{}-{}", job.name, r.started_ns));
                crate::report::efficiency::write(&dir, &r, &tags).map(|_| (r, dir))
            });
            match done {
                Err(e) => failed(e.to_string()),
                Ok((r, dir)) => {
                    let stable = r.phases.iter().filter(|p| p.verdict == "stable").count();
                    let msg = format!("efficiency probe {}: {stable} of {} phases stable; results in {}", job.name, r.phases.len(), dir.display());
                    let mut e = crate::events::event(now(), "efficiency_probe", v1::Severity::Info, &r.device, msg);
                    for p in &r.phases {
                        let head = crate::report::efficiency::headline(p).map(|(f, unit)| format!(" {} {unit}", f.describe(3))).unwrap_or_default();
                        // Per state, one attribute per (profile, state): `rand_read_4k/PS1`.
                        let key = match p.power_state.filter(|_| !r.power_states.is_empty()) {
                            Some(s) => format!("{}/PS{s}", p.profile.name()),
                            None => p.profile.name().to_string(),
                        };
                        e.attributes.insert(key, format!("{}{head}", p.verdict));
                    }
                    for s in r.power_states.iter().filter(|s| s.status != "measured") {
                        e.attributes.insert(format!("PS{}", s.state), format!("{}: {}", s.status, s.detail));
                    }
                    e.attributes.insert("probe_id".into(), r.started_ns.to_string());
                    phases = crate::report::efficiency::phases(&r);
                    changes = (r.changes, r.events);
                    e
                }
            }
        }
    };
    let mut events = changes.1;
    events.push(ev);
    vec![v1::Batch { events, efficiency: phases, power_state_changes: changes.0, ..Default::default() }]
}
