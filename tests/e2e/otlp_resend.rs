//! Energy counters stay exact across collector restarts and resends (issue 38), through the real
//! collector, InfluxDB and Prometheus. The agent's windows carry `joules_total`, its zone's energy
//! since its energy epoch (worked out here by hand, as `agent/src/export/totals.rs` stamps it),
//! and the OTLP sink exports that total, so a batch sent twice carries one value. Two sequences:
//! *restart after stall*: influxd stalls (SIGSTOP), the collector exports three windows it never
//! acknowledges, is killed, and the agent resends them to a new collector; *resend after
//! restart*: the collector restarts after everything was acknowledged, and the agent (restarted,
//! its spool replayed) resends its newest windows to the new one. In both, every sample of
//! `hw_energy_joules_total` (and of the host's) is the total by hand, there is no counter reset,
//! and the energy over the stream is exactly its joules, never plus the resent ones (a collector
//! keeping its own running total counted them again after a drop). Then the same through the real
//! agent: its totals continue from its spool across its own restart and a collector restart.

use std::time::{Duration, Instant};
use tokio_stream::StreamExt as _;
use wattflip_e2e::prometheus::Prometheus;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, AgentMessage};

const S: i64 = 1_000_000_000;
/// The energy the agent's epoch had counted before the first window streamed here.
const BEFORE_J: f64 = 600.0;

/// Joules of window `k` (one second): quarters, so every sum is exact in any order.
fn joules(k: u64) -> f64 {
    10.0 + k as f64 * 0.25
}

/// The agent's total after window `k`.
fn total(k: u64) -> f64 {
    BEFORE_J + (0..=k).map(joules).sum::<f64>()
}

/// An agent's run stream (one RAPL counter, the host's tier), one batch at a time.
struct Agent {
    rt: tokio::runtime::Runtime,
    tx: tokio::sync::mpsc::Sender<AgentMessage>,
    acks: tonic::Streaming<v1::Ack>,
    host: &'static str,
    t0: i64,
}

impl Agent {
    fn connect(url: &str, host: &'static str, t0: i64) -> Agent {
        let (rt, tx, acks) = crate::otlp_outage::open_rapl_stream(url, host, t0);
        Agent { rt, tx, acks, host, t0 }
    }

    /// Window `k` (ending at t0 + k s) as batch `k + 1`, with the agent's total and epoch start.
    fn send(&mut self, k: u64) {
        let power = vec![v1::PowerSample {
            time_ns: self.t0 + k as i64 * S,
            source: "rapl".into(),
            zone: "package-0".into(),
            scope: "package".into(),
            method: v1::Method::Measured as i32,
            watts: Some(joules(k)),
            joules: Some(joules(k)),
            interval_ns: S,
            joules_total: Some(total(k)),
            ..Default::default()
        }];
        let batch = v1::Batch { agent_id: self.host.into(), sequence: k + 1, power, joules_total_start_ns: self.t0 - 60 * S, ..Default::default() };
        self.rt.block_on(self.tx.send(AgentMessage { kind: Some(Kind::Batch(batch)) })).unwrap();
    }

    /// The next Ack's sequence within `within`, or None.
    fn ack(&mut self, within: Duration) -> Option<u64> {
        let acks = &mut self.acks;
        let next = self.rt.block_on(async { tokio::time::timeout(within, acks.next()).await }).ok()?;
        Some(next.expect("a reply").expect("no error").durable_sequence)
    }

    /// Sends windows `ks`, each acknowledged before the next.
    fn stream(&mut self, ks: std::ops::Range<u64>) {
        for k in ks {
            self.send(k);
            assert_eq!(self.ack(Duration::from_secs(20)), Some(k + 1), "{} window {k}", self.host);
        }
    }
}

fn config(prom: &Prometheus) -> String {
    format!("{}\n[otlp]\nurl = \"{}\"\nflush_interval = \"100ms\"\nmax_backoff = \"1s\"\n", pki().collector_tls(), prom.otlp_url())
}

/// The (second after t0, value) samples of `metric` for `host`.
fn samples(prom: &Prometheus, metric: &str, host: &str, t0: i64) -> Vec<(i64, f64)> {
    let t_end = (t0 + 60 * S) as f64 / 1e9;
    let series = prom.samples(&format!("{metric}{{instance=\"{host}\"}}"), "15m", t_end);
    series.into_iter().flat_map(|s| s.1).map(|(t, v)| ((t - t0 as f64 / 1e9).round() as i64, v)).collect()
}

/// Waits until Prometheus holds window `k` of `host`'s zone counter.
fn wait_exported(prom: &Prometheus, host: &str, t0: i64, k: u64) {
    let has = || samples(prom, "hw_energy_joules_total", host, t0).iter().any(|s| s.0 == k as i64).then_some(());
    assert!(wait_for(Duration::from_secs(20), has).is_some(), "window {k} never reached Prometheus: {:?}", samples(prom, "hw_energy_joules_total", host, t0));
}

