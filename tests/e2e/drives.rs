//! Drives end to end: the real agent binary runs the fake `nvme` (nvme-cli 2.3 replaying QEMU 7.2's
//! emulated controller: one power state, set-feature refused with 0x410e, 323 K, critical warning
//! bit 1 set) and a fake `smartctl` printing the recorded QEMU capture, through its real
//! `SystemRunner`; the collector writes to a real influxd and the test reads exact rows back. A
//! second test SIGKILLs and SIGTERMs a governor sweep and checks that the original power state
//! comes back (at the next start, and at once). A third completes a sweep with a fixture drive
//! rail that follows the power state (the fake nvme rewrites it on every applied set), streams it
//! through the collector into influxd, and asks `wattflip-collector plan power-cap` about it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use wattflip_e2e::*;

const DB: &str = "wf_drives";
const HOST: &str = "e2e-drives";

pub(crate) fn drive_fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/drives/tests/fixtures")
}

pub(crate) fn copy_exe(src: &Path, dst: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::copy(src, dst).expect("copy fake tool");
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// The fake nvme in `dir/nvme/` with the given id-ctrl and list fixtures, FID 02h value and mode.
pub(crate) fn fake_nvme(dir: &Path, id_ctrl: &str, list: &str, power_value: u32, mode: &str) -> PathBuf {
    let d = dir.join("nvme");
    std::fs::create_dir_all(d.join("state")).unwrap();
    let fx = drive_fixtures();
    copy_exe(&fx.join("fake-nvme/nvme"), &d.join("nvme"));
    std::fs::copy(fx.join("nvme").join(id_ctrl), d.join("id-ctrl.json")).unwrap();
    std::fs::copy(fx.join("nvme").join(list), d.join("list.json")).unwrap();
    std::fs::copy(fx.join("nvme/qemu-nvme-cli-2.3-smart-log.json"), d.join("smart-log.json")).unwrap();
    std::fs::write(d.join("state/power_value"), format!("{power_value}\n")).unwrap();
    std::fs::write(d.join("state/mode"), format!("{mode}\n")).unwrap();
    d
}

/// The fake smartctl in `dir/smartctl/`: scan finds /dev/nvme0, `-a` prints QEMU's capture, exit 8.
pub(crate) fn fake_smartctl(dir: &Path) -> PathBuf {
    let d = dir.join("smartctl");
    std::fs::create_dir_all(&d).unwrap();
    let fx = drive_fixtures();
    copy_exe(&fx.join("fake-smartctl/smartctl"), &d.join("smartctl"));
    std::fs::write(
        d.join("scan.json"),
        r#"{"json_format_version":[1,0],"smartctl":{"version":[7,3],"exit_status":0},
"devices":[{"name":"/dev/nvme0","info_name":"/dev/nvme0","type":"nvme","protocol":"NVMe"}]}"#,
    )
    .unwrap();
    std::fs::copy(fx.join("smartctl/qemu-smartctl-7.3-nvme-H-A.json"), d.join("report.json")).unwrap();
    std::fs::write(d.join("report.exit"), "8\n").unwrap();
    d
}

fn config(dir: &Path, collector: &str, nvme: &Path, smartctl: Option<&Path>) -> PathBuf {
    config_with(dir, collector, nvme, smartctl, "")
}

/// [`config`] with more `[drives]` keys (`extra`, one per line).
pub(crate) fn config_with(dir: &Path, collector: &str, nvme: &Path, smartctl: Option<&Path>, extra: &str) -> PathBuf {
    let sys = dir.join("sys");
    std::fs::create_dir_all(&sys).unwrap();
    let smart = match smartctl {
        Some(s) => format!("smartctl_path = \"{}\"\n", s.join("smartctl").display()),
        None => "smartctl = false\n".into(),
    };
    agent_config(
        dir,
        &format!(
            "agent_id = \"{HOST}\"\n[collector]\nurl = \"{collector}\"\n[sampling]\ninterval = \"100ms\"\n\
             [sources]\nsysfs_root = \"{}\"\n[drives]\nnvme_path = \"{}\"\n{smart}smart_interval = \"1h\"\n\
             timeout = \"10s\"\nstate_dir = \"{}\"\n{extra}{}",
            sys.display(),
            nvme.join("nvme").display(),
            dir.join("state").display(),
            pki().agent_tls(HOST)
        ),
    )
}

fn agent(args: &[&str]) -> std::process::Output {
    Command::new(bin("wattflip-agent", "wattflip-agent")).args(args).env("RUST_LOG", "info").output().expect("run wattflip-agent")
}

