//! Faults of the spine: the collector or InfluxDB is down when the agent starts sampling. Nothing
//! the agent sampled may be lost: it keeps a backlog and the collector acknowledges only what
//! InfluxDB holds.

use std::time::Duration;
use wattflip_e2e::*;

fn hwmon_agent(tmp: &std::path::Path, sys: &std::path::Path, host: &str, url: &str) -> std::path::PathBuf {
    agent_config(
        tmp,
        &format!(
            "agent_id = \"{host}\"\n[collector]\nurl = \"{url}\"\nbackoff_initial = \"50ms\"\nbackoff_max = \"200ms\"\n\
             [sampling]\ninterval = \"100ms\"\n[sources]\nsysfs_root = \"{}\"\nrapl = false\n\
             [drives]\nnvme_cli = false\nsmartctl = false\n{}",
            sys.display(),
            pki().agent_tls(host)
        ),
    )
}

#[test]
fn collector_down_at_start_loses_nothing() {
    let influx = Influx::start();
    let port = free_port();
    let (tmp, sys) = sysfs_tree(&["hwmon"]);
    let cfg = hwmon_agent(tmp.path(), &sys, "late-collector", &format!("https://127.0.0.1:{port}"));
    let mut agent = spawn_agent(tmp.path(), &["run", "--config", cfg.to_str().unwrap(), "--samples", "10"]);
    // The agent samples while nobody listens: wait until it has failed to connect and retried.
    let stderr_path = tmp.path().join("agent.stderr");
    let retried = wait_for(Duration::from_secs(20), || {
        let e = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        (e.matches("cannot connect").count() >= 2).then_some(())
    });
    assert!(retried.is_some(), "the agent never retried a connection: {}", std::fs::read_to_string(&stderr_path).unwrap_or_default());
    assert!(agent.try_wait().unwrap().is_none(), "the agent must keep retrying, not exit");
    let _collector = Collector::start_on(port, &influx.url, "wf_faults1");
    let status = wait_child(&mut agent, Duration::from_secs(30), tmp.path());
    let stderr = std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("cannot connect"), "retries are logged: {stderr}");
    let rows = influx.rows("wf_faults1", "SELECT count(watts) FROM power WHERE host = 'late-collector'");
    assert_eq!(rows[0][1].as_i64(), Some(10));
    let rows = influx.rows("wf_faults1", "SELECT count(celsius) FROM temperature WHERE host = 'late-collector'");
    assert_eq!(rows[0][1].as_i64(), Some(40));
}

#[test]
fn influx_down_means_no_ack_until_it_is_back() {
    let influx_port = free_port();
    let collector = Collector::start(&format!("http://127.0.0.1:{influx_port}"), "wf_faults2");
    let (tmp, sys) = sysfs_tree(&["hwmon"]);
    let cfg = hwmon_agent(tmp.path(), &sys, "late-influx", &collector.url);
    let mut agent = spawn_agent(tmp.path(), &["run", "--config", cfg.to_str().unwrap(), "--samples", "5"]);
    // InfluxDB is down: wait until the collector has failed a write and is retrying it.
    assert!(
        wait_for(Duration::from_secs(20), || collector.log().contains("will retry").then_some(())).is_some(),
        "the collector never retried a write: {}",
        collector.log()
    );
    // Nothing is acknowledged: the agent is still waiting.
    assert!(agent.try_wait().unwrap().is_none(), "the agent must wait for acknowledgements");
    assert!(collector.log().contains("will retry"), "collector retries: {}", collector.log());
    let influx = Influx::start_on(influx_port);
    let status = wait_child(&mut agent, Duration::from_secs(30), tmp.path());
    let stderr = std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap();
    assert!(status.success(), "{stderr}");
    // The collector created the database on the fresh server, and every sample arrived once.
    let rows = influx.rows("wf_faults2", "SELECT count(watts) FROM power WHERE host = 'late-influx'");
    assert_eq!(rows[0][1].as_i64(), Some(5));
    let rows = influx.rows("wf_faults2", "SELECT count(celsius) FROM temperature WHERE host = 'late-influx'");
    assert_eq!(rows[0][1].as_i64(), Some(20));
}