/// What `increase()` counts over the samples: each rise, and after a drop (a counter reset) the
/// whole new value.
fn increase(s: &[(i64, f64)]) -> f64 {
    s.windows(2).map(|w| if w[1].1 >= w[0].1 { w[1].1 - w[0].1 } else { w[1].1 }).sum()
}

/// Every window 0..n once, at the agent's total; no reset; the energy after window 0 is exactly
/// the joules of windows 1..n, zone and host alike.
fn check_exact(prom: &Prometheus, host: &str, t0: i64, n: u64) {
    let want: Vec<(i64, f64)> = (0..n).map(|k| (k as i64, total(k))).collect();
    let energy: f64 = (1..n).map(joules).sum();
    for metric in ["hw_energy_joules_total", "hw_host_energy_joules_total"] {
        let got = samples(prom, metric, host, t0);
        assert_eq!(increase(&got), energy, "{metric} of {host}: the energy by hand, not plus the resent windows: {got:?}");
        assert_eq!(got, want, "{metric} of {host}");
        let resets = prom.series(&format!("resets({metric}{{instance=\"{host}\"}}[15m])"), (t0 + 60 * S) as f64 / 1e9);
        assert_eq!(resets[0].1[0].1, 0.0, "{metric} of {host} has a counter reset");
    }
}

fn now_t0(windows: i64) -> i64 {
    let now = wattflip_e2e::fleet::now_ns();
    now - now.rem_euclid(S) - (windows + 5) * S
}

/// influxd stalls for 5 s: the optional OTLP sink exports windows 4..7, which are never
/// acknowledged; the collector is killed, and the agent resends them to a new collector.
#[test]
fn a_restart_after_an_influxdb_stall_keeps_the_energy_counter_exact() {
    const HOST: &str = "otlp-stall";
    let prom = Prometheus::start();
    let influx = Influx::start();
    let t0 = now_t0(10);
    let first = Collector::start_with(free_port(), &influx.url, "wf_otlp_stall", &config(&prom));
    let mut agent = Agent::connect(&first.url, HOST, t0);
    agent.stream(0..4);
    influx.pause();
    let stalled = Instant::now();
    for k in 4..7 {
        agent.send(k);
    }
    wait_exported(&prom, HOST, t0, 6);
    assert_eq!(agent.ack(Duration::from_secs(5).saturating_sub(stalled.elapsed())), None, "acknowledged while influxd stalled");
    drop(agent);
    first.kill();
    influx.resume();
    let second = Collector::start_with(free_port(), &influx.url, "wf_otlp_stall", &config(&prom));
    let mut agent = Agent::connect(&second.url, HOST, t0);
    agent.stream(4..10);
    wait_exported(&prom, HOST, t0, 9);
    check_exact(&prom, HOST, t0, 10);
    // InfluxDB has every window once, as before.
    let n = influx.rows("wf_otlp_stall", "SELECT count(\"joules\") FROM \"power\"");
    assert_eq!(n[0][1], serde_json::json!(10), "{}", second.log());
}

/// Everything acknowledged, the collector restarted; the agent restarts too and replays its
/// spool's newest windows (4..7, acknowledged before) to the new collector, then goes on.
#[test]
fn a_resend_after_a_collector_restart_keeps_the_energy_counter_exact() {
    const HOST: &str = "otlp-replay";
    let prom = Prometheus::start();
    let influx = Influx::start();
    let t0 = now_t0(10);
    let first = Collector::start_with(free_port(), &influx.url, "wf_otlp_replay", &config(&prom));
    let mut agent = Agent::connect(&first.url, HOST, t0);
    agent.stream(0..7);
    wait_exported(&prom, HOST, t0, 6);
    drop(agent);
    let (took, status) = first.terminate();
    assert!(status.success(), "the collector stopped with {status} after {took:?}");
    let second = Collector::start_with(free_port(), &influx.url, "wf_otlp_replay", &config(&prom));
    let mut agent = Agent::connect(&second.url, HOST, t0);
    agent.stream(4..10);
    wait_exported(&prom, HOST, t0, 9);
    check_exact(&prom, HOST, t0, 10);
}