fn s(v: &serde_json::Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

/// A smart-log that lacks counters (constructed from the QEMU capture: `power_on_hours`,
/// `media_errors` and the TMT1 pair removed, `unsafe_shutdowns` printed as `"12.5"`, which is not
/// a count): through the real agent, collector and influxd, the point has no such fields (a query
/// returns null for them) and every field the log has is stored exactly, its printed zeros as 0.
#[test]
fn a_smart_log_without_some_counters_stores_no_such_fields() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, DB);
    let tmp = tempfile::tempdir().unwrap();
    let nvme = fake_nvme(tmp.path(), "qemu-nvme-cli-2.3-id-ctrl.json", "qemu-nvme-cli-2.3-list.json", 0, "refuse");
    let log = std::fs::read_to_string(nvme.join("smart-log.json")).unwrap();
    let mut lines: Vec<&str> = log.lines().collect();
    let before = lines.len();
    lines.retain(|l| {
        !["\"power_on_hours\"", "\"media_errors\"", "\"thm_temp1_trans_count\"", "\"thm_temp1_total_time\""].iter().any(|k| l.trim_start().starts_with(k))
    });
    assert_eq!(before - lines.len(), 4, "fixture changed: the test removes four counters from {log}");
    let log = lines.join("\n").replace("\"unsafe_shutdowns\":\"0\"", "\"unsafe_shutdowns\":\"12.5\"");
    assert!(log.contains("\"unsafe_shutdowns\":\"12.5\""), "fixture changed: {log}");
    std::fs::write(nvme.join("smart-log.json"), log).unwrap();
    let cfg = config(tmp.path(), &collector.url, &nvme, None);

    let mut child = spawn_agent(tmp.path(), &["run", "--config", cfg.to_str().unwrap(), "--samples", "3"]);
    let status = wait_child(&mut child, Duration::from_secs(60), tmp.path());
    let stderr = std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap();
    assert!(status.success(), "agent failed:\n{stderr}");

    let rows = influx.rows(
        DB,
        &format!(
            "SELECT critical_warning, composite_celsius, percentage_used, data_units_read, data_units_written, \
             warning_temp_time_min, critical_temp_time_min, thm_temp2_trans_count, thm_temp2_total_time_s, \
             power_on_hours, media_errors, thm_temp1_trans_count, thm_temp1_total_time_s, unsafe_shutdowns, serial \
             FROM nvme_smart WHERE host = '{HOST}' AND device = 'nvme0'"
        ),
    );
    assert_eq!(rows.len(), 1, "{rows:?}\ncollector log:\n{}", collector.log());
    let r = &rows[0];
    // Present in the log: critical_warning 2, 323 K = 49.85 °C, data_units_read "1", zeros.
    let present: Vec<Option<f64>> = r[1..10].iter().map(serde_json::Value::as_f64).collect();
    assert_eq!(present, vec![Some(2.0), Some(49.85), Some(0.0), Some(1.0), Some(0.0), Some(0.0), Some(0.0), Some(0.0), Some(0.0)]);
    // Absent from the log, or unreadable: no field, so null, never 0.
    assert_eq!(r[10..15].to_vec(), vec![serde_json::Value::Null; 5], "{r:?}");
    assert_eq!(r[15].as_str(), Some("deadbeef"));
    // The unreadable one is named in a drive_field event.
    let rows = influx.rows(DB, &format!("SELECT attributes FROM event WHERE host = '{HOST}' AND kind = 'drive_field'"));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][1].as_str(), Some("field=unsafe_shutdowns raw=\"12.5\" source=nvme_cli"));
}

