//! Issue 37 for scheduled probes: a `[[probes]]` entry takes `energy_target` and `energy_budget`
//! as `probe --energy-target --energy-budget` does (the same parser, wording and bounds, each
//! problem at its dotted key, both power keys that `power = false` makes pointless), and a fire
//! of such an entry sizes its runs to the power source and flags the runs that miss the target,
//! through the `probe` command's path.

// Integration tests: a panic with a message is the test's failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;
use wattflip_agent::config::Config;
use wattflip_infra::tomlcfg::ConfigError;

const TLS: &str = "[tls]\ninsecure_plaintext_loopback_only = true\n";

fn entry(extra: &str) -> String {
    format!("[[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/nonexistent/wattflip-sched/x\"\n{extra}\n")
}

fn parse(entries: &[String]) -> Result<Config, ConfigError> {
    Config::from_str(Path::new("agent.toml"), &format!("{TLS}{}", entries.concat()))
}

#[test]
fn energy_target_and_budget_are_read_as_the_flags_are() {
    let c = parse(&[entry("energy_target = \"2%\"\nenergy_budget = \"30m\""), entry("energy_target = \"0.5 %\""), entry("energy_target = \"off\""), entry("")])
        .unwrap();
    let got: Vec<(Option<f64>, Duration)> = c.probes.iter().map(|p| p.energy.as_ref().map(|e| (e.energy_target, e.energy_budget)).unwrap()).collect();
    let ten_minutes = Duration::from_secs(600);
    assert_eq!(got, vec![(Some(0.02), Duration::from_secs(1800)), (Some(0.005), ten_minutes), (None, ten_minutes), (None, ten_minutes)]);
}

#[test]
fn bad_energy_targets_and_budgets_are_problems_at_their_keys() {
    let err = parse(&[
        entry("energy_target = \"two percent\"\nenergy_budget = \"2 days\""),
        entry("energy_target = \"150%\"\nenergy_budget = \"soon\""),
        entry("power = false\nenergy_target = \"2%\"\nenergy_budget = \"1m\""),
        entry("energy_budget = \"5m\""),
        entry("energy_target = \"off\"\nenergy_budget = \"5m\""),
        entry("efficiency = true\nenergy_target = \"2%\"\nenergy_budget = \"5m\""),
        entry("energy_targets = \"2%\""),
    ])
    .unwrap_err();
    let got: Vec<(&str, &str)> = err.problems.iter().map(|p| (p.path.as_str(), p.message.as_str())).collect();
    let no_power = "has no effect with power = false; remove it or turn power recording on";
    let no_target = "has no effect without energy_target: it bounds the time that sizing runs to the target adds";
    let preset = "has no effect with efficiency = true: the efficiency preset sizes its phases by their stability (efficiency_window, efficiency_budget)";
    assert_eq!(
        got,
        vec![
            ("probes.[6].energy_targets", "unknown key (check the spelling; see the example config)"),
            ("probes[0].energy_target", "`two percent` is not a percentage; write e.g. 2% or off"),
            ("probes[0].energy_budget", "`2 days` is outside 0s..=1day"),
            ("probes[1].energy_target", "`150%` is outside (0, 100] %"),
            ("probes[1].energy_budget", "`soon` is not a duration (expected number at 0); write e.g. `500ms`, `5s` or `2m`"),
            ("probes[2].energy_target", no_power),
            ("probes[2].energy_budget", no_power),
            ("probes[3].energy_budget", no_target),
            ("probes[4].energy_budget", no_target),
            ("probes[5].energy_target", preset),
            ("probes[5].energy_budget", preset),
        ]
    );
}

