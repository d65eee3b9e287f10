//! The efficiency preset per NVMe power state (issue 42) against the truth generator
//! (`support/efficiency_gen.rs`, no code shared with the agent) and the fake nvme-cli: the model
//! drive's power and IO rate depend on the profile AND on the power state the fake controller is
//! in (read from its FID 02h at every window, as a real drive is in whatever state was set). PS0
//! runs at full power, PS1 is capped (sequential writes slower and at lower power, random reads
//! unchanged), PS2 lower still. Checked: each (profile, state) row reports the generator's
//! measured ratio exactly and the model's truth within its stated 95 % interval; above-idle
//! figures use the same state's idle; the rows, records and page carry the state; and the
//! original state is put back after success, after a phase error, after a stop, after a panic and
//! when one state cannot be set (that state reported `not_set`, the others measured).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/efficiency_gen.rs"]
mod efficiency_gen;

use efficiency_gen::{steady, Drive, Model, S};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wattflip_agent::clock::Clock;
use wattflip_agent::drives::changes::ChangeLog;
use wattflip_agent::drives::config::DrivesConfig;
use wattflip_agent::drives::governor::Controller;
use wattflip_agent::probes::efficiency::run::{report_phases, EfficiencyReport, PhaseReport};
use wattflip_agent::probes::efficiency::stability::StabilityConfig;
use wattflip_agent::probes::efficiency::states::{run_states, StateSelection, StatesRun};
use wattflip_agent::probes::efficiency::{measure_profiles, EfficiencyOptions, EnergyFigure, Phase, PhaseBudget, PhaseSource, Profile, Window};
use wattflip_agent::probes::ProbeCmdError;
use wattflip_drives::command::{CommandError, CommandOutput, CommandRunner, Exit};
use wattflip_drives::fake::{FakeNvme, SetBehaviour};
use wattflip_proto::v1::PowerStateOutcome as Outcome;

const DEV: &str = "/dev/nvme0";
const CAP: u64 = 3_840_000_000_000;
const PROFILES: [Profile; 3] = [Profile::ReadyIdle, Profile::RandomRead4k, Profile::SeqWrite128k];

/// The model drive per (state, profile): (watts, IOs per second, IO size).
fn truth(state: u32, p: Profile) -> (f64, u64, u64) {
    match (state, p) {
        // Ready idle 2.4 W in PS0 and PS1 (0.625 W/TB), 2.0 W in PS2.
        (0 | 1, Profile::ReadyIdle) => (2.4, 0, 0),
        (_, Profile::ReadyIdle) => (2.0, 0, 0),
        // Random reads: 5.2 W at 156 000 IOPS = 30 000 IOPS/W, the same under the PS1 cap.
        (0 | 1, Profile::RandomRead4k) => (5.2, 156_000, 4096),
        // PS2: 3.2 W at 64 000 IOPS = 20 000 IOPS/W.
        (_, Profile::RandomRead4k) => (3.2, 64_000, 4096),
        // Sequential writes: PS0 7.2 W at 375 MiB/s = 52.083 MiB/s/W; PS1 5.0 W at 200 MiB/s =
        // 40 MiB/s/W; PS2 3.0 W at 75 MiB/s = 25 MiB/s/W.
        (0, _) => (7.2, 3000, 128 << 10),
        (1, _) => (5.0, 1600, 128 << 10),
        _ => (3.0, 600, 128 << 10),
    }
}

/// A generator window: [start, end) in ns, true and measured energy.
type Logged = (i64, i64, f64, f64);

/// The model drive: each phase is a generator [`Drive`] for the state the fake controller is in
/// and the profile, continuing one clock; optionally a phase that fails or stops the preset.
struct StateDrive {
    fake: Arc<FakeNvme>,
    phase: Option<(u32, Profile, Drive)>,
    now: i64,
    /// Every finished or running phase's (state, profile, window log).
    done: Vec<(u32, Profile, Vec<Logged>)>,
    fail_in: Option<(u32, Profile)>,
    stop_in: Option<(u32, Profile, Arc<AtomicBool>)>,
    panic_in: Option<u32>,
}

impl StateDrive {
    fn new(fake: Arc<FakeNvme>) -> StateDrive {
        StateDrive { fake, phase: None, now: 10 * S, done: Vec::new(), fail_in: None, stop_in: None, panic_in: None }
    }

