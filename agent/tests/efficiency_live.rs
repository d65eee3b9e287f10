//! `probe --efficiency` end to end on a scratch file with a fixture power source: the INA226 tree
//! of `tests/fixtures/sysfs` reads a constant 18 W on the drive's rail, so every ratio is known from
//! the measured IO counts and times alone (ready idle 18 W; IOPS/W = IOPS / 18), and the written
//! folder (report.json, report.html, efficiency.lp) says the same.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;
use wattflip_agent::probes::efficiency::run::{run, EfficiencyArgs};
use wattflip_agent::probes::efficiency::stability::StabilityConfig;
use wattflip_agent::probes::efficiency::{EfficiencyOptions, PhaseBudget, Profile};
use wattflip_agent::probes::{EnergyOptions, Host};

fn energy_options(root: &std::path::Path) -> EnergyOptions {
    EnergyOptions {
        sysfs_root: root.to_path_buf(),
        kinds: Default::default(),
        period: Duration::from_millis(5),
        idle: Duration::ZERO,
        settle: Duration::ZERO,
        tail: Duration::ZERO,
        zone: None,
        drives: Default::default(),
        energy_target: None,
        energy_budget: std::time::Duration::from_secs(600),
    }
}

#[test]
fn the_preset_on_a_file_reports_the_fixtures_known_power_and_its_own_rates() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/ina226/sys");
    let args = EfficiencyArgs {
        target: dir.path().join("eff.dat"),
        size: 16 << 20,
        destroy_consent: vec![],
        capacity: Some(2_000_000_000_000),
        seed: 1,
        // A busy test machine's throughput varies: a wide band keeps the verdicts about the power.
        options: EfficiencyOptions {
            stability: StabilityConfig { min_windows: 3, band: 0.9, max_trend: 0.9 },
            budget: PhaseBudget { window: Duration::from_millis(60), budget: Duration::from_secs(2) },
        },
        profiles: Profile::ALL.to_vec(),
        stop: None,
        power_states: None,
    };
    let host = Host { clock: wattflip_agent::clock::Clock::new(), runner: std::sync::Arc::new(wattflip_drives::SystemRunner::new()) };
    let r = run(&args, &energy_options(&root), &host).unwrap();
    assert_eq!((r.energy_source.as_str(), r.energy_scope.as_str(), r.energy_note.as_str()), ("hwmon:ina226-0-0040/power1", "rail", ""));
    assert_eq!(r.phases.len(), 6);
    let idle = r.phases[0].idle.expect("a stable ready idle");
    // 18 W on 2 TB: 9 W/TB, 111.1 GB/W. A flat source has no edge or noise term: what is left is
    // the INA226's accuracy class (±1.2 %, the driver table), a bound the model takes whole:
    // 1.2 % × 18 W = 0.216 W; the µW resolution adds under 1e-6 W.
    assert!((idle.watts.value - 18.0).abs() < 1e-9, "{idle:?}");
    assert!((idle.watts.u95.expect("a stated uncertainty") - 0.216).abs() < 1e-6, "{idle:?}");
    assert!((idle.watts_per_tb.unwrap().value - 9.0).abs() < 1e-9);
    assert!((idle.gb_per_watt.unwrap().value - 2000.0 / 18.0).abs() < 1e-9);
    for p in &r.phases[1..] {
        assert_eq!(p.verdict, "stable", "{p:?}");
        let a = p.active.expect("stable phases have metrics");
        assert_eq!(a.ios as f64 / a.seconds, a.iops);
        assert!((a.iops_per_watt.value - a.iops / 18.0).abs() < 1e-9 * a.iops, "{:?}: {a:?}", p.profile);
        // The IO count is exact: IOPS/W carries the energy's relative half-width, 1.2 %.
        let rel = a.iops_per_watt.u95.expect("a stated uncertainty") / a.iops_per_watt.value;
        assert!((rel - 0.012).abs() < 1e-6, "{:?}: {a:?}", p.profile);
        assert!((a.mib_per_s_per_watt.value - a.mib_per_s / 18.0).abs() < 1e-9 * a.mib_per_s.max(1.0), "{a:?}");
        // Above the (same) ready-idle power there is nothing left.
        assert!(a.joules_per_io_above_idle.unwrap().value.abs() < 1e-9, "{a:?}");
        let io = if p.profile.sequential() { 128 << 10 } else { 4096 };
        assert_eq!(a.bytes, a.ios * io);
    }
    assert!((r.phases[5].read_pct.unwrap() - 200.0 / 3.0).abs() < 1e-9);
    let tags = wattflip_proto::schema::HostTags { host: "h1".into(), labels: Default::default() };
    let files = wattflip_agent::report::efficiency::write(dir.path(), &r, &tags).unwrap();
    assert_eq!(files.len(), 3);
    let lp = std::fs::read_to_string(dir.path().join("efficiency/efficiency.lp")).unwrap();
    assert_eq!(lp.lines().count(), 6);
    assert!(lp.lines().next().unwrap().starts_with("device_efficiency,device=file:eff.dat,host=h1,model=file,profile=ready_idle,verdict=stable "), "{lp}");
    assert!(lp.contains("watts_per_tb=") && lp.contains("iops_per_watt=") && lp.contains("iops_per_watt_u95=") && lp.contains("watts_u95="), "{lp}");
    let html = std::fs::read_to_string(dir.path().join("efficiency/report.html")).unwrap();
    assert!(html.contains("<h3>IOPS/W</h3>") && html.contains("<h3>MiB/s/W</h3>") && !html.contains("(± unknown)"), "{html}");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("efficiency/report.json")).unwrap()).unwrap();
    assert!((json["phases"][0]["idle"]["watts"]["u95"].as_f64().unwrap() - 0.216).abs() < 1e-6, "{json}");
}

