//! Throttling detection end to end: agent-shaped streams (a Hello with the drives' thermal limits,
//! then batches of probe runs and nvme-cli temperatures, as `wattflip-agent` sends them) over mutual
//! TLS into the real collector, whose detector writes `throttle_event` to a real influxd. The
//! episode opens in one stream and closes in the next, as after an agent reconnect; a second
//! drive's runs arrive in a stream before its temperatures (event time: the same episode).

use tokio_stream::StreamExt as _;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, ingest_client::IngestClient, AgentMessage};

const DB: &str = "wf_throttle";
const HOST: &str = "e2e-throttle";
const S: i64 = 1_000_000_000;

fn hello() -> AgentMessage {
    let limits = |n: u32, warning: f64, critical: f64| v1::DriveThermalLimits {
        device: format!("nvme{n}"),
        serial: format!("S-THROTTLE-{n}"),
        warning_celsius: warning,
        critical_celsius: critical,
        namespaces: vec![format!("nvme{n}n1")],
    };
    let now = wattflip_proto::units::UnixNanos::now().0;
    AgentMessage {
        kind: Some(Kind::Hello(v1::Hello {
            agent_id: HOST.into(),
            time_ns: now,
            inventory: Some(v1::Inventory {
                drive_thermal_limits: vec![limits(0, 70.0, 80.0), limits(1, 70.0, 80.0), limits(2, 70.0, 80.0)],
                ..Default::default()
            }),
            ..Default::default()
        })),
    }
}

/// A 1 s sequential-write run at `t` on `nvme<n>n1` with its measured energy (J = W over 1 s).
fn run(n: u32, t: i64, mib_per_s: f64, joules: f64) -> v1::ProbeRun {
    v1::ProbeRun {
        run_id: format!("{t}-{n}"),
        device: format!("nvme{n}n1"),
        model: "ACME-P1".into(),
        bench: "governor_sweep".into(),
        experiment: "governor_sweep/SW:128KiB".into(),
        pattern: "SW".into(),
        varying: "power_state".into(),
        start_ns: t,
        end_ns: t + S,
        io_count: 1000,
        io_size_bytes: 131_072,
        mib_per_s,
        energy_j: Some(joules),
        energy_source: "hwmon:ina226-0-0040/power1".into(),
        ..Default::default()
    }
}

fn temp(n: u32, t: i64, celsius: f64) -> v1::TemperatureSample {
    v1::TemperatureSample { time_ns: t, source: "nvme_cli".into(), device: format!("nvme{n}"), sensor: "Composite".into(), celsius }
}

fn batch(seq: u64, probe_runs: Vec<v1::ProbeRun>, temperature: Vec<v1::TemperatureSample>) -> AgentMessage {
    AgentMessage { kind: Some(Kind::Batch(v1::Batch { agent_id: HOST.into(), sequence: seq, probe_runs, temperature, ..Default::default() })) }
}

/// One stream: a Hello, then `batches`; returns the acknowledged sequences.
fn stream(collector: &Collector, batches: Vec<AgentMessage>) -> Vec<u64> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let id = pki().issue(HOST, &[HOST], None);
        let channel = pki().channel(&collector.url, Some(id)).await.unwrap();
        let n = batches.len();
        let msgs: Vec<AgentMessage> = std::iter::once(hello()).chain(batches).collect();
        let mut acks = IngestClient::new(channel).stream(tokio_stream::iter(msgs)).await.unwrap().into_inner();
        let mut seqs = Vec::new();
        for _ in 0..n {
            let a = tokio::time::timeout(std::time::Duration::from_secs(20), acks.next()).await.expect("ack in time");
            seqs.push(a.expect("an ack").expect("acknowledged").durable_sequence);
        }
        seqs
    })
}

type Row = (String, String, String, f64, f64, f64, f64, Option<f64>, f64, bool);