    fn state(&self) -> u32 {
        self.fake.feature(DEV, 2).unwrap() & 0x1f
    }

    fn close_phase(&mut self) {
        if let Some((s, p, d)) = self.phase.take() {
            self.done.push((s, p, d.log));
        }
    }

    /// The generator's windows of (state, profile): [start, end), true and measured energy.
    fn log(&mut self, state: u32, p: Profile) -> Vec<Logged> {
        self.close_phase();
        self.done.iter().filter(|(s, q, _)| *s == state && *q == p).flat_map(|(_, _, l)| l.clone()).collect()
    }
}

impl PhaseSource for StateDrive {
    type Error = ProbeCmdError;

    fn next_window(&mut self, profile: Profile) -> Result<Window, ProbeCmdError> {
        let state = self.state();
        if self.fail_in == Some((state, profile)) {
            return Err(ProbeCmdError::Input { path: PathBuf::from(DEV), reason: format!("IO error in PS{state}") });
        }
        if self.panic_in == Some(state) {
            panic!("the phase loop panicked in PS{state}");
        }
        if let Some((s, p, flag)) = &self.stop_in {
            if (*s, *p) == (state, profile) {
                // As the signal task does: the flag is set, and the next window fails on it.
                flag.store(true, Ordering::Relaxed);
                return Err(ProbeCmdError::Input { path: PathBuf::from(DEV), reason: "stopped".into() });
            }
        }
        if !matches!(&self.phase, Some((s, p, _)) if (*s, *p) == (state, profile)) {
            self.close_phase();
            let (watts, iops, io_bytes) = truth(state, profile);
            let model = Model { watts, iops, io_bytes, ..steady(0.0, 0, 0) };
            let seed = 17 + u64::from(state) * 100 + self.done.len() as u64;
            self.phase = Some((state, profile, Drive::starting_at(model, seed, 0.004, self.now)));
        }
        let (_, _, d) = self.phase.as_mut().unwrap();
        let w = d.next_window(profile).unwrap();
        self.now = d.now;
        Ok(w)
    }

    fn interval_energy(&mut self, from: i64, to: i64) -> Option<EnergyFigure> {
        self.phase.as_mut().and_then(|(_, _, d)| d.interval_energy(from, to))
    }
}

/// nvme-cli that refuses one power state (Feature Not Changeable), the fake otherwise.
struct RefuseState {
    inner: Arc<FakeNvme>,
    state: u32,
}

impl CommandRunner for RefuseState {
    fn run(&self, argv: &[String], timeout: Duration) -> Result<CommandOutput, CommandError> {
        let refused = argv.get(1).is_some_and(|a| a == "set-feature")
            && argv.iter().any(|a| a == "--feature-id=2")
            && argv.iter().any(|a| *a == format!("--value={}", self.state));
        if refused {
            let stderr = "NVMe status: Feature Not Changeable: The Feature Identifier is not able to be changed(0x410e)\n".to_string();
            return Ok(CommandOutput { argv: argv.to_vec(), exit: Exit::Code(1), stdout: String::new(), stderr });
        }
        self.inner.run(argv, timeout)
    }
}

fn fixture(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("drives/tests/fixtures").join(rel)).unwrap()
}

/// The constructed five-state drive (PS0 7.5 W, PS1 5.9 W, PS2 3.6 W operational; PS3, PS4 not),
/// starting in `original`.
fn fake(original: u32) -> Arc<FakeNvme> {
    Arc::new(FakeNvme::new().with_controller(DEV, &fixture("nvme/constructed-5ps-nvme-cli-2.3-id-ctrl.json"), original, SetBehaviour::Honour))
}

fn open(runner: Arc<dyn CommandRunner>, state_dir: &Path) -> (Controller, ChangeLog) {
    let drives = DrivesConfig { state_dir: state_dir.to_path_buf(), smartctl: false, ..Default::default() };
    let mut rec = ChangeLog::new(Clock::new());
    let ctl = Controller::open(&drives, DEV, runner, &mut rec).unwrap();
    (ctl, rec)
}

fn options() -> EfficiencyOptions {
    EfficiencyOptions { stability: StabilityConfig::default(), budget: PhaseBudget { window: Duration::from_secs(1), budget: Duration::from_secs(60) } }
}