#[test]
fn drive_temperatures_smart_warning_and_a_refused_change_reach_influx() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, DB);
    let tmp = tempfile::tempdir().unwrap();
    let nvme = fake_nvme(tmp.path(), "qemu-nvme-cli-2.3-id-ctrl.json", "qemu-nvme-cli-2.3-list.json", 0, "refuse");
    let smartctl = fake_smartctl(tmp.path());
    let cfg = config(tmp.path(), &collector.url, &nvme, Some(&smartctl));
    let cfg_s = cfg.to_str().unwrap();

    let mut child = spawn_agent(tmp.path(), &["run", "--config", cfg_s, "--samples", "3"]);
    let status = wait_child(&mut child, Duration::from_secs(60), tmp.path());
    let stderr = std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap();
    assert!(status.success(), "agent failed:\n{stderr}");

    // One SMART poll (smart_interval is 1h): 323 K read by both tools.
    let series = influx.series(DB, &format!("SELECT celsius FROM temperature WHERE host = '{HOST}' GROUP BY source, device, sensor"));
    let got: Vec<(String, String, String, usize, f64)> = series
        .iter()
        .map(|(t, rows)| (s(&t["source"]).into(), s(&t["device"]).into(), s(&t["sensor"]).into(), rows.len(), rows[0][1].as_f64().unwrap()))
        .collect();
    assert_eq!(
        got,
        vec![("nvme_cli".into(), "nvme0".into(), "Composite".into(), 1, 49.85), ("smartctl".into(), "nvme0".into(), "Composite".into(), 1, 50.0),],
        "collector log:\n{}",
        collector.log()
    );
    let rows = influx.rows(
        DB,
        &format!(
            "SELECT critical_warning, composite_celsius, thm_temp1_trans_count, data_units_read, serial FROM nvme_smart \
             WHERE host = '{HOST}' AND device = 'nvme0'"
        ),
    );
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0][1].as_i64(), rows[0][2].as_f64(), rows[0][3].as_i64(), rows[0][4].as_i64(), rows[0][5].as_str()),
        (Some(2), Some(49.85), Some(0), Some(1), Some("deadbeef"))
    );
    let rows = influx.rows(DB, &format!("SELECT message, severity FROM event WHERE host = '{HOST}' AND kind = 'critical_warning'"));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        rows[0][1].as_str(),
        Some("/dev/nvme0: NVMe critical warning 0x02: temperature above or below a threshold (check airflow; the drive may throttle)")
    );
    assert_eq!(rows[0][2].as_str(), Some("critical"));
    // Inventory from nvme-cli (no sysfs): identity and the single 25 W power state.
    let rows = influx
        .rows(DB, &format!("SELECT serial, firmware, capacity_bytes, power_states, transport FROM inventory WHERE host = '{HOST}' AND device = 'nvme0n1'"));
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0][1].as_str(), rows[0][2].as_str(), rows[0][3].as_i64(), rows[0][4].as_i64(), rows[0][5].as_str()),
        (Some("deadbeef"), Some("7.2.22"), Some(1_073_741_824), Some(1), Some("nvme"))
    );
    // The power-state table itself, one point per state: QEMU's PS0, 25 W, operational, ENLAT 16 µs,
    // EXLAT 4 µs (id-ctrl `psds[0]`: max_power 2500 × 0.01 W).
    let rows = influx.rows(
        DB,
        &format!(
            "SELECT max_watts, operational, entry_latency_us, exit_latency_us, serial, model, state FROM power_state_descriptor \
             WHERE host = '{HOST}' AND device = 'nvme0n1'"
        ),
    );
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0][1].as_f64(), rows[0][2].as_bool(), rows[0][3].as_i64(), rows[0][4].as_i64(), rows[0][5].as_str(), rows[0][6].as_str(), rows[0][7].as_str()),
        (Some(25.0), Some(true), Some(16), Some(4), Some("deadbeef"), Some("QEMU NVMe Ctrl"), Some("0"))
    );
    let rows = influx.rows(DB, &format!("SELECT temperature_sensors FROM agent WHERE host = '{HOST}'"));
    assert_eq!(rows[0][1].as_i64(), Some(2));
    // The datasheet estimate: PS0's 25 W, labelled estimated (read at most every 10 s: once here).
    let rows = influx.rows(
        DB,
        &format!("SELECT watts FROM power WHERE host = '{HOST}' AND source = 'nvme_estimate' AND method = 'estimated' AND scope = 'drive' AND zone = 'nvme0'"),
    );
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][1].as_f64(), Some(25.0));

    // A power-state change on QEMU is refused (0x410e): recorded, and the state is intact.
    let out_dir = tmp.path().join("out");
    let out = agent(&[
        "governor",
        "set",
        "--device",
        "/dev/nvme0",
        "--state",
        "0",
        "--config",
        cfg_s,
        "--collector",
        &collector.url,
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a refused change is a failed command");
    assert!(stderr.contains("/dev/nvme0: PS0 was not applied: refused 0: NVMe status 0x410e"), "{stderr}");
    assert_eq!(std::fs::read_to_string(nvme.join("state/power_value")).unwrap(), "0\n");
    let rows =
        influx.rows(DB, &format!("SELECT from_state, to_state, observed_state, serial, outcome FROM power_state WHERE host = '{HOST}' AND device = 'nvme0'"));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0][1].as_i64(), rows[0][2].as_i64(), rows[0][3].as_i64(), rows[0][4].as_str(), rows[0][5].as_str()),
        (Some(0), Some(0), Some(0), Some("deadbeef"), Some("refused"))
    );
    let rows = influx.rows(DB, &format!("SELECT severity, attributes FROM event WHERE host = '{HOST}' AND kind = 'power_state_change'"));
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0][1].as_str(), rows[0][2].as_str()), (Some("warning"), Some("from=0 observed=0 outcome=refused to=0")));
    let lp = std::fs::read_to_string(out_dir.join("governor-set.lp")).unwrap();
    assert!(lp.starts_with(&format!("power_state,device=nvme0,host={HOST},outcome=refused ")), "{lp}");
    // The governor's Hello carries the real drive inventory too: its power-state table is the
    // second one written for nvme0n1 (before it, `governor` Hellos had no power states).
    let rows = influx.rows(DB, &format!("SELECT max_watts, state FROM power_state_descriptor WHERE host = '{HOST}' AND device = 'nvme0n1'"));
    let got: Vec<(Option<f64>, Option<&str>)> = rows.iter().map(|r| (r[1].as_f64(), r[2].as_str())).collect();
    assert_eq!(got, vec![(Some(25.0), Some("0")); 2], "{rows:?}");

    // `inventory` shows what the tools know.
    let out = agent(&["inventory", "--config", cfg_s]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for want in ["QEMU NVMe Ctrl", "deadbeef", "NVMe power states of /dev/nvme0 (deadbeef)", "PS0  operational", "nvme_cli", "49.85 °C", "50.00 °C"] {
        assert!(text.contains(want), "`{want}` missing in:\n{text}");
    }
    drop(collector);
}

fn wait_for_file(path: &Path, want: Option<&str>) -> bool {
    wait_for(Duration::from_secs(30), || {
        let v = std::fs::read_to_string(path).ok();
        match want {
            Some(w) => v.filter(|v| v != w).map(|_| ()),
            None => v.map(|_| ()),
        }
    })
    .is_some()
}

