//! `probe --efficiency`: the efficiency preset (`probes::efficiency`, `docs/efficiency.md`) on the
//! probe's target with power recorded, its folder (`report::efficiency`) and a table on stdout.
//! A new preset setting is a `--efficiency-*` flag of [`EfficiencyCli`] mapped in [`options`].

use crate::config::Config;
use crate::probes::efficiency::run::{self as eff, EfficiencyArgs};
use crate::probes::efficiency::stability::StabilityConfig;
use crate::probes::efficiency::{EfficiencyOptions, PhaseBudget, Profile};
use crate::probes::{self, EnergyOptions, Host};

/// The preset's flags, part of `probe`'s command line.
#[derive(clap::Args, Debug)]
pub struct EfficiencyCli {
    /// Run the efficiency preset instead of uFLIP (docs/efficiency.md): ready idle, random 4 KiB
    /// read and write, sequential 128 KiB read and write, mixed 70/30, each until stable.
    #[arg(long, conflicts_with_all = ["ladder", "calibrate", "no_power"])]
    pub efficiency: bool,
    /// Length of one efficiency window (each window is one uFLIP run, or a wait for idle).
    #[arg(long, default_value = "1s")]
    pub efficiency_window: humantime::Duration,
    /// Windows in a measurement interval (the trailing ones tested for stability).
    #[arg(long, default_value_t = 10)]
    pub efficiency_windows: usize,
    /// Time budget per phase: a phase not stable by then is reported unstable, without figures.
    #[arg(long, default_value = "2m")]
    pub efficiency_budget: humantime::Duration,
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
}

/// The probe's target and where results go (from `probe`'s own flags).
pub struct Target {
    pub path: std::path::PathBuf,
    pub size: u64,
    pub destroy_consent: Vec<String>,
    pub seed: Option<u64>,
    pub out: std::path::PathBuf,
}

/// The preset's settings from the command line, each checked with the flag named.
pub fn options(p: &EfficiencyCli) -> anyhow::Result<EfficiencyOptions> {
    anyhow::ensure!(
        p.efficiency_windows >= 3,
        "--efficiency-windows {}: an interval needs at least 3 windows (a trend needs a residual)",
        p.efficiency_windows
    );
    for (flag, v) in [("--efficiency-band", p.efficiency_band), ("--efficiency-trend", p.efficiency_trend)] {
        anyhow::ensure!(v.is_finite() && v > 0.0 && v < 100.0, "{flag} {v}: a percentage above 0 and below 100");
    }
    let window: std::time::Duration = p.efficiency_window.into();
    let budget: std::time::Duration = p.efficiency_budget.into();
    anyhow::ensure!(!window.is_zero(), "--efficiency-window: must be longer than 0");
    anyhow::ensure!(
        budget >= window * p.efficiency_windows as u32,
        "--efficiency-budget {}: shorter than one interval ({} windows of {})",
        p.efficiency_budget,
        p.efficiency_windows,
        p.efficiency_window
    );
    Ok(EfficiencyOptions {
        stability: StabilityConfig { min_windows: p.efficiency_windows, band: p.efficiency_band / 100.0, max_trend: p.efficiency_trend / 100.0 },
        budget: PhaseBudget { window, budget },
    })
}

/// Runs the preset and writes its folder; `stream` sends nothing yet (the collector has no
/// efficiency message: the `.lp` file is the InfluxDB input).
pub fn command(p: &EfficiencyCli, t: &Target, cfg: &Config, energy_opts: &EnergyOptions, host: &Host) -> anyhow::Result<()> {
    let capacity = p.capacity.as_deref().map(probes::parse_size).transpose().map_err(|e| anyhow::anyhow!("--capacity {e}"))?;
    let args = EfficiencyArgs {
        target: t.path.clone(),
        size: t.size,
        destroy_consent: t.destroy_consent.clone(),
        capacity,
        seed: t.seed.unwrap_or(4242),
        options: options(p)?,
        profiles: Profile::ALL.to_vec(),
    };
    let r = eff::run(&args, energy_opts, host)?;
    let tags = wattflip_proto::schema::HostTags { host: cfg.agent_id.clone(), labels: cfg.labels.clone() };
    let files = crate::report::efficiency::write(&t.out, &r, &tags)?;
    if !r.energy_note.is_empty() {
        println!("No efficiency figures: {}", r.energy_note);
    }
    for ph in &r.phases {
        let head = crate::report::efficiency::headline(ph).map(|(f, unit)| format!("{} {unit}", f.describe(3))).unwrap_or_else(|| "-".into());
        println!("{:<16} {:<13} {:>3} windows  {head}", ph.profile.name(), ph.verdict, ph.windows_run);
    }
    println!("results in {}", files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "));
    Ok(())
}