#[test]
fn without_a_drive_side_source_every_phase_is_not_measured_and_has_no_figures() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/rapl-only/sys");
    let args = EfficiencyArgs {
        target: dir.path().join("eff.dat"),
        size: 16 << 20,
        destroy_consent: vec![],
        capacity: None,
        seed: 1,
        options: EfficiencyOptions {
            stability: StabilityConfig { min_windows: 3, ..Default::default() },
            budget: PhaseBudget { window: Duration::from_millis(20), budget: Duration::from_secs(1) },
        },
        profiles: vec![Profile::ReadyIdle, Profile::RandomRead4k],
        stop: None,
        power_states: None,
    };
    let host = Host { clock: wattflip_agent::clock::Clock::new(), runner: std::sync::Arc::new(wattflip_drives::SystemRunner::new()) };
    let r = run(&args, &energy_options(&root), &host).unwrap();
    assert!(r.energy_note.starts_with("drive energy not measurable here"), "{}", r.energy_note);
    for p in &r.phases {
        assert_eq!((p.verdict, p.windows_run, p.idle.is_none(), p.active.is_none()), ("not_measured", 3, true, true), "{p:?}");
    }
}

#[test]
fn scheduled_efficiency_probes_are_configured_in_probes_entries() {
    let dir = tempfile::tempdir().unwrap();
    let write = |text: &str| {
        let path = dir.path().join("agent.toml");
        std::fs::write(&path, format!("agent_id = \"a\"\n[tls]\ninsecure_plaintext_loopback_only = true\n{text}")).unwrap();
        wattflip_agent::config::Config::from_file(&path)
    };
    let c = write(
        "[[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/x\"\nefficiency = true\nefficiency_window = \"2s\"\nefficiency_windows = 6\nefficiency_band = 3.0\ncapacity = \"4TB\"\n\
         [[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/y\"\n",
    )
    .unwrap();
    let e = c.probes[0].efficiency.clone().expect("efficiency = true");
    assert_eq!((e.options.budget.window, e.options.budget.budget, e.capacity), (Duration::from_secs(2), Duration::from_secs(120), Some(4_000_000_000_000)));
    assert_eq!((e.options.stability.min_windows, e.options.stability.band, e.options.stability.max_trend), (6, 0.03, 0.02));
    assert!(c.probes[1].efficiency.is_none());
    let err = write(
        "[[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/x\"\nefficiency = true\nefficiency_windows = 2\n\
         [[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/y\"\nefficiency_band = 3.0\n\
         [[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/z\"\nefficiency = true\npower = false\nefficiency_budget = \"5s\"\n",
    )
    .unwrap_err();
    let got: Vec<(&str, &str)> = err.problems.iter().map(|p| (p.path.as_str(), p.message.as_str())).collect();
    assert_eq!(
        got,
        vec![
            ("probes[0].efficiency_windows", "2: an interval needs at least 3 windows (a trend needs a residual)"),
            ("probes[1].efficiency_band", "has no effect without efficiency = true"),
            ("probes[2].efficiency", "measures power: it needs power recording (remove power = false)"),
            ("probes[2].efficiency_budget", "5s is shorter than one interval (10 windows of 1s)"),
        ]
    );
}

