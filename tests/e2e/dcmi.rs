//! IPMI DCMI through the whole chain: the agent runs a fake `ipmitool` (tests/fixtures/ipmi/fake-ipmitool)
//! that answers with real captured outputs, first an OpenBMC reading whose state is "deactivated"
//! (319 W, kept by policy), then an activated one (197 W). In the real influxd, every point of the
//! deactivated readings carries `flags="deactivated"` and its watts; every activated one carries no
//! `flags` field at all.

use std::time::Duration;
use wattflip_e2e::*;

const DB: &str = "wf_dcmi";
const HOST: &str = "dcmi-1";

#[test]
fn deactivated_dcmi_readings_are_stored_with_their_flag_and_activated_ones_without() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, DB);
    let tmp = tempfile::Builder::new().prefix("wf-dcmi-").tempdir().unwrap();
    let bmc = tmp.path().join("bmc");
    std::fs::create_dir_all(&bmc).unwrap();
    for f in ["fake-ipmitool", "openbmc-witherspoon-deactivated-319w.txt", "rabe-zabbix-activated-197w.txt"] {
        std::fs::copy(fixtures().join("ipmi").join(f), bmc.join(f)).unwrap();
    }
    // The discovery call and the worker's next two (one a second) answer deactivated, then activated.
    let deactivated = "ok openbmc-witherspoon-deactivated-319w.txt\n";
    std::fs::write(bmc.join("plan"), format!("{deactivated}{deactivated}{deactivated}ok rabe-zabbix-activated-197w.txt\n")).unwrap();
    let sys = tmp.path().join("sys");
    std::fs::create_dir_all(&sys).unwrap();
    let cfg = agent_config(
        tmp.path(),
        &format!(
            "agent_id = \"{HOST}\"\n[collector]\nurl = \"{}\"\n[sampling]\ninterval = \"1s\"\n\
             [sources]\nsysfs_root = \"{}\"\nrapl = false\nhwmon = false\nipmi = true\nipmitool = \"{}\"\ncommand_timeout = \"5s\"\n\
             [drives]\nnvme_cli = false\nsmartctl = false\n{}",
            collector.url,
            sys.display(),
            bmc.join("fake-ipmitool").display(),
            pki().agent_tls(HOST)
        ),
    );
    let mut agent = spawn_agent(tmp.path(), &["run", "--config", cfg.to_str().unwrap(), "--samples", "7"]);
    let status = wait_child(&mut agent, Duration::from_secs(60), tmp.path());
    let stderr = std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap();
    assert!(status.success(), "{stderr}");
    let calls = std::fs::read_to_string(bmc.join("calls")).unwrap();
    assert!(calls.lines().count() >= 5, "the worker calls ipmitool about once a second: {calls}");

    // Every point: its watts and its flags (null when the field is absent).
    let rows = influx.rows(DB, &format!("SELECT watts, flags, zone, scope FROM power WHERE host = '{HOST}' AND source = 'ipmi'"));
    let points: Vec<(f64, Option<String>)> = rows.iter().map(|r| (r[1].as_f64().unwrap(), r[2].as_str().map(str::to_string))).collect();
    assert!(rows.iter().all(|r| r[3] == "dcmi/system" && r[4] == "wall"), "{rows:?}");
    let flagged: Vec<&(f64, Option<String>)> = points.iter().filter(|p| p.1.is_some()).collect();
    let plain: Vec<&(f64, Option<String>)> = points.iter().filter(|p| p.1.is_none()).collect();
    assert!(!flagged.is_empty() && flagged.iter().all(|p| *p == &(319.0, Some("deactivated".to_string()))), "{points:?}");
    assert!(!plain.is_empty() && plain.iter().all(|p| p.0 == 197.0), "{points:?}");
    // Deactivated readings come first (the plan), and at most one per answer the BMC gave.
    assert!(flagged.len() <= 3, "{points:?}");
    assert_eq!(points.iter().position(|p| p.1.is_none()), Some(flagged.len()), "{points:?}");

    // The documented queries: the flagged watts alone, and the rest.
    let rows = influx.rows(DB, &format!("SELECT count(watts), mean(watts) FROM power WHERE host = '{HOST}' AND flags = 'deactivated'"));
    assert_eq!((rows[0][1].as_u64(), rows[0][2].as_f64()), (Some(flagged.len() as u64), Some(319.0)));
    let rows = influx.rows(DB, &format!("SELECT count(flags) FROM power WHERE host = '{HOST}'"));
    assert_eq!(rows[0][1].as_u64(), Some(flagged.len() as u64));

    // The change of state is an event each way, once.
    let rows = influx.rows(DB, &format!("SELECT message FROM event WHERE host = '{HOST}' AND kind = 'sensor_flagged'"));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        rows[0][1].as_str(),
        Some(
            "power reading state is deactivated but the BMC reports 319 W: kept as a plausible reading (flagged); \
             `ipmitool dcmi power activate` may set the state"
        )
    );
    let rows = influx.rows(DB, &format!("SELECT message FROM event WHERE host = '{HOST}' AND kind = 'sensor_available'"));
    assert_eq!(rows.iter().map(|r| r[1].as_str().unwrap()).collect::<Vec<_>>(), vec!["power reading state is activated"]);
}