/// Runs the three profiles in `wanted` with `src`, as `probe --efficiency --power-states` does.
fn per_state(
    ctl: &Controller,
    wanted: &StateSelection,
    dir: &Path,
    rec: &mut ChangeLog,
    src: &mut StateDrive,
    stop: Option<Arc<AtomicBool>>,
) -> Result<StatesRun, ProbeCmdError> {
    let stopping = move || stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed));
    let mut measure = |_: u32| measure_profiles(&PROFILES, &mut *src, &options(), &stopping);
    run_states(ctl, wanted, dir, rec, &mut measure)
}

fn changes(rec: &ChangeLog) -> Vec<(u32, u32, u32, i32)> {
    rec.batch.power_state_changes.iter().map(|c| (c.from_state, c.to_state, c.observed_state, c.outcome)).collect()
}

fn state_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).unwrap().flatten().filter(|e| e.path().extension().is_some_and(|x| x == "json")).count()
}

/// The report as `probe --efficiency` writes it, from a per-state run's phases.
fn report(run: &StatesRun, rec: &ChangeLog) -> EfficiencyReport {
    EfficiencyReport {
        device: "nvme0n1".into(),
        model: "WATTFLIP CONSTRUCTED 5PS NVME".into(),
        firmware: "1.0".into(),
        serial: "S1".into(),
        target_kind: "block".into(),
        capacity_bytes: Some(CAP),
        energy_source: "hwmon:ina226-0-0040/power1".into(),
        energy_scope: "rail".into(),
        energy_note: String::new(),
        started_ns: 10 * S,
        options: options(),
        phases: report_phases(&run.runs, Some(CAP)),
        power_states: run.states.clone(),
        changes: rec.batch.power_state_changes.clone(),
        events: rec.batch.events.clone(),
        interrupted: run.interrupted,
    }
}

/// Checks one state's rows against the generator: the exact measured ratios and the model's truth
/// within the stated interval, the above-idle figures with this state's idle.
fn check_state(rows: &[&PhaseReport], state: u32, src: &mut StateDrive) {
    let span = |r: &PhaseReport| (r.interval_start_ns.unwrap(), r.interval_end_ns.unwrap());
    let measured = |log: &[Logged], (a, b): (i64, i64)| log.iter().filter(|w| w.0 >= a && w.1 <= b).map(|w| w.3).sum::<f64>();
    let close = |v: f64, want: f64| (v - want).abs() <= 1e-12 * want.abs();
    let idle_row = rows.iter().find(|r| r.profile == Profile::ReadyIdle).unwrap();
    let (idle_w, _, _) = truth(state, Profile::ReadyIdle);
    let idle = idle_row.idle.unwrap();
    let e_idle = measured(&src.log(state, Profile::ReadyIdle), span(idle_row));
    assert!(close(idle.watts.value, e_idle / 10.0), "PS{state} idle {:?} vs {}", idle.watts, e_idle / 10.0);
    assert!((idle.watts.value - idle_w).abs() <= idle.watts.u95.unwrap(), "PS{state} idle {:?} vs truth {idle_w}", idle.watts);
    for p in [Profile::RandomRead4k, Profile::SeqWrite128k] {
        let r = rows.iter().find(|r| r.profile == p).unwrap();
        assert_eq!((r.verdict, r.power_state), ("stable", Some(state)), "{r:?}");
        let a = r.active.unwrap();
        let (watts, iops, io) = truth(state, p);
        let e = measured(&src.log(state, p), span(r));
        let (ios, mib) = (iops as f64 * 10.0, (iops * io) as f64 * 10.0 / 1_048_576.0);
        assert_eq!((a.iops, a.mib_per_s), (iops as f64, (iops * io) as f64 / 1_048_576.0), "PS{state} {p:?}");
        let (got, exact, true_ratio) = if p.sequential() {
            (a.mib_per_s_per_watt, mib / e, (iops * io) as f64 / 1_048_576.0 / watts)
        } else {
            (a.iops_per_watt, ios / e, iops as f64 / watts)
        };
        assert!(close(got.value, exact), "PS{state} {p:?}: {got:?} vs the generator's measured {exact}");
        assert!((got.value - true_ratio).abs() <= got.u95.unwrap(), "PS{state} {p:?}: {got:?} does not cover the truth {true_ratio}");
        // Above idle: (E − P_idle·t)/n with this state's measured idle power.
        let above = a.joules_per_io_above_idle.unwrap().value;
        assert!(close(above, (e - idle.watts.value * 10.0) / ios), "PS{state} {p:?}: {above} J/IO above idle");
        assert!((above - (watts - idle_w) / iops as f64).abs() < 0.01 * (watts - idle_w) / iops as f64, "PS{state} {p:?}: {above}");
    }
}