fn events(influx: &Influx) -> Vec<Row> {
    let rows = influx.rows(
        DB,
        &format!(
            "SELECT device, \"trigger\", signal, pattern, onset_celsius, warning_celsius, critical_celsius, throughput_drop_pct, \
             power_drop_pct, duration_s, ongoing FROM throttle_event WHERE host = '{HOST}'"
        ),
    );
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    let s = |v: &serde_json::Value| v.as_str().unwrap_or_else(|| panic!("not a string: {v}")).to_string();
    rows.iter()
        .map(|r| {
            assert_eq!(s(&r[2]), "temperature", "trigger of {r:?}");
            (s(&r[1]), s(&r[3]), s(&r[4]), f(&r[5]), f(&r[6]), f(&r[7]), f(&r[8]), r[9].as_f64(), f(&r[10]), r[11].as_bool().unwrap())
        })
        .collect()
}

#[test]
fn temperature_over_the_warning_threshold_with_a_throughput_drop_is_a_throttle_event_in_influx() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, DB);
    let now = wattflip_proto::units::UnixNanos::now().0;
    let t0 = (now / S) * S - 600 * S;

    // nvme0: 1000 MiB/s at 8 W, 60 °C; then 72.5 °C (warning 70) at +10 s, still 73 °C at +140 s
    // (the onset is settled: 2 minutes behind), and a run at +20 s of 850 MiB/s at 7 W.
    // nvme2: the same heat, but throughput only 9.9 % lower: never an event.
    // nvme1: its runs (1000 then 800 MiB/s at +20 s) arrive first; its temperatures later.
    let acked = stream(
        &collector,
        vec![
            batch(1, vec![run(0, t0, 1000.0, 8.0), run(2, t0, 1000.0, 8.0), run(1, t0, 1000.0, 8.0), run(1, t0 + 20 * S, 800.0, 8.0)], Vec::new()),
            batch(2, Vec::new(), vec![temp(0, t0 + 2 * S, 60.0), temp(2, t0 + 2 * S, 60.0)]),
            batch(3, vec![run(0, t0 + 20 * S, 850.0, 7.0), run(2, t0 + 20 * S, 901.0, 8.0)], vec![temp(0, t0 + 10 * S, 72.5), temp(2, t0 + 10 * S, 72.5)]),
            batch(4, Vec::new(), vec![temp(0, t0 + 140 * S, 73.0), temp(2, t0 + 140 * S, 73.0)]),
        ],
    );
    assert_eq!(acked, vec![1, 2, 3, 4]);
    // Acknowledged means stored: the episode, still ongoing, with both drops (8 → 7 W is 12.5 %),
    // lasting until the end of its last drop so far.
    let ongoing = ("nvme0".to_string(), "throughput+power".to_string(), "SW/131072".to_string(), 72.5, 70.0, 80.0, 15.0, Some(12.5), 11.0, true);
    assert_eq!(events(&influx), vec![ongoing], "collector log:\n{}", collector.log());

    // The agent reconnects; nvme0 cools below the warning threshold at t0 + 160 s: the episode
    // ends, rewritten in place with its duration. nvme1's temperatures arrive in this stream,
    // newest first: hot from +10 s to +30 s, settled by the reading at +150 s.
    let nvme1 = vec![temp(1, t0 + 150 * S, 60.0), temp(1, t0 + 30 * S, 65.0), temp(1, t0 + 10 * S, 75.0), temp(1, t0 + 2 * S, 60.0)];
    assert_eq!(stream(&collector, vec![batch(5, Vec::new(), [vec![temp(0, t0 + 160 * S, 65.0), temp(2, t0 + 160 * S, 65.0)], nvme1].concat())]), vec![5]);
    let closed = ("nvme0".to_string(), "throughput+power".to_string(), "SW/131072".to_string(), 72.5, 70.0, 80.0, 15.0, Some(12.5), 150.0, false);
    let runs_first = ("nvme1".to_string(), "throughput".to_string(), "SW/131072".to_string(), 75.0, 70.0, 80.0, 20.0, None, 20.0, false);
    assert_eq!(events(&influx), vec![closed, runs_first], "collector log:\n{}", collector.log());
    let rows = influx.rows(DB, &format!("SELECT count(mib_per_s) FROM probe_run WHERE host = '{HOST}'"));
    assert_eq!(rows[0][1].as_i64(), Some(6), "the runs themselves are stored too");
}
