//! The fault ledger: two agents with disk spools stream over mutual TLS while the test pauses the
//! collector (SIGSTOP for 60 s: a partition, as the issue asks), kills it with SIGKILL three times,
//! restarts influxd mid-stream, and kills one agent with SIGKILL in the middle of a scheduled probe
//! and starts it again on the same spool. Afterwards every sample and every probe run in the
//! agents' ledgers is in InfluxDB exactly once (a probe killed half-way sent nothing, since a
//! probe's runs go out together when it ends).
//!
//! The ledger is the agent's own `wattflip::ledger` log line, written once per batch right after
//! the batch is stored (and fsynced) in the spool. A sample sampled but not yet spooled when the
//! agent is killed was never accepted by the agent and is in no ledger; one that is spooled is
//! resent by the restarted agent. (SIGKILL landing between the spool write and that log line
//! would show as one batch more in InfluxDB than in the ledger: a window of microseconds.)

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use wattflip_e2e::*;

const DB: &str = "wf_ledger";
/// How long the collector stays paused (the 60 s partition).
const PARTITION_MS: u64 = 60_000;

/// `probes`: extra config (a `[[probes]]` schedule) or "".
fn agent_cfg(dir: &Path, sys: &Path, host: &str, url: &str, probes: &str) -> std::path::PathBuf {
    agent_config(
        dir,
        &format!(
            "agent_id = \"{host}\"\n[collector]\nurl = \"{url}\"\nbackoff_initial = \"50ms\"\nbackoff_max = \"500ms\"\nconnect_timeout = \"1s\"\n\
             [sampling]\ninterval = \"100ms\"\n[sources]\nsysfs_root = \"{}\"\nrapl = false\n[spool]\ndir = \"{}\"\n{}{probes}",
            sys.display(),
            dir.join("spool").display(),
            pki().agent_tls(host)
        ),
    )
}

/// How many scheduled probes the agent's log shows started and finished.
fn probes_started_finished(dir: &Path) -> (usize, usize) {
    let log = std::fs::read_to_string(dir.join("agent.stderr")).unwrap_or_default();
    (log.matches("scheduled probe starting").count(), log.matches("scheduled probe finished").count())
}