/// Fires of `[[probes]]` entries with an `energy_target` on the INA226 fixture (18 W held, updated
/// every 2 ms, read every 1 ms, accuracy class ±1.2 %), each a quick probe of a 32 MiB file. At
/// 2 % the runs are sized: the plan has the entry's target and budget, every run has the IOCount
/// the plan chose, the pilot's runs are not in the report, and the runs that miss 2 % are the
/// flagged ones. At 1 %, below the class, nothing is lengthened and every run is flagged.
#[test]
fn a_scheduled_probe_sizes_and_flags_its_runs_to_its_energy_target() {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/ina226/sys");
    let job = |name: &str, target: &str| {
        format!(
            "[[probes]]\nname = \"{name}\"\nschedule = \"0 0 3 * * *\"\ntarget = \"{}\"\nsize = \"32MiB\"\nquick = true\nrepetitions = 1\n\
             out = \"{}\"\npower_interval = \"1ms\"\nidle = \"300ms\"\nsettle = \"50ms\"\ntail = \"100ms\"\nenergy_target = \"{target}\"\nenergy_budget = \"20m\"\n",
            dir.path().join(format!("{name}.dat")).display(),
            dir.path().join("out").display()
        )
    };
    let text = format!(
        "agent_id = \"sched-target\"\n{TLS}[sources]\nsysfs_root = \"{}\"\nrapl = false\n{}{}",
        root.display(),
        job("sized", "2%"),
        job("unreachable", "1%")
    );
    let c = Config::from_str(Path::new("agent.toml"), &text).unwrap();
    let fire = |i: usize| wattflip_agent::app::schedule::fire(&c.probes[i], "sched-target", std::sync::Arc::default()).unwrap();
    let planned = wattflip_uflip::PlanOptions::quick(32 << 20).counts;
    let base = |r: &wattflip_uflip::RunResult| planned.count(wattflip_uflip::Baseline::parse(&r.pattern).unwrap());
    let flagged = |e: &wattflip_agent::energy::ProbeEnergy, pct: &str| -> Vec<usize> {
        let why = format!("above the --energy-target {pct}");
        e.runs.iter().filter(|r| r.low_confidence_reason.as_deref().is_some_and(|w| w.contains(&why))).map(|r| r.run_id).collect()
    };

    let m = fire(0);
    let plan = m.sizing.expect("the runs were sized");
    println!("{}", plan.describe("ina226 fixture"));
    assert_eq!((plan.target, plan.budget, plan.scale.len()), (0.02, Duration::from_secs(1200), 12));
    assert_eq!(m.report.runs.len(), 12, "the pilot's runs are not the probe's");
    for (i, r) in m.report.runs.iter().enumerate() {
        let want = if plan.scale[i] > 1.0 { (base(r) as f64 * plan.scale[i]).ceil() as u64 } else { base(r) };
        assert_eq!(r.io_count, want, "{} {}: × {}", r.experiment, r.value, plan.scale[i]);
    }
    assert!(plan.lengthened() >= 3, "{:?}", plan.scale);
    let e = m.energy.expect("per-run energy");
    let missed: Vec<usize> = e.runs.iter().filter(|r| r.energy_u95_j.is_some_and(|u| u > 0.02 * r.energy_j)).map(|r| r.run_id).collect();
    println!("runs above 2 %: {missed:?}");
    assert_eq!((e.runs.len(), flagged(&e, "2.0 %")), (12, missed));

    let m = fire(1);
    let plan = m.sizing.expect("the plan says why nothing is lengthened");
    assert_eq!((plan.target, plan.min_run, plan.lengthened()), (0.01, None, 0));
    assert!(m.report.runs.iter().all(|r| r.io_count == base(r)));
    let e = m.energy.expect("per-run energy");
    assert_eq!(flagged(&e, "1.0 %"), (0..12).collect::<Vec<_>>());
    let notices: Vec<(&str, &str)> = e.notices.iter().map(|n| (n.kind.as_str(), n.message.as_str())).collect();
    assert_eq!(
        notices,
        [("source_cannot_reach_target", "hwmon:ina226-0-0040/power1: the accuracy class ±1.2 % alone exceeds --energy-target 1.0 %: no run can reach it")]
    );
}
