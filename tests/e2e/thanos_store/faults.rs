//! The fault test of issue 29: three agents with disk spools stream at 10 Hz to two collectors
//! (`collector.urls`; a and b prefer c1, c prefer c2), each collector writing InfluxDB and, as a
//! required sink, OTLP into its own Thanos receiver (c1 → r0, c2 → r1) of a hashring with
//! replication factor 3. Mid-stream r0 is SIGKILLed for 60 s and restarted on its data (c1 cannot
//! store meanwhile and holds its agents' acknowledgements; c2's writes reach quorum on r1 and
//! r2), then c1 is SIGKILLed and its agents resend what it had not acknowledged through c2.
//! Afterwards every sample of the agents' ledgers (`ledger.rs`: each batch logged once stored in
//! the spool; the agents exit only once every batch is acknowledged) is answered exactly once by
//! `thanos query` with deduplication, held by at least 2 of the 3 replicas (the quorum), and r0
//! misses the samples of c's host it was down for (the outage was real).

use crate::ledger::{ledger, plain};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wattflip_e2e::thanos::{Series, Thanos, REPLICA_LABEL};
use wattflip_e2e::*;

const DB: &str = "wf_thanos_ledger";
/// How long receiver r0 stays dead (the 60 s).
const OUTAGE_MS: u64 = 60_000;
/// Samples per agent at 10 Hz: streaming through the outage, the collector kill and after.
const SAMPLES: &str = "800";

fn agent_cfg(dir: &Path, sys: &Path, host: &str, urls: &[&str]) -> PathBuf {
    let urls: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    agent_config(
        dir,
        &format!(
            "agent_id = \"{host}\"\n[collector]\nurls = [{}]\nbackoff_initial = \"50ms\"\nbackoff_max = \"500ms\"\nconnect_timeout = \"1s\"\n\
             [sampling]\ninterval = \"100ms\"\n[sources]\nsysfs_root = \"{}\"\nrapl = false\n[spool]\ndir = \"{}\"\n{}",
            urls.join(", "),
            sys.display(),
            dir.join("spool").display(),
            pki().agent_tls(host)
        ),
    )
}

/// A collector writing InfluxDB and, required, the OTLP receiver at `otlp_url`, on `port`. Its
/// OTLP retries back off up to 30 s (the default): when c1 is killed a few seconds after r0 is
/// back, it is most likely still waiting to retry, so a collector that acknowledged batches before
/// Thanos stored them would lose them here (with `required = false` this test fails).
pub(super) fn collector(port: u16, influx: &Influx, otlp_url: &str) -> Collector {
    let extra = format!("{}[otlp]\nurl = \"{otlp_url}\"\nrequired = true\nflush_interval = \"100ms\"\nmax_backoff = \"30s\"\n", pki().collector_tls());
    Collector::start_with(port, &influx.url, DB, &extra)
}

fn now_ms() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// A series' identity without its replica label.
fn identity(s: &Series) -> String {
    let mut l = s.labels.clone();
    l.remove(REPLICA_LABEL);
    serde_json::Value::Object(l).to_string()
}

/// (series without replica, ms) → on how many replicas, from a `dedup=false` answer; and r0's count.
fn replicas(raw: &[Series]) -> (BTreeMap<(String, i64), usize>, usize) {
    let mut m = BTreeMap::new();
    let mut r0 = 0;
    for s in raw {
        let on_r0 = s.labels.get(REPLICA_LABEL).and_then(|v| v.as_str()) == Some("r0");
        for (t, _) in &s.samples {
            *m.entry((identity(s), *t)).or_insert(0) += 1;
            r0 += usize::from(on_r0);
        }
    }
    (m, r0)
}