/// Removes ANSI colour sequences (the log may be coloured).
pub(crate) fn plain(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\u{1b}' {
            for d in it.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// sequence → (power, temperature) samples, from the agent's ledger lines, completed by its
/// `wattflip::resend` lines: a batch synced to the spool just before a SIGKILL never got its
/// ledger line, but it is sent (and logged by content) from the spool after the restart.
pub(crate) fn ledger(stderr: &str) -> BTreeMap<u64, (i64, i64, i64)> {
    let mut m = BTreeMap::new();
    let lines = plain(stderr);
    let stored = lines.lines().filter(|l| l.contains("wattflip::ledger") && l.contains("stored"));
    let resent = lines.lines().filter(|l| l.contains("wattflip::resend"));
    for line in stored.chain(resent) {
        let field = |k: &str| -> i64 {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {k} in ledger line {line:?}"))
        };
        m.entry(field("sequence") as u64).or_insert((field("power"), field("temperature"), field("probe_runs")));
    }
    m
}

fn count(influx: &Influx, q: &str) -> i64 {
    influx.rows(DB, q).first().and_then(|r| r[1].as_i64()).unwrap_or(0)
}

#[test]
fn every_ledger_sample_is_stored_exactly_once_through_faults() {
    let mut influx = Influx::start();
    let port = free_port();
    let mut collector = Collector::start_on(port, &influx.url, DB);
    let (tmp_a, sys_a) = sysfs_tree(&["hwmon"]);
    let (tmp_b, sys_b) = sysfs_tree(&["hwmon"]);
    // Agent a also runs a quick probe every second on a scratch file (O_DIRECT: on disk, not /tmp),
    // without power recording so every power point is one of its 10 Hz samples.
    let scratch = tempfile::Builder::new().prefix("wf-ledger-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let probes = format!(
        "[[probes]]\nname = \"every-second\"\nschedule = \"* * * * * *\"\ntarget = \"{}\"\nsize = \"64MiB\"\nquick = true\npower = false\n",
        scratch.path().join("scratch.dat").display()
    );
    let cfg_a = agent_cfg(tmp_a.path(), &sys_a, "ledger-a", &collector.url, &probes);
    let cfg_b = agent_cfg(tmp_b.path(), &sys_b, "ledger-b", &collector.url, "");
    let mut a = spawn_agent(tmp_a.path(), &["run", "--config", cfg_a.to_str().unwrap(), "--samples", "100000"]);
    // b samples at 10 Hz for 80 s: through the whole partition and the kills after it.
    let mut b = spawn_agent(tmp_b.path(), &["run", "--config", cfg_b.to_str().unwrap(), "--samples", "800"]);
    let pause = |d: u64| std::thread::sleep(Duration::from_millis(d));

    pause(2000);
    // A partition: the collector stops answering (its sockets stay open).
    collector.pause();
    pause(PARTITION_MS);
    collector.resume();
    pause(1500);
    // Three SIGKILLs while agents stream, each followed by a fresh collector on the same address.
    for _ in 0..3 {
        collector.kill();
        pause(700);
        collector = Collector::start_on(port, &influx.url, DB);
        pause(1300);
    }
    // influxd restarts mid-stream, keeping its data.
    influx.restart();
    pause(1500);
    // An agent dies without warning in the middle of a probe and comes back on the same spool.
    let waited = std::time::Instant::now();
    loop {
        let (started, finished) = probes_started_finished(tmp_a.path());
        if started > finished && finished > 0 {
            break;
        }
        assert!(waited.elapsed() < Duration::from_secs(30), "agent a never ran its scheduled probe");
        pause(20);
    }
    signal(&a, "KILL");
    let _ = a.wait();
    pause(1000);
    let mut a = spawn_agent(tmp_a.path(), &["run", "--config", cfg_a.to_str().unwrap(), "--samples", "30"]);

    for (child, tmp) in [(&mut a, tmp_a.path()), (&mut b, tmp_b.path())] {
        let st = wait_child(child, Duration::from_secs(90), tmp);
        let stderr = std::fs::read_to_string(tmp.join("agent.stderr")).unwrap();
        assert!(st.success(), "agent failed:\n{stderr}");
    }
    for (host, tmp) in [("ledger-a", tmp_a.path()), ("ledger-b", tmp_b.path())] {
        let stderr = std::fs::read_to_string(tmp.join("agent.stderr")).unwrap();
        let l = ledger(&stderr);
        let power: i64 = l.values().map(|v| v.0).sum();
        let temperature: i64 = l.values().map(|v| v.1).sum();
        let probe_runs: i64 = l.values().map(|v| v.2).sum();
        assert!(l.len() > 40, "{host}: only {} batches in the ledger", l.len());
        // Every tick of the hwmon fixture yields one power and four temperature samples.
        assert_eq!((power * 4, temperature), (temperature, temperature), "{host}: ledger shape");
        let stored_power = count(&influx, &format!("SELECT count(watts) FROM power WHERE host = '{host}'"));
        let stored_temp = count(&influx, &format!("SELECT count(celsius) FROM temperature WHERE host = '{host}'"));
        assert_eq!((stored_power, stored_temp), (power, temperature), "{host}: InfluxDB vs ledger ({} batches)", l.len());
        let stored_runs = count(&influx, &format!("SELECT count(mean_us) FROM probe_run WHERE host = '{host}'"));
        assert_eq!(stored_runs, probe_runs, "{host}: probe runs in InfluxDB vs ledger");
        if host == "ledger-a" {
            // Several whole quick probes (12 runs each) before and after the kill.
            assert!(probe_runs >= 24 && probe_runs % 12 == 0, "{host}: {probe_runs} probe runs");
        }
    }
    // The restarted agent went on above its last sequence, and resent from its spool.
    let a_log = plain(&std::fs::read_to_string(tmp_a.path().join("agent.stderr")).unwrap());
    let opened: Vec<&str> = a_log.lines().filter(|l| l.contains("spool opened")).collect();
    assert_eq!(opened.len(), 2, "{a_log}");
    let in_log_order: Vec<u64> = a_log
        .lines()
        .filter(|l| l.contains("wattflip::ledger"))
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("sequence=")).and_then(|v| v.parse().ok()))
        .collect();
    assert!(in_log_order.windows(2).all(|w| w[0] < w[1]), "sequences rise across the restart");
}