#[test]
fn every_operational_state_reports_its_own_true_efficiency_and_the_original_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(1);
    let (ctl, mut rec) = open(fake.clone(), dir.path());
    let mut src = StateDrive::new(fake.clone());
    let run = per_state(&ctl, &StateSelection::All, dir.path(), &mut rec, &mut src, None).unwrap();
    let r = report(&run, &rec);
    let rows: Vec<(&str, Option<u32>)> = r.phases.iter().map(|p| (p.profile.name(), p.power_state)).collect();
    let want: Vec<(&str, Option<u32>)> = [0, 1, 2].iter().flat_map(|&s| PROFILES.map(|p| (p.name(), Some(s)))).collect();
    assert_eq!(rows, want);
    for state in [0, 1, 2] {
        let of: Vec<&PhaseReport> = r.phases.iter().filter(|p| p.power_state == Some(state)).collect();
        check_state(&of, state, &mut src);
    }
    // Random reads unchanged under the PS1 cap; sequential writes slower and at lower power there.
    let head = |s: u32, p: Profile| r.phases.iter().find(|x| (x.power_state, x.profile) == (Some(s), p)).unwrap().active.unwrap();
    let (sw0, sw1) = (head(0, Profile::SeqWrite128k), head(1, Profile::SeqWrite128k));
    assert!(sw1.mib_per_s < sw0.mib_per_s && sw1.watts.value < sw0.watts.value && sw1.mib_per_s_per_watt.value < sw0.mib_per_s_per_watt.value);
    assert_eq!(head(0, Profile::RandomRead4k).iops, head(1, Profile::RandomRead4k).iops);
    let st: Vec<(u32, &str, Option<f64>)> = r.power_states.iter().map(|s| (s.state, s.status, s.max_watts)).collect();
    assert_eq!(st, vec![(0, "measured", Some(7.5)), (1, "measured", Some(5.9)), (2, "measured", Some(3.6))]);
    // Set, read back, measured, and the original PS1 written back and verified.
    let a = Outcome::Applied as i32;
    assert_eq!(changes(&rec)[..], [(1, 0, 0, a), (0, 1, 1, a), (1, 2, 2, a), (2, 1, 1, Outcome::Restored as i32)]);
    assert_eq!((fake.feature(DEV, 2), state_files(dir.path()), run.original, run.interrupted), (Some(1), 0, 1, false));
    // The records the collector gets carry the state; the page has one row per (profile, state).
    let sent: Vec<(String, Option<u32>)> = wattflip_agent::report::efficiency::phases(&r).into_iter().map(|e| (e.profile, e.power_state)).collect();
    assert_eq!(sent, want.iter().map(|(p, s)| (p.to_string(), *s)).collect::<Vec<_>>());
    let html = wattflip_agent::report::efficiency::render_html(&r);
    assert_eq!(html.matches("<tr><td>seq_write_128k</td><td>PS1</td><td>stable").count(), 1, "{html}");
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!((json["phases"][4]["power_state"].as_u64(), json["power_states"][1]["status"].as_str()), (Some(1), Some("measured")));
}