/// The real agent (RAPL fixture counters that a thread raises by whole half-joules, a spool of
/// 4 KiB segments so the acknowledged ones are deleted) runs 30 ticks through one collector; the
/// collector restarts; the agent restarts, replays its spool's newest segment (acknowledged
/// before) and runs 30 more. Each zone's `hw_energy_joules_total` is, sample by sample, the
/// running sum of its `joules` in InfluxDB over both runs (its total continued from the spool),
/// with no reset.
#[test]
fn the_real_agent_continues_its_totals_across_its_restart_and_a_collector_restart() {
    const HOST: &str = "otlp-agent";
    let prom = Prometheus::start();
    let influx = Influx::start();
    let (tmp, sys) = sysfs_tree(&["rapl-only"]);
    let dir = tmp.path();
    let port = free_port();
    let body = format!(
        "agent_id = \"{HOST}\"\n[collector]\nurl = \"https://127.0.0.1:{port}\"\nbackoff_initial = \"50ms\"\nbackoff_max = \"300ms\"\n\
         [sampling]\ninterval = \"100ms\"\n[sources]\nsysfs_root = \"{}\"\n[spool]\ndir = \"{}\"\nsegment_bytes = 4096\nmax_bytes = 1048576\n{}",
        sys.display(),
        dir.join("spool").display(),
        pki().agent_tls(HOST)
    );
    let cfg = agent_config(dir, &body);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let bumper = {
        let (stop, rapl) = (stop.clone(), sys.join("class/powercap"));
        std::thread::spawn(move || {
            let zones = [("intel-rapl:0", 1_000_000u64, 2_000_000u64), ("intel-rapl:0:0", 400_000, 1_000_000), ("intel-rapl:0:1", 200_000, 500_000)];
            let mut uj: Vec<u64> = zones.iter().map(|z| z.1).collect();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for (i, (name, _, step)) in zones.iter().enumerate() {
                    uj[i] += step;
                    overwrite_in_place(&rapl.join(name).join("energy_uj"), uj[i]);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let run_agent = |collector: &Collector| {
        let mut a = spawn_agent(dir, &["run", "--config", cfg.to_str().unwrap(), "--samples", "30"]);
        let st = wait_child(&mut a, Duration::from_secs(60), dir);
        assert!(st.success(), "{}\n{}", std::fs::read_to_string(dir.join("agent.stderr")).unwrap_or_default(), collector.log());
    };
    let extra = config(&prom);
    let first = Collector::start_with(port, &influx.url, "wf_otlp_agent", &extra);
    run_agent(&first);
    wait_all_exported(&prom, &influx);
    let (took, status) = first.terminate();
    assert!(status.success(), "the collector stopped with {status} after {took:?}");
    let second = Collector::start_with(port, &influx.url, "wf_otlp_agent", &extra);
    run_agent(&second);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    bumper.join().unwrap();
    wait_all_exported(&prom, &influx);
    let stderr = std::fs::read_to_string(dir.join("agent.stderr")).unwrap_or_default();
    assert!(stderr.contains("energy totals continued from the spool"), "{stderr}");
    for zone in ["package-0", "package-0/core", "package-0/dram"] {
        let joules: Vec<f64> = agent_joules(&influx, zone);
        let mut acc = 0.0;
        let want: Vec<f64> = joules
            .iter()
            .map(|j| {
                acc += j;
                acc
            })
            .collect();
        let got: Vec<f64> = agent_counter(&prom, zone).into_iter().map(|s| s.1).collect();
        assert!(joules.len() >= 40, "{zone}: {} windows", joules.len());
        assert_eq!(got, want, "{zone}: the counter is the running sum of InfluxDB's joules over both runs");
    }
}

/// Window joules of the real agent's zone `zone`, in time order, from InfluxDB.
fn agent_joules(influx: &Influx, zone: &str) -> Vec<f64> {
    let q = format!("SELECT joules FROM power WHERE host = 'otlp-agent' AND zone = '{zone}' AND joules >= 0");
    influx.rows("wf_otlp_agent", &q).iter().map(|r| r[1].as_f64().unwrap()).collect()
}

fn agent_counter(prom: &Prometheus, zone: &str) -> Vec<(f64, f64)> {
    let sel = format!("hw_energy_joules_total{{instance=\"otlp-agent\",hw_id=\"rapl:{zone}\"}}");
    let t_end = wattflip_e2e::fleet::now_ns() as f64 / 1e9 + 60.0;
    prom.samples(&sel, "15m", t_end).into_iter().flat_map(|s| s.1).collect()
}

/// Waits until Prometheus holds as many package-0 counter samples as InfluxDB has windows.
fn wait_all_exported(prom: &Prometheus, influx: &Influx) {
    let done = || {
        let n = agent_joules(influx, "package-0").len();
        (n > 0 && agent_counter(prom, "package-0").len() == n).then_some(())
    };
    assert!(
        wait_for(Duration::from_secs(30), done).is_some(),
        "Prometheus {:?}\nInfluxDB {:?}",
        agent_counter(prom, "package-0"),
        agent_joules(influx, "package-0")
    );
}