/// Checks one metric of one host against the ledger's count; returns how many samples r0 misses.
fn check(thanos: &Thanos, metric: &str, host: &str, want: i64, at_s: f64) -> usize {
    let q = format!("{metric}{{instance=\"{host}\"}}[15m]");
    let deduped = thanos.query(&q, at_s, true);
    let mut total = 0;
    for s in &deduped {
        assert!(s.samples.windows(2).all(|w| w[0].0 < w[1].0), "{host} {metric}: a timestamp twice in {:?}", s.labels);
        total += s.samples.len();
    }
    assert_eq!(total as i64, want, "{host} {metric}: samples answered by query (deduplicated) vs the agent's ledger");
    let (on, r0) = replicas(&thanos.query(&q, at_s, false));
    assert_eq!(on.len(), total, "{host} {metric}: the replicas hold other samples than the deduplicated answer");
    let below_quorum: Vec<_> = on.iter().filter(|(_, n)| **n < 2).collect();
    assert!(below_quorum.is_empty(), "{host} {metric}: acknowledged samples on fewer than 2 replicas: {:?}", &below_quorum[..below_quorum.len().min(5)]);
    total - r0
}

#[test]
fn every_acknowledged_sample_is_answered_once_by_thanos_through_a_receiver_and_a_collector_kill() {
    let mut thanos = Thanos::start();
    let influx = Influx::start();
    let (p1, p2) = (free_port(), free_port());
    let c1 = collector(p1, &influx, &thanos.receivers[0].otlp_url());
    let c2 = collector(p2, &influx, &thanos.receivers[1].otlp_url());
    let hosts = [("thanos-a", [&c1.url, &c2.url]), ("thanos-b", [&c1.url, &c2.url]), ("thanos-c", [&c2.url, &c1.url])];
    let mut agents = Vec::new();
    for (host, urls) in hosts {
        let (tmp, sys) = sysfs_tree(&["hwmon"]);
        let cfg = agent_cfg(tmp.path(), &sys, host, &[urls[0].as_str(), urls[1].as_str()]);
        let child = spawn_agent(tmp.path(), &["run", "--config", cfg.to_str().unwrap(), "--samples", SAMPLES]);
        agents.push((host, tmp, child));
    }
    let pause = |ms: u64| std::thread::sleep(Duration::from_millis(ms));
    pause(3000);
    thanos.kill(0);
    pause(OUTAGE_MS);
    thanos.restart(0);
    pause(3000);
    c1.kill();
    for (host, tmp, child) in &mut agents {
        let st = wait_child(child, Duration::from_secs(120), tmp.path());
        assert!(st.success(), "agent {host} failed:\n{}", std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap_or_default());
    }
    let at_s = now_ms() as f64 / 1000.0;
    thanos.wait_stores_cover(now_ms());
    for (host, tmp, _) in &agents {
        let stderr = plain(&std::fs::read_to_string(tmp.path().join("agent.stderr")).unwrap());
        let l = ledger(&stderr);
        let power: i64 = l.values().map(|v| v.0).sum();
        let temperature: i64 = l.values().map(|v| v.1).sum();
        assert!(l.len() > 40, "{host}: only {} batches in the ledger", l.len());
        // Every tick of the hwmon fixture yields one power and four temperature samples.
        assert_eq!(power * 4, temperature, "{host}: ledger shape");
        let r0_missing = check(&thanos, "hw_power_watts", host, power, at_s) + check(&thanos, "hw_temperature_celsius", host, temperature, at_s);
        // c's samples went through c2 → r1 while r0 was dead: r0 lacks them (about 60 s × 50/s).
        if *host == "thanos-c" {
            assert!(r0_missing >= 1500, "{host}: r0 misses only {r0_missing} samples: was it down?");
        }
        // The other sink of the same collectors holds them once too.
        let rows = influx.rows(DB, &format!("SELECT count(watts) FROM power WHERE host = '{host}'"));
        assert_eq!(rows.first().and_then(|r| r[1].as_i64()), Some(power), "{host}: InfluxDB vs ledger");
    }
}