#[test]
fn a_state_the_drive_refuses_is_reported_not_set_and_the_others_still_run() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(0);
    let runner: Arc<dyn CommandRunner> = Arc::new(RefuseState { inner: fake.clone(), state: 1 });
    let (ctl, mut rec) = open(runner, dir.path());
    let mut src = StateDrive::new(fake.clone());
    let run = per_state(&ctl, &StateSelection::All, dir.path(), &mut rec, &mut src, None).unwrap();
    let st: Vec<(u32, &str)> = run.states.iter().map(|s| (s.state, s.status)).collect();
    assert_eq!(st, vec![(0, "measured"), (1, "not_set"), (2, "measured")]);
    assert!(run.states[1].detail.starts_with("refused 1: NVMe status 0x410e"), "{}", run.states[1].detail);
    let r = report(&run, &rec);
    // No row, no record and no number for PS1: only the states that were set.
    let states: Vec<Option<u32>> = r.phases.iter().map(|p| p.power_state).collect();
    assert_eq!(states, [0, 0, 0, 2, 2, 2].map(Some).to_vec());
    for state in [0, 2] {
        let of: Vec<&PhaseReport> = r.phases.iter().filter(|p| p.power_state == Some(state)).collect();
        check_state(&of, state, &mut src);
    }
    let html = wattflip_agent::report::efficiency::render_html(&r);
    assert!(html.contains("<tr><td>—</td><td>PS1</td><td colspan=\"7\">not set: refused 1: NVMe status 0x410e"), "{html}");
    let (a, rf) = (Outcome::Applied as i32, Outcome::Refused as i32);
    assert_eq!(changes(&rec)[..], [(0, 0, 0, a), (0, 1, 0, rf), (0, 2, 2, a), (2, 0, 0, Outcome::Restored as i32)]);
    assert_eq!((fake.feature(DEV, 2), state_files(dir.path())), (Some(0), 0));
}

#[test]
fn a_phase_error_ends_the_run_after_the_original_is_put_back() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(2);
    let (ctl, mut rec) = open(fake.clone(), dir.path());
    let mut src = StateDrive::new(fake.clone());
    src.fail_in = Some((1, Profile::SeqWrite128k));
    let e = per_state(&ctl, &StateSelection::List(vec![0, 1, 2]), dir.path(), &mut rec, &mut src, None).unwrap_err();
    assert_eq!(e.to_string(), "cannot read /dev/nvme0: IO error in PS1");
    let a = Outcome::Applied as i32;
    // PS2 never measured: the original PS2 is written back at once.
    assert_eq!(changes(&rec)[..], [(2, 0, 0, a), (0, 1, 1, a), (1, 2, 2, Outcome::Restored as i32)]);
    assert_eq!((fake.feature(DEV, 2), state_files(dir.path())), (Some(2), 0));
}

#[test]
fn a_stop_keeps_the_completed_phases_and_restores_and_so_does_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(2);
    let (ctl, mut rec) = open(fake.clone(), dir.path());
    let mut src = StateDrive::new(fake.clone());
    let flag = Arc::new(AtomicBool::new(false));
    src.stop_in = Some((1, Profile::RandomRead4k, flag.clone()));
    let run = per_state(&ctl, &StateSelection::All, dir.path(), &mut rec, &mut src, Some(flag)).unwrap();
    assert!(run.interrupted);
    let st: Vec<(u32, &str)> = run.states.iter().map(|s| (s.state, s.status)).collect();
    assert_eq!(st, vec![(0, "measured"), (1, "interrupted"), (2, "not_reached")]);
    let kept: Vec<(Option<u32>, Profile)> = run.runs.iter().flat_map(|r| r.phases.iter().map(move |p: &Phase| (r.state, p.profile))).collect();
    assert_eq!(kept, vec![(Some(0), Profile::ReadyIdle), (Some(0), Profile::RandomRead4k), (Some(0), Profile::SeqWrite128k), (Some(1), Profile::ReadyIdle)]);
    assert_eq!((fake.feature(DEV, 2), state_files(dir.path())), (Some(2), 0));
    // A panic in PS1's phases: the guard's drop puts PS2 back while unwinding.
    let (ctl, mut rec) = open(fake.clone(), dir.path());
    let mut src = StateDrive::new(fake.clone());
    src.panic_in = Some(1);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| per_state(&ctl, &StateSelection::All, dir.path(), &mut rec, &mut src, None)));
    assert!(panicked.is_err());
    assert_eq!((fake.feature(DEV, 2), state_files(dir.path())), (Some(2), 0));
}

#[test]
fn a_listed_state_that_is_not_operational_is_refused_before_the_drive_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(1);
    let (ctl, mut rec) = open(fake.clone(), dir.path());
    let mut src = StateDrive::new(fake.clone());
    let e = per_state(&ctl, &StateSelection::List(vec![0, 3]), dir.path(), &mut rec, &mut src, None).unwrap_err();
    assert!(e.to_string().contains("non-operational"), "{e}");
    assert_eq!((fake.set_calls(), changes(&rec).len(), state_files(dir.path())), (0, 0, 0));
}