#[test]
fn scheduled_efficiency_probes_take_power_states_as_the_flag_does() {
    use wattflip_agent::probes::efficiency::states::{PowerStatesArgs, StateSelection};
    let dir = tempfile::tempdir().unwrap();
    let write = |text: &str| {
        let path = dir.path().join("agent.toml");
        std::fs::write(&path, format!("agent_id = \"a\"\n[tls]\ninsecure_plaintext_loopback_only = true\n{text}")).unwrap();
        wattflip_agent::config::Config::from_file(&path)
    };
    let entry = |extra: &str| format!("[[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/x\"\n{extra}\n");
    let c = write(
        &[
            entry("efficiency = true\npower_states = \"all\""),
            entry("efficiency = true\npower_states = [2, 0]\npower_states_controller = \"/dev/nvme1\""),
            entry("efficiency = true"),
        ]
        .concat(),
    )
    .unwrap();
    let got: Vec<Option<PowerStatesArgs>> = c.probes.iter().map(|p| p.efficiency.clone().unwrap().power_states).collect();
    assert_eq!(
        got,
        vec![
            Some(PowerStatesArgs { selection: StateSelection::All, controller: None }),
            Some(PowerStatesArgs { selection: StateSelection::List(vec![2, 0]), controller: Some("/dev/nvme1".into()) }),
            None
        ]
    );
    let err = write(
        &[
            entry("power_states = \"all\""),
            entry("efficiency = true\npower_states = \"max\""),
            entry("efficiency = true\npower_states_controller = \"/dev/nvme0\""),
        ]
        .concat(),
    )
    .unwrap_err();
    let got: Vec<(&str, &str)> = err.problems.iter().map(|p| (p.path.as_str(), p.message.as_str())).collect();
    assert_eq!(
        got,
        vec![
            ("probes[0].power_states", "has no effect without efficiency = true"),
            ("probes[1].power_states", "`max` is not a power state: write `all` or a list such as 0,2"),
            ("probes[2].power_states_controller", "has no effect without power_states"),
        ]
    );
}

/// Issue 42: a scheduled efficiency probe (`[[probes]]` with `efficiency = true`) sends its phases
/// with its event, and the collector's points for them (its checks and schema on the batch as
/// sent) are the lines of the folder's efficiency.lp: the fixture's 18 W ready idle on 2 TB, 9 W/TB.
#[test]
fn a_scheduled_efficiency_probe_sends_the_phases_of_its_lp_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/ina226/sys");
    let (out, target) = (dir.path().join("out"), dir.path().join("sched.dat"));
    let path = dir.path().join("agent.toml");
    std::fs::write(
        &path,
        format!(
            "agent_id = \"sched-eff\"\n[tls]\ninsecure_plaintext_loopback_only = true\n[sources]\nsysfs_root = \"{}\"\n\
             [[probes]]\nname = \"eff\"\nschedule = \"0 0 3 * * *\"\ntarget = \"{}\"\nsize = \"16MiB\"\nout = \"{}\"\npower_interval = \"5ms\"\n\
             efficiency = true\nefficiency_window = \"100ms\"\nefficiency_windows = 3\nefficiency_budget = \"1s\"\nefficiency_band = 90.0\n\
             efficiency_trend = 90.0\ncapacity = \"2TB\"\n",
            root.display(),
            target.display(),
            out.display()
        ),
    )
    .unwrap();
    let c = wattflip_agent::config::Config::from_file(&path).unwrap();
    let job = &c.probes[0];
    let halt = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let batches = wattflip_agent::app::efficiency::scheduled(job, job.efficiency.as_ref().unwrap(), "sched-eff", halt);
    assert_eq!(batches.len(), 1);
    let b = &batches[0];
    assert_eq!(b.events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(), ["efficiency_probe"], "{:?}", b.events);
    let profiles: Vec<&str> = b.efficiency.iter().map(|e| e.profile.as_str()).collect();
    assert_eq!(profiles, ["ready_idle", "rand_read_4k", "rand_write_4k", "seq_read_128k", "seq_write_128k", "mixed_70_30_4k"]);
    let idle = &b.efficiency[0];
    assert_eq!((idle.verdict.as_str(), idle.device.as_str(), idle.model.as_str()), ("stable", "file:sched.dat", "file"));
    assert!((idle.watts.unwrap() - 18.0).abs() < 1e-9 && (idle.watts_per_tb.unwrap() - 9.0).abs() < 1e-9, "{idle:?}");
    let probe_id = &b.events[0].attributes["probe_id"];
    assert!(b.efficiency.iter().all(|e| &e.probe_id == probe_id));
    // What the collector writes for the batch as sent, against the folder's file.
    let sent = wattflip_proto::v1::Batch { agent_id: "sched-eff".into(), sequence: 1, efficiency: b.efficiency.clone(), ..Default::default() };
    let domain = wattflip_proto::domain::convert_batch("sched-eff", sent).unwrap();
    let tags = wattflip_proto::schema::HostTags { host: "sched-eff".into(), labels: Default::default() };
    let (body, errors) = wattflip_proto::lineproto::encode_all(&wattflip_proto::schema::batch_points(&domain, &tags));
    assert!(errors.is_empty(), "{errors:?}");
    let lp = std::fs::read_to_string(out.join(format!("eff-{probe_id}/efficiency/efficiency.lp"))).unwrap();
    assert_eq!(body, lp);
    assert_eq!(lp.lines().count(), 6);
}