#[test]
fn governor_sweep_killed_or_terminated_always_gets_the_original_state_back() {
    let tmp = tempfile::tempdir().unwrap();
    // Five power states (PS0–PS2 operational), originally PS1, changes honoured.
    let nvme = fake_nvme(tmp.path(), "constructed-5ps-nvme-cli-2.3-id-ctrl.json", "constructed-nvme-cli-2.13-list.json", 1, "honour");
    let cfg = config(tmp.path(), "https://127.0.0.1:1", &nvme, None);
    let power_value = nvme.join("state/power_value");
    let state_file = tmp.path().join("state/wattflip-governor-nvme0-fid02.json");
    let scratch = tmp.path().join("scratch.dat");
    let sweep_args = |out: &str| -> Vec<String> {
        [
            "governor",
            "sweep",
            "--device",
            "/dev/nvme0",
            "--target",
            scratch.to_str().unwrap(),
            "--size",
            "64MiB",
            "--settle",
            "60s",
            "--config",
            cfg.to_str().unwrap(),
            "--out",
            out,
        ]
        .map(String::from)
        .to_vec()
    };

    // SIGKILL while the sweep dwells in PS0: nothing can restore, the state file stays.
    let out1 = tmp.path().join("out1");
    let args = sweep_args(out1.to_str().unwrap());
    let mut child = spawn_agent(tmp.path(), &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(wait_for_file(&power_value, Some("1\n")), "the sweep never changed the state");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(std::fs::read_to_string(&power_value).unwrap(), "0\n");
    let record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    assert_eq!((record["original_state"].as_u64(), record["serial"].as_str()), (Some(1), Some("S0WATTFLIP5PS0001")));

    // The next start restores from the state file, verifies, and records it.
    let out2 = tmp.path().join("out2");
    let out = agent(&["governor", "show", "--device", "/dev/nvme0", "--config", cfg.to_str().unwrap(), "--out", out2.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&power_value).unwrap(), "1\n");
    assert!(!state_file.exists());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("current: PS1 (workload hint 0); changeable, not saveable"), "{stdout}");
    let lp = std::fs::read_to_string(out2.join("governor-show.lp")).unwrap();
    assert!(
        lp.starts_with(&format!("power_state,device=nvme0,host={HOST},outcome=restored ")) && lp.contains("from_state=1i,to_state=1i,observed_state=1i"),
        "{lp}"
    );

    // SIGTERM mid-sweep, and SIGHUP (an SSH hangup, issue 38): the agent restores at once and
    // records it before exiting.
    for sig in ["TERM", "HUP"] {
        let out3 = tmp.path().join(format!("out-{sig}"));
        let args = sweep_args(out3.to_str().unwrap());
        let mut child = spawn_agent(tmp.path(), &args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(wait_for_file(&power_value, Some("1\n")), "the sweep never changed the state");
        let pid = child.id().to_string();
        assert!(Command::new("kill").args([format!("-{sig}"), pid]).status().unwrap().success());
        let status = wait_child(&mut child, Duration::from_secs(30), tmp.path());
        let stderr = std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap();
        assert!(!status.success(), "an interrupted sweep is not a success");
        assert_eq!(
            stderr.matches("interrupted by a signal; the original power state was put back").count(),
            1 + usize::from(sig == "HUP"),
            "SIG{sig}: {stderr}"
        );
        assert_eq!(std::fs::read_to_string(&power_value).unwrap(), "1\n", "SIG{sig} left the drive changed");
        assert!(!state_file.exists());
        let lp = std::fs::read_to_string(out3.join("governor-sweep.lp")).unwrap();
        let outcomes: Vec<&str> =
            lp.lines().filter(|l| l.starts_with("power_state,")).map(|l| l.split(",outcome=").nth(1).and_then(|r| r.split(' ').next()).unwrap_or("")).collect();
        assert_eq!(outcomes, vec!["applied", "restored"], "SIG{sig}: {lp}");
    }
}

/// Issue 16 point 6: while a sweep runs, a second command (`governor show`, another `governor
/// sweep`) leaves its guard alone and names its pid; once the sweep is SIGKILLed, the next command
/// restores the original state.
#[test]
fn a_second_governor_command_leaves_a_live_sweeps_guard_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let nvme = fake_nvme(tmp.path(), "constructed-5ps-nvme-cli-2.3-id-ctrl.json", "constructed-nvme-cli-2.13-list.json", 1, "honour");
    let cfg = config(tmp.path(), "https://127.0.0.1:1", &nvme, None);
    let cfg_s = cfg.to_str().unwrap();
    let power_value = nvme.join("state/power_value");
    let state_file = tmp.path().join("state/wattflip-governor-nvme0-fid02.json");
    let scratch = tmp.path().join("scratch.dat");
    let out1 = tmp.path().join("out1");
    let sweep = [
        "governor",
        "sweep",
        "--device",
        "/dev/nvme0",
        "--target",
        scratch.to_str().unwrap(),
        "--size",
        "64MiB",
        "--settle",
        "60s",
        "--config",
        cfg_s,
        "--out",
        out1.to_str().unwrap(),
    ];
    let mut child = spawn_agent(tmp.path(), &sweep);
    assert!(wait_for_file(&power_value, Some("1\n")), "the sweep never changed the state");
    // Writes of the original value (PS1): only a restore sends it (the sweep skips its original).
    let calls = nvme.join("state/calls");
    let restores = || std::fs::read_to_string(&calls).unwrap_or_default().lines().filter(|l| l.contains("set-feature") && l.contains("--value=1")).count();
    let held = format!("/dev/nvme0 is held by another wattflip process (pid {} (alive)", child.id());

    // `governor show` while the sweep runs: reads, restores nothing, says who holds the drive.
    let out2 = tmp.path().join("out2");
    let show = agent(&["governor", "show", "--device", "/dev/nvme0", "--config", cfg_s, "--out", out2.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&show.stderr);
    assert!(show.status.success(), "{stderr}");
    assert!(stderr.contains(&held), "{stderr}");
    assert!(state_file.exists(), "the live sweep's state file was deleted");
    assert_eq!(restores(), 0, "the second command restored under the live sweep");
    let lp = std::fs::read_to_string(out2.join("governor-show.lp")).unwrap_or_default();
    assert!(!lp.contains("outcome=restored"), "{lp}");

    // A second sweep on the same drive is refused, naming the owner.
    let out3 = tmp.path().join("out3");
    let scratch2 = tmp.path().join("scratch2.dat");
    let second = agent(&[
        "governor",
        "sweep",
        "--device",
        "/dev/nvme0",
        "--target",
        scratch2.to_str().unwrap(),
        "--size",
        "64MiB",
        "--settle",
        "1s",
        "--config",
        cfg_s,
        "--out",
        out3.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "a second sweep ran on a held drive");
    assert!(stderr.contains(&held), "{stderr}");
    assert_eq!(restores(), 0, "the second sweep touched the held drive");
    assert!(child.try_wait().unwrap().is_none(), "the first sweep did not survive");

    // The owner dies without restoring; the next command restores.
    child.kill().unwrap();
    child.wait().unwrap();
    let out4 = tmp.path().join("out4");
    let show = agent(&["governor", "show", "--device", "/dev/nvme0", "--config", cfg_s, "--out", out4.to_str().unwrap()]);
    assert!(show.status.success(), "{}", String::from_utf8_lossy(&show.stderr));
    assert_eq!(std::fs::read_to_string(&power_value).unwrap(), "1\n");
    assert!(!state_file.exists());
}

/// A FUSE mount (bindfs) whose daemon can be paused with SIGSTOP: IO of a loop device over a file
/// on it then stalls in the kernel. Continued, unmounted and reaped on drop.
struct PausableFuse {
    mnt: PathBuf,
    child: std::process::Child,
}

impl PausableFuse {
    fn new(dir: &Path) -> PausableFuse {
        let (src, mnt) = (dir.join("fuse-src"), dir.join("fuse-mnt"));
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(&mnt).unwrap();
        let child = Command::new("bindfs")
            .arg("-f")
            .arg(&src)
            .arg(&mnt)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run bindfs ({e}): install the Debian packages bindfs and fuse3 (tests/run.sh does)"));
        let mounted = || Command::new("findmnt").arg("-n").arg(&mnt).output().is_ok_and(|o| o.status.success());
        assert!(wait_for(Duration::from_secs(10), || mounted().then_some(())).is_some(), "bindfs did not mount");
        PausableFuse { mnt, child }
    }
    fn signal(&self, sig: &str) {
        assert!(Command::new("kill").args([sig, &self.child.id().to_string()]).status().unwrap().success());
    }
}

impl Drop for PausableFuse {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.child.id().to_string()]).status();
        let _ = Command::new("fusermount3").arg("-u").arg(&self.mnt).status();
        let _ = self.child.wait();
    }
}