/// The live preset per state (`probe --efficiency --power-states all` on a file with
/// `--power-states-controller`): the fake controller's states are switched around real uFLIP
/// phases on a scratch file, with the INA226 fixture's constant 18 W as power; every phase is
/// labelled, the batch the collector gets carries the tags and the state changes, and the
/// original state is back.
#[test]
fn the_live_preset_switches_labels_sends_and_restores() {
    use wattflip_agent::probes::efficiency::run::{run, EfficiencyArgs};
    use wattflip_agent::probes::efficiency::states::PowerStatesArgs;
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(1);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/ina226/sys");
    let energy = wattflip_agent::probes::EnergyOptions {
        sysfs_root: root,
        kinds: Default::default(),
        period: Duration::from_millis(5),
        idle: Duration::ZERO,
        settle: Duration::ZERO,
        tail: Duration::ZERO,
        zone: None,
        drives: DrivesConfig { state_dir: dir.path().join("state"), smartctl: false, ..Default::default() },
        energy_target: None,
        energy_budget: Duration::from_secs(600),
    };
    let args = EfficiencyArgs {
        target: dir.path().join("eff.dat"),
        size: 16 << 20,
        destroy_consent: vec![],
        capacity: Some(2_000_000_000_000),
        seed: 1,
        options: EfficiencyOptions {
            stability: StabilityConfig { min_windows: 3, band: 0.9, max_trend: 0.9 },
            budget: PhaseBudget { window: Duration::from_millis(40), budget: Duration::from_secs(2) },
        },
        profiles: vec![Profile::ReadyIdle, Profile::RandomRead4k],
        stop: None,
        power_states: Some(PowerStatesArgs { selection: StateSelection::All, controller: Some(DEV.into()) }),
    };
    let host = wattflip_agent::probes::Host { clock: Clock::new(), runner: fake.clone() };
    let r = run(&args, &energy, &host).unwrap();
    let rows: Vec<(&str, Option<u32>, &str)> = r.phases.iter().map(|p| (p.profile.name(), p.power_state, p.verdict)).collect();
    let want: Vec<(&str, Option<u32>, &str)> =
        [0, 1, 2].iter().flat_map(|&s| [("ready_idle", Some(s), "stable"), ("rand_read_4k", Some(s), "stable")]).collect();
    assert_eq!(rows, want);
    for p in &r.phases {
        // 18 W in every state (a flat rail): each state's idle is 18 W, its IOPS/W its IOPS / 18.
        match (p.idle, p.active) {
            (Some(i), None) => assert!((i.watts.value - 18.0).abs() < 1e-9, "{p:?}"),
            (None, Some(a)) => assert!((a.iops_per_watt.value - a.iops / 18.0).abs() < 1e-9 * a.iops, "{p:?}"),
            _ => panic!("{p:?}"),
        }
    }
    assert_eq!(fake.feature(DEV, 2), Some(1));
    let a = Outcome::Applied as i32;
    let got: Vec<(u32, u32, u32, i32)> = r.changes.iter().map(|c| (c.from_state, c.to_state, c.observed_state, c.outcome)).collect();
    assert_eq!(got, [(1, 0, 0, a), (0, 1, 1, a), (1, 2, 2, a), (2, 1, 1, Outcome::Restored as i32)]);
    // The collector's points for the batch as `probe --collector` sends it.
    let sent = wattflip_proto::v1::Batch {
        agent_id: "a1".into(),
        sequence: 1,
        efficiency: wattflip_agent::report::efficiency::phases(&r),
        power_state_changes: r.changes.clone(),
        events: r.events.clone(),
        ..Default::default()
    };
    let domain = wattflip_proto::domain::convert_batch("a1", sent).unwrap();
    let tags = wattflip_proto::schema::HostTags { host: "a1".into(), labels: Default::default() };
    let (body, errors) = wattflip_proto::lineproto::encode_all(&wattflip_proto::schema::batch_points(&domain, &tags));
    assert!(errors.is_empty(), "{errors:?}");
    let eff: Vec<&str> = body.lines().filter(|l| l.starts_with("device_efficiency,")).collect();
    assert_eq!(eff.len(), 6, "{body}");
    for (line, (profile, state, _)) in eff.iter().zip(&want) {
        assert!(line.contains(&format!(",power_state={},profile={profile},verdict=stable ", state.unwrap())), "{line}");
    }
    assert_eq!(body.lines().filter(|l| l.starts_with("power_state,")).count(), 4, "{body}");
}
