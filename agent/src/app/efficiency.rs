//! `probe --efficiency`: the efficiency preset (`probes::efficiency`, `docs/efficiency.md`) on the
//! probe's target with power recorded, its folder (`report::efficiency`) and a table on stdout.
//! A new preset setting is a `--efficiency-*` flag of `ProbeCli` mapped in [`options`].

use super::probe::ProbeCli;
use crate::config::Config;
use crate::probes::efficiency::run::{self as eff, EfficiencyArgs};
use crate::probes::efficiency::stability::StabilityConfig;
use crate::probes::efficiency::{EfficiencyOptions, PhaseBudget, Profile};
use crate::probes::{self, EnergyOptions, Host};

/// The preset's settings from the command line, each checked with the flag named.
pub fn options(p: &ProbeCli) -> anyhow::Result<EfficiencyOptions> {
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
pub fn command(p: &ProbeCli, size: u64, cfg: &Config, energy_opts: &EnergyOptions, host: &Host) -> anyhow::Result<()> {
    let capacity = p.capacity.as_deref().map(probes::parse_size).transpose().map_err(|e| anyhow::anyhow!("--capacity {e}"))?;
    let args = EfficiencyArgs {
        target: p.target.clone(),
        size,
        destroy_consent: p.destroy_consent.clone(),
        capacity,
        seed: p.seed.unwrap_or(4242),
        options: options(p)?,
        profiles: Profile::ALL.to_vec(),
    };
    let r = eff::run(&args, energy_opts, host)?;
    let tags = wattflip_proto::schema::HostTags { host: cfg.agent_id.clone(), labels: cfg.labels.clone() };
    let files = crate::report::efficiency::write(&p.out, &r, &tags)?;
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