/// A loop device detached on drop.
struct LoopDev(PathBuf);

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).stderr(std::process::Stdio::null()).status();
    }
}

/// Issue 16 point 7: a sweep whose target stops completing IO (a loop device over a bindfs file
/// whose daemon is SIGSTOPped) ends as a device fault after `[drives] io_deadline_floor`, with the
/// original power state restored while the IO is still stuck; the agent exits once the IO
/// completes (the daemon continues): a thread in D state cannot be killed, only abandoned.
#[test]
fn a_sweep_whose_device_stops_completing_io_is_a_device_fault_and_restores() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let fuse = PausableFuse::new(tmp.path());
    let img = fuse.mnt.join("stall.img");
    std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
    let out = Command::new("losetup").args(["-f", "--show", "--direct-io=on"]).arg(&img).output().expect("losetup (mount package)");
    assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
    let lo = LoopDev(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    let nvme = fake_nvme(tmp.path(), "constructed-5ps-nvme-cli-2.3-id-ctrl.json", "constructed-nvme-cli-2.13-list.json", 1, "honour");
    let extra = format!("destroy_consent = [\"loop:{}\"]\nio_deadline_floor = \"1s\"\n", img.display());
    let cfg = config_with(tmp.path(), "https://127.0.0.1:1", &nvme, None, &extra);
    let power_value = nvme.join("state/power_value");
    let state_file = tmp.path().join("state/wattflip-governor-nvme0-fid02.json");
    let out1 = tmp.path().join("out1");
    let args = [
        "governor",
        "sweep",
        "--device",
        "/dev/nvme0",
        "--target",
        lo.0.to_str().unwrap(),
        "--size",
        "64MiB",
        "--settle",
        "1s",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        out1.to_str().unwrap(),
    ];
    let mut child = spawn_agent(tmp.path(), &args);
    assert!(wait_for_file(&power_value, Some("1\n")), "the sweep never changed the state");
    fuse.signal("-STOP");
    let stopped = std::time::Instant::now();
    // The deadline passes, the sweep reports a device fault and restores PS1, all while the IO
    // is still stuck (the daemon is still stopped).
    let stderr = || std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap_or_default();
    let restored = wait_for(Duration::from_secs(60), || {
        (std::fs::read_to_string(&power_value).ok().as_deref() == Some("1\n") && stderr().contains("device fault")).then_some(())
    });
    let took = stopped.elapsed();
    fuse.signal("-CONT");
    assert!(restored.is_some(), "no device fault and restore within 60 s; stderr:\n{}", stderr());
    assert!(took < Duration::from_secs(30), "{took:?}");
    let status = wait_child(&mut child, Duration::from_secs(60), tmp.path());
    assert!(!status.success(), "a sweep ended by a device fault is not a success");
    let err = stderr();
    assert!(err.contains(&format!("on {} has not completed after", lo.0.display())), "{err}");
    assert_eq!(std::fs::read_to_string(&power_value).unwrap(), "1\n");
    assert!(!state_file.exists());
}

