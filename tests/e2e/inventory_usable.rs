//! `wattflip-agent inventory --json` says usable or not from a test read of every source, RAPL and
//! hwmon alike, run as a non-root user (`nobody` through setpriv when the test runs as root): the
//! `amd_energy` counters (tests/fixtures/sysfs/amd-energy-zenpower), root-only as the driver
//! creates them (mode 0440), are not usable and say why; the ACPI power meter, read faster than it updates (every 100 ms, averaged over
//! 1000 ms), is usable and carries that as a note; the other hwmon chips are usable.

use std::process::Command;
use wattflip_e2e::*;

#[test]
fn inventory_usable_comes_from_a_test_read_and_notes_stay_notes() {
    let is_root = std::fs::read_to_string("/proc/self/status").unwrap().lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    let (tmp, sys) = sysfs_tree(&["amd-energy-zenpower"]);
    // The ACPI meter of tests/fixtures/sysfs/acpi-power-meter beside them, as hwmon3.
    let acpi = fixtures().join("sysfs/acpi-power-meter/sys/devices/LNXSYSTM:00");
    std::fs::create_dir_all(sys.join("devices")).unwrap();
    assert!(Command::new("cp").arg("-a").arg(&acpi).arg(sys.join("devices")).status().unwrap().success());
    let meter_dir = sys.join("devices/LNXSYSTM:00/LNXSYBUS:00/ACPI000D:00/hwmon");
    std::fs::rename(meter_dir.join("hwmon0"), meter_dir.join("hwmon3")).unwrap();
    std::os::unix::fs::symlink("../../devices/LNXSYSTM:00/LNXSYBUS:00/ACPI000D:00/hwmon/hwmon3", sys.join("class/hwmon/hwmon3")).unwrap();
    let cfg = agent_config(
        tmp.path(),
        "[sampling]\ninterval = \"100ms\"\n[tls]\ninsecure_plaintext_loopback_only = true\n[drives]\nnvme_cli = false\nsmartctl = false\n",
    );
    let chmod = |flag: &str, mode: &str, paths: &[std::path::PathBuf]| {
        let mut c = Command::new("chmod");
        if !flag.is_empty() {
            c.arg(flag);
        }
        assert!(c.arg(mode).args(paths).status().unwrap().success());
    };
    chmod("-R", "a+rX", &[tmp.path().to_path_buf()]);
    // amd_energy.c: `energy*_input` are 0440 (root-only), as the driver sets them.
    let amd = sys.join("class/hwmon/hwmon0");
    let counters: Vec<_> = (1..=5).map(|n| amd.join(format!("energy{n}_input"))).collect();
    chmod("", "0440", &counters);
    let agent = bin("wattflip-agent", "wattflip-agent");
    let mut cmd = if is_root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(&agent);
        c
    } else {
        Command::new(&agent)
    };
    let out = cmd.args(["inventory", "--json", "--config"]).arg(&cfg).arg("--sysfs-root").arg(&sys).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut got: Vec<(String, bool, String)> = v["power_sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["zone"].as_str().unwrap().to_string(), p["usable"].as_bool().unwrap(), p["note"].as_str().unwrap().to_string()))
        .collect();
    got.sort();
    let denied = |n: u32| format!("permission denied reading {}/energy{n}_input", amd.display());
    let zones: Vec<(&str, bool)> = got.iter().map(|(z, u, _)| (z.as_str(), *u)).collect();
    assert_eq!(
        zones,
        vec![
            ("amd_energy.0/Ecore000", false),
            ("amd_energy.0/Ecore001", false),
            ("amd_energy.0/Ecore002", false),
            ("amd_energy.0/Ecore003", false),
            ("amd_energy.0/Esocket0", false),
            ("power_meter-ACPI000D:00/power1", true),
            ("zenpower-0000:00:18.3/SVI2_P_Core", true),
            ("zenpower-0000:00:18.3/SVI2_P_SoC", true),
        ],
        "{got:#?}"
    );
    for (n, (_, _, note)) in got.iter().take(5).enumerate() {
        assert!(note.starts_with(&denied(n as u32 + 1)), "{note}");
    }
    let meter = &got[5].2;
    assert!(meter.starts_with("read every 100ms but the source updates every 1s"), "{meter}");
}
