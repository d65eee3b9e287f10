//! The hwmon driver table end to end: an AMD host (`tests/fixtures/sysfs/amd-energy-zenpower`:
//! amd_energy per-core and per-socket counters, zenpower SVI2 power) through the real agent,
//! collector and influxd. Each zone's scope comes from the table (cores `core`, socket `package`,
//! SVI2 `core`/`soc`), so the collector's budget tier counts the socket alone: only its points
//! carry the `budget` tag, never cores + socket + SVI2.

use std::time::Duration;
use wattflip_e2e::*;

#[test]
fn amd_cores_socket_and_svi2_get_their_scopes_and_only_the_socket_is_budgeted() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_hwmon_scopes");
    let (tmp, sys) = sysfs_tree(&["amd-energy-zenpower"]);
    let cfg = agent_config(
        tmp.path(),
        &format!(
            "agent_id = \"amd-1\"\n[collector]\nurl = \"{}\"\n[sampling]\ninterval = \"200ms\"\n[sources]\nsysfs_root = \"{}\"\n\
             [drives]\nnvme_cli = false\nsmartctl = false\n{}",
            collector.url,
            sys.display(),
            pki().agent_tls("amd-1")
        ),
    );
    let mut agent = spawn_agent(tmp.path(), &["run", "--config", cfg.to_str().unwrap(), "--samples", "4"]);
    let status = wait_child(&mut agent, Duration::from_secs(30), tmp.path());
    assert!(status.success(), "{}", std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap());
    let q = "SELECT count(watts) FROM power WHERE host = 'amd-1' GROUP BY zone, scope, budget";
    let want = 7;
    let all_in = wait_for(Duration::from_secs(20), || Some(influx.series("wf_hwmon_scopes", q)).filter(|s| s.len() >= want));
    let series = all_in.unwrap_or_else(|| panic!("{:?}\n{}", influx.series("wf_hwmon_scopes", q), collector.log()));
    let mut got: Vec<(String, String, String)> = series
        .iter()
        .map(|(t, _)| {
            let tag = |k: &str| t[k].as_str().unwrap_or("").to_string();
            (tag("zone"), tag("scope"), tag("budget"))
        })
        .collect();
    got.sort();
    let row = |z: &str, s: &str, b: &str| (z.to_string(), s.to_string(), b.to_string());
    assert_eq!(
        got,
        vec![
            row("amd_energy.0/Ecore000", "core", ""),
            row("amd_energy.0/Ecore001", "core", ""),
            row("amd_energy.0/Ecore002", "core", ""),
            row("amd_energy.0/Ecore003", "core", ""),
            row("amd_energy.0/Esocket0", "package", "rapl_nvme"),
            row("zenpower-0000:00:18.3/SVI2_P_Core", "core", ""),
            row("zenpower-0000:00:18.3/SVI2_P_SoC", "soc", ""),
        ],
        "{}",
        collector.log()
    );
}