/// The constructed 5-state drive's model (id-ctrl `mn`, trimmed).
const MODEL_5PS: &str = "WATTFLIP CONSTRUCTED 5PS NVME";

/// A sweep's probe_run row: experiment, pattern, model, value, power_state, power_state_max_w,
/// power_w, energy_source, idle_baseline_w, energy_above_idle_j.
type SweepRow = (String, String, String, f64, i64, f64, f64, String, f64, f64);

#[test]
fn a_completed_governor_sweep_reaches_influx_with_per_state_power_and_answers_plan_power_cap() {
    let influx = Influx::start();
    let db = "wf_drives_sweep";
    let collector = Collector::start(&influx.url, db);
    let tmp = tempfile::tempdir().unwrap();
    // PS0–PS2 operational (datasheet 7.5, 5.9, 3.6 W), originally PS1, changes honoured.
    let nvme = fake_nvme(tmp.path(), "constructed-5ps-nvme-cli-2.3-id-ctrl.json", "constructed-nvme-cli-2.13-list.json", 1, "honour");
    let cfg = config(tmp.path(), &collector.url, &nvme, None);
    // The INA226 fixture as the drive's rail monitor; the fake nvme rewrites its power1_input (µW,
    // one width for all states) on every applied set. Binary fractions keep every mean exact.
    let sys = tmp.path().join("sys");
    let status = Command::new("cp").arg("-a").arg(format!("{}/.", fixtures().join("sysfs/ina226/sys").display())).arg(&sys).status().unwrap();
    assert!(status.success(), "copy the ina226 fixture");
    let rail = sys.join("class/hwmon/hwmon0/power1_input");
    std::fs::write(&rail, "5250000\n").unwrap();
    std::fs::write(nvme.join("state/rail"), rail.to_str().unwrap()).unwrap();
    let rail_w = [6.5, 5.25, 3.5];
    for (ps, w) in rail_w.iter().enumerate() {
        std::fs::write(nvme.join(format!("state/rail_uw.{ps}")), format!("{}\n", (w * 1e6) as u64)).unwrap();
    }
    let cfg_s = cfg.to_str().unwrap();

    // The agent's inventory (nvme-cli list + id-ctrl) gives the fleet size plan power-cap needs.
    let mut child = spawn_agent(tmp.path(), &["run", "--config", cfg_s, "--samples", "2"]);
    let status = wait_child(&mut child, Duration::from_secs(60), tmp.path());
    assert!(status.success(), "agent run failed:\n{}", std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap());

    let out_dir = tmp.path().join("out");
    let scratch = tmp.path().join("scratch.dat");
    let out = agent(&[
        "governor",
        "sweep",
        "--device",
        "/dev/nvme0",
        "--target",
        scratch.to_str().unwrap(),
        "--size",
        "64MiB",
        "--patterns",
        "SW:128KiB,RR:4KiB",
        "--settle",
        "200ms",
        "--config",
        cfg_s,
        "--collector",
        &collector.url,
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("measured power states: [0, 1, 2]"), "{stdout}");
    assert_eq!(std::fs::read_to_string(nvme.join("state/power_value")).unwrap(), "1\n", "original state restored");
    assert_eq!(std::fs::read_to_string(&rail).unwrap(), "5250000\n", "the rail followed the restore");

    // The states visited, in order, and the restore.
    let rows = influx.rows(db, &format!("SELECT from_state, to_state, observed_state, outcome FROM power_state WHERE host = '{HOST}'"));
    let got: Vec<(i64, i64, i64, &str)> = rows.iter().map(|r| (r[1].as_i64().unwrap(), r[2].as_i64().unwrap(), r[3].as_i64().unwrap(), s(&r[4]))).collect();
    assert_eq!(got, vec![(1, 0, 0, "applied"), (0, 1, 1, "applied"), (1, 2, 2, "applied"), (2, 1, 1, "restored")], "{}", collector.log());

    // One row per state and pattern, with the state, its datasheet watts and the measured rail.
    let rows = influx.rows(
        db,
        &format!(
            "SELECT experiment, pattern, model, \"value\", power_state, power_state_max_w, power_w, energy_source, idle_baseline_w, \
             energy_above_idle_j, energy_j, duration_s, mib_per_s FROM probe_run WHERE host = '{HOST}' AND bench = 'governor_sweep'"
        ),
    );
    let got: Vec<SweepRow> = rows
        .iter()
        .map(|r| {
            (
                s(&r[1]).into(),
                s(&r[2]).into(),
                s(&r[3]).into(),
                r[4].as_f64().unwrap(),
                r[5].as_i64().unwrap(),
                r[6].as_f64().unwrap(),
                r[7].as_f64().unwrap(),
                s(&r[8]).into(),
                r[9].as_f64().unwrap(),
                r[10].as_f64().unwrap(),
            )
        })
        .collect();
    let zone = "hwmon:ina226-0-0040/power1";
    let want: Vec<SweepRow> = [(0i32, 7.5), (1, 5.9), (2, 3.6)]
        .into_iter()
        .flat_map(|(ps, max_w)| {
            [("SW:128KiB", "SW"), ("RR:4KiB", "RR")].map(|(e, p)| {
                let w = rail_w[ps as usize];
                (format!("governor_sweep/{e}"), p.to_string(), MODEL_5PS.to_string(), f64::from(ps), i64::from(ps), max_w, w, zone.to_string(), w, 0.0)
            })
        })
        .collect();
    assert_eq!(got, want);
    // Every sweep run carries the controller's firmware revision (id-ctrl FR) as its tag.
    let fw = influx.series(db, &format!("SELECT count(duration_s) FROM probe_run WHERE host = '{HOST}' AND bench = 'governor_sweep' GROUP BY firmware"));
    assert_eq!(
        fw.iter().map(|(t, r)| (t["firmware"].as_str().unwrap().to_string(), r[0][1].as_i64())).collect::<Vec<_>>(),
        vec![("1B2QEXM7".to_string(), Some(6))]
    );
    for r in &rows {
        // A flat rail per state: energy is its power × the run, to within a few 5 ms samples.
        let (e, secs, w) = (r[11].as_f64().unwrap(), r[12].as_f64().unwrap(), r[7].as_f64().unwrap());
        assert!((e - w * secs).abs() <= w * secs * 0.05 + w * 0.02, "{e} J vs {w} W × {secs} s");
        assert!(r[13].as_f64().unwrap() > 0.0);
    }
    let mib = |ps: f64, p: &str| rows.iter().find(|r| r[4].as_f64() == Some(ps) && r[2] == p).unwrap()[13].as_f64().unwrap();

    // plan power-cap answers from this sweep: 1 drive (two namespaces, one serial), reference PS0.
    let o = Command::new(bin("wattflip-collector", "wattflip-collector"))
        .args(["--influx-url", &influx.url, "--influx-db", db, "plan", "power-cap", "--model", MODEL_5PS, "--state", "2", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let pats: Vec<(String, f64, u64, f64, f64, f64)> = p["patterns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            let f = |k: &str| x[k].as_f64().unwrap();
            (s(&x["pattern"]).into(), f("weight"), x["base_state"].as_u64().unwrap(), f("base_w"), f("capped_w"), f("saved_w_per_drive"))
        })
        .collect();
    assert_eq!(pats, vec![("RR:4KiB".into(), 0.5, 0, 6.5, 3.5, 3.0), ("SW:128KiB".into(), 0.5, 0, 6.5, 3.5, 3.0)]);
    // Throughput lost per pattern from the stored rows (to 1e-9 %: the collector's JSON parser
    // may round the last bit of a stored MiB/s differently from this test's), and their mean.
    let lost: Vec<f64> = p["patterns"].as_array().unwrap().iter().map(|x| x["throughput_lost_pct"].as_f64().unwrap()).collect();
    for (got, pat) in lost.iter().zip(["RR", "SW"]) {
        let want = 100.0 * (mib(0.0, pat) - mib(2.0, pat)) / mib(0.0, pat);
        assert!((got - want).abs() < 1e-9, "{pat}: {got} % lost vs {want} % from the rows");
    }
    assert_eq!(
        (p["drives"].as_u64(), p["fleet_saved_w"].as_f64(), p["throughput_lost_pct"].as_f64()),
        (Some(1), Some(3.0), Some(0.5 * lost[0] + 0.5 * lost[1]))
    );
    drop(collector);
}

/// The power_state lines of a governor command's `.lp` file: (from, to, observed, outcome).
fn changes_in(lp: &str) -> Vec<(i64, i64, i64, String)> {
    lp.lines()
        .filter(|l| l.starts_with("power_state,"))
        .map(|l| {
            let outcome = l.split(",outcome=").nth(1).and_then(|r| r.split(' ').next()).unwrap_or("").to_string();
            let field = |k: &str| -> i64 {
                let v = l.split(&format!("{k}=")).nth(1).unwrap_or_else(|| panic!("{k} missing in {l}"));
                v[..v.find('i').unwrap()].parse().unwrap()
            };
            (field("from_state"), field("to_state"), field("observed_state"), outcome)
        })
        .collect()
}

#[test]
fn intel_power_governor_mode_is_shown_set_held_and_always_restored() {
    let tmp = tempfile::tempdir().unwrap();
    // An allow-listed Intel DC P3700 (vid 0x8086, SSDPE2MD…) in mode 0 (25 W), changes honoured.
    let nvme = fake_nvme(tmp.path(), "constructed-intel-p3700-nvme-cli-2.3-id-ctrl.json", "qemu-nvme-cli-2.3-list.json", 0, "honour");
    let intel_value = nvme.join("state/intel_value");
    std::fs::write(&intel_value, "0\n").unwrap();
    let cfg = config(tmp.path(), "https://127.0.0.1:1", &nvme, None);
    let cfg_s = cfg.to_str().unwrap();
    let state_file = tmp.path().join("state/wattflip-governor-nvme0-fidc6.json");
    let dir = |name: &str| tmp.path().join(name).to_str().unwrap().to_string();

    // `show` prints the current mode.
    let out = agent(&["governor", "show", "--device", "/dev/nvme0", "--config", cfg_s, "--out", &dir("show1")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("\nIntel PowerGovernorMode (FID C6h): mode 0 (25 W)\n"), "{stdout}");

    // `set --intel-mode 2 --hold 1s`: state file, set, read back, hold, restore, verify.
    std::fs::remove_file(nvme.join("state/calls")).unwrap();
    let out = agent(&["governor", "set", "--device", "/dev/nvme0", "--intel-mode", "2", "--hold", "1s", "--config", cfg_s, "--out", &dir("set1")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.starts_with(&format!(
            "/dev/nvme0: Intel PowerGovernorMode 2 (10 W) applied and verified; original mode 0 saved in {}\n\
             /dev/nvme0: held for 1s; original Intel PowerGovernorMode 0 restored and verified\n",
            state_file.display()
        )),
        "{stdout}"
    );
    assert_eq!(std::fs::read_to_string(&intel_value).unwrap(), "0\n");
    assert!(!state_file.exists());
    let calls = std::fs::read_to_string(nvme.join("state/calls")).unwrap();
    let c6: Vec<&str> = calls.lines().filter(|l| l.contains("--feature-id=0xc6")).collect();
    assert_eq!(
        c6,
        vec![
            "get-feature /dev/nvme0 --feature-id=0xc6", // arm: the original, into the state file
            "get-feature /dev/nvme0 --feature-id=0xc6", // set: the value before
            "set-feature /dev/nvme0 --feature-id=0xc6 --value=2",
            "get-feature /dev/nvme0 --feature-id=0xc6", // read back
            "get-feature /dev/nvme0 --feature-id=0xc6", // restore: the value before
            "set-feature /dev/nvme0 --feature-id=0xc6 --value=0",
            "get-feature /dev/nvme0 --feature-id=0xc6", // verify
        ],
        "{calls}"
    );
    let lp = std::fs::read_to_string(tmp.path().join("set1/governor-set.lp")).unwrap();
    assert_eq!(changes_in(&lp), vec![(0, 2, 2, "applied".into()), (2, 0, 0, "restored".into())], "{lp}");
    assert!(lp.contains("detail=\"Intel PowerGovernorMode (FID C6h): held for 1s: original mode 0 written back and verified\""), "{lp}");
    // FID 02h was never touched.
    assert!(!calls.contains("set-feature /dev/nvme0 --feature-id=2"), "{calls}");

    // Held until SIGTERM: restored at once, a normal end.
    let mut child = spawn_agent(tmp.path(), &["governor", "set", "--device", "/dev/nvme0", "--intel-mode", "1", "--config", cfg_s, "--out", &dir("set2")]);
    assert!(wait_for_file(&intel_value, Some("0\n")), "the mode was never changed");
    assert_eq!(std::fs::read_to_string(&intel_value).unwrap(), "1\n");
    assert!(state_file.exists());
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = wait_child(&mut child, Duration::from_secs(30), tmp.path());
    assert!(status.success(), "{}", std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap());
    assert_eq!(std::fs::read_to_string(&intel_value).unwrap(), "0\n");
    assert!(!state_file.exists());
    let lp = std::fs::read_to_string(tmp.path().join("set2/governor-set.lp")).unwrap();
    assert_eq!(changes_in(&lp), vec![(0, 1, 1, "applied".into()), (1, 0, 0, "restored".into())], "{lp}");
    assert!(lp.contains("held until a signal: original mode 0 written back and verified"), "{lp}");

    // SIGKILL while held: the mode stays with its state file, and the next start restores it.
    let mut child = spawn_agent(tmp.path(), &["governor", "set", "--device", "/dev/nvme0", "--intel-mode", "2", "--config", cfg_s, "--out", &dir("set3")]);
    assert!(wait_for_file(&intel_value, Some("0\n")), "the mode was never changed");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(std::fs::read_to_string(&intel_value).unwrap(), "2\n");
    let record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    assert_eq!(
        (record["feature_id"].as_u64(), record["original_state"].as_u64(), record["serial"].as_str()),
        (Some(0xc6), Some(0), Some("CVFT4123000A2P0EGN"))
    );
    let out = agent(&["governor", "show", "--device", "/dev/nvme0", "--config", cfg_s, "--out", &dir("show2")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&intel_value).unwrap(), "0\n");
    assert!(!state_file.exists());
    assert!(stdout.contains("\nIntel PowerGovernorMode (FID C6h): mode 0 (25 W)\n"), "{stdout}");
    let lp = std::fs::read_to_string(tmp.path().join("show2/governor-show.lp")).unwrap();
    assert_eq!(changes_in(&lp), vec![(0, 0, 0, "restored".into())], "{lp}");
    assert!(lp.contains(&format!("detail=\"Intel PowerGovernorMode (FID C6h): recovered after an unclean exit from {}", state_file.display())), "{lp}");

    // Rejected before anything is written: a mode the family does not have, and another model.
    let out = agent(&["governor", "set", "--device", "/dev/nvme0", "--intel-mode", "3", "--config", cfg_s, "--out", &dir("set4")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("/dev/nvme0: Intel PowerGovernorMode 3 is not 0 (25 W), 1 (20 W) or 2 (10 W)"), "{stderr}");
    assert!(!state_file.exists());
    let qemu = fake_nvme(&tmp.path().join("qemu"), "qemu-nvme-cli-2.3-id-ctrl.json", "qemu-nvme-cli-2.3-list.json", 0, "honour");
    let qcfg = config(&tmp.path().join("qemu"), "https://127.0.0.1:1", &qemu, None);
    let out = agent(&["governor", "set", "--device", "/dev/nvme0", "--intel-mode", "1", "--config", qcfg.to_str().unwrap(), "--out", &dir("set5")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("is not on the Intel PowerGovernorMode allow-list"), "{stderr}");
    let out = agent(&["governor", "show", "--device", "/dev/nvme0", "--config", qcfg.to_str().unwrap(), "--out", &dir("show3")]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("\nIntel PowerGovernorMode (FID C6h): not on the allow-list for this model\n"));
}
