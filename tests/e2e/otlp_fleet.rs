//! The known fleet of the OTLP tests (`otlp.rs`, `otlp_outage.rs`): hosts, zones and values by
//! hand, and a stream of it through the collector as agents send it (a `run` Hello listing the
//! host's power sources, then one window batch per bucket, each acknowledged before the next).
//! A new check of the fleet goes in `otlp.rs`; new data here, with its sums by hand.

use std::time::Duration;
use tokio_stream::StreamExt as _;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, AgentMessage};

pub const BUCKETS: usize = 6;
pub const BUCKET_NS: i64 = 10_000_000_000;

pub struct Zone {
    pub source: &'static str,
    pub zone: &'static str,
    pub scope: &'static str,
    /// A counter source: its window points carry joules (watts × 10 s) and a 10 s interval.
    pub counter: bool,
    pub watts: [f64; BUCKETS],
}

const fn z(source: &'static str, zone: &'static str, scope: &'static str, counter: bool, watts: [f64; BUCKETS]) -> Zone {
    Zone { source, zone, scope, counter, watts }
}

/// (agent id, rack, zones, has the drive extras: temperatures, SMART, inventory, a probe run).
pub fn fleet() -> Vec<(&'static str, &'static str, Vec<Zone>, bool)> {
    vec![
        (
            "otlp-rapl",
            "ra",
            vec![
                z("rapl", "psys", "psys", true, [90.0, 95.0, 130.0, 92.0, 91.0, 90.0]),
                z("rapl", "package-0", "package", true, [60.0; BUCKETS]),
                z("nvme_estimate", "nvme0", "drive", false, [8.25, 8.25, 8.25, 4.5, 8.25, 8.25]),
            ],
            false,
        ),
        (
            "otlp-wall",
            "ra",
            vec![z("ipmi", "dcmi", "wall", false, [300.0, 340.0, 310.0, 305.0, 320.0, 302.0]), z("rapl", "package-0", "package", true, [80.0; BUCKETS])],
            false,
        ),
        (
            "otlp-pkg",
            "rb",
            vec![
                z("rapl", "package-0", "package", true, [40.0, 45.5, 41.0, 40.0, 60.25, 40.0]),
                z("rapl", "package-0/dram", "dram", true, [6.0, 6.0, 6.5, 6.0, 6.0, 6.0]),
            ],
            true,
        ),
    ]
}

/// Host power by hand: psys + the drive estimate (package is inside psys); the wall meter alone;
/// package + DRAM.
pub const HOST_POWER: [(&str, [f64; BUCKETS]); 3] = [
    ("otlp-rapl", [98.25, 103.25, 138.25, 96.5, 99.25, 98.25]),
    ("otlp-wall", [300.0, 340.0, 310.0, 305.0, 320.0, 302.0]),
    ("otlp-pkg", [46.0, 51.5, 47.5, 46.0, 66.25, 46.0]),
];

/// The drive's composite temperature per bucket (otlp-pkg).
pub const TEMPS: [f64; BUCKETS] = [40.5, 41.0, 41.5, 42.0, 42.5, 43.0];

/// Ten minutes ago, on a 10 s boundary: recent enough for Prometheus's head block.
pub fn fleet_t0() -> i64 {
    let now = wattflip_e2e::fleet::now_ns();
    now - now.rem_euclid(BUCKET_NS) - 60 * BUCKET_NS
}

pub fn run_hello(host: &str, rack: &str, zones: &[Zone], extras: bool, t: i64) -> AgentMessage {
    let power_sources = zones
        .iter()
        .map(|z| v1::PowerSource {
            source: z.source.into(),
            zone: z.zone.into(),
            scope: z.scope.into(),
            method: if z.source == "nvme_estimate" { v1::Method::Estimated } else { v1::Method::Measured } as i32,
            counter: z.counter,
            path: format!("/sys/fixture/{}", z.zone),
            enabled: true,
            ..Default::default()
        })
        .collect();
    let storage_devices = if extras {
        vec![v1::StorageDevice {
            name: "nvme0n1".into(),
            model: "WF TEST SSD".into(),
            serial: "S123".into(),
            firmware: "1.0".into(),
            capacity_bytes: Some(1_000_204_886_016),
            logical_block_size: Some(512),
            transport: "nvme".into(),
            rotational: Some(false),
            controller: "nvme0".into(),
            ..Default::default()
        }]
    } else {
        vec![]
    };
    AgentMessage {
        kind: Some(Kind::Hello(v1::Hello {
            agent_id: host.into(),
            hostname: host.into(),
            agent_version: env!("CARGO_PKG_VERSION").into(),
            protocol_version: wattflip_proto::PROTOCOL_VERSION,
            labels: [("rack".to_string(), rack.to_string())].into(),
            inventory: Some(v1::Inventory { power_sources, storage_devices, ..Default::default() }),
            time_ns: t,
            session: "run".into(),
            stream_epoch: 7,
        })),
    }
}

/// One point per zone 1 s into bucket `k`; with the extras, the drive's temperature, and in
/// bucket 0 its SMART log, in bucket 2 a probe run; in bucket 2 of a psys zone, five full-rate
/// points at 900 W that no OTLP series may show.
pub fn window_batch(host: &str, zones: &[Zone], extras: bool, t0: i64, k: usize) -> AgentMessage {
    let t = t0 + k as i64 * BUCKET_NS + 1_000_000_000;
    let mut power: Vec<v1::PowerSample> = zones
        .iter()
        .map(|z| v1::PowerSample {
            time_ns: t,
            source: z.source.into(),
            zone: z.zone.into(),
            scope: z.scope.into(),
            method: if z.source == "nvme_estimate" { v1::Method::Estimated } else { v1::Method::Measured } as i32,
            watts: Some(z.watts[k]),
            joules: z.counter.then_some(z.watts[k] * 10.0),
            interval_ns: if z.counter { BUCKET_NS } else { 0 },
            ..Default::default()
        })
        .collect();
    if k == 2 && zones.iter().any(|z| z.zone == "psys") {
        power.extend((0..5).map(|i| v1::PowerSample {
            time_ns: t + 1_000_000_000 + i * 10_000_000,
            source: "rapl".into(),
            zone: "psys".into(),
            scope: "psys".into(),
            method: v1::Method::Measured as i32,
            watts: Some(900.0),
            interval_ns: 10_000_000,
            full_rate: true,
            ..Default::default()
        }));
    }
    let mut b = v1::Batch { agent_id: host.into(), sequence: k as u64 + 1, power, ..Default::default() };
    if extras {
        b.temperature =
            vec![v1::TemperatureSample { time_ns: t, source: "nvme_cli".into(), device: "nvme0".into(), sensor: "Composite".into(), celsius: TEMPS[k] }];
        if k == 0 {
            b.nvme_smart = vec![v1::NvmeSmart {
                time_ns: t,
                device: "nvme0".into(),
                serial: "S123".into(),
                critical_warning: 0,
                percentage_used: Some(3),
                power_on_hours: Some(1200),
                media_errors: Some(0),
                ..Default::default()
            }];
        }
        if k == 2 {
            b.probe_runs = vec![v1::ProbeRun {
                run_id: format!("{t}-0"),
                device: "nvme0n1".into(),
                model: "WF TEST SSD".into(),
                bench: "granularity".into(),
                experiment: "granularity/SW".into(),
                pattern: "SW".into(),
                varying: "io_size".into(),
                value: 131_072.0,
                start_ns: t,
                end_ns: t + 500_000_000,
                io_count: 2048,
                io_size_bytes: 131_072,
                mib_per_s: 512.0,
                energy_j: Some(12.5),
                background_energy_j: Some(0.75),
                j_per_mib: Some(0.046875),
                // Each energy figure's 95 % half-width goes out beside it (binary fractions, exact).
                energy_u95_j: Some(0.5),
                background_energy_u95_j: Some(0.125),
                j_per_mib_u95: Some(0.001953125),
                energy_source: "rapl:package-0".into(),
                background_class: "S".into(),
                ..Default::default()
            }];
        }
    }
    AgentMessage { kind: Some(Kind::Batch(b)) }
}

/// The fleet through the collector at `url`: every host's run stream, buckets in order, each
/// batch acknowledged (within 20 s) before the next.
pub fn stream(url: &str, t0: i64) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for (host, rack, zones, extras) in fleet() {
            let identity = pki().issue(&format!("otlp-{host}"), &[host], None);
            let channel = pki().channel(url, Some(identity)).await.expect("connect to the collector");
            let mut client = v1::ingest_client::IngestClient::new(channel);
            let (tx, rx) = tokio::sync::mpsc::channel(16);
            tx.send(run_hello(host, rack, &zones, extras, t0)).await.unwrap();
            let mut acks = client.stream(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("open the run stream").into_inner();
            for k in 0..BUCKETS {
                tx.send(window_batch(host, &zones, extras, t0, k)).await.unwrap();
                let ack = tokio::time::timeout(Duration::from_secs(20), acks.next()).await.expect("ack within 20 s");
                assert_eq!(ack.expect("a reply").expect("no error").durable_sequence, k as u64 + 1, "{host} bucket {k}");
            }
        }
    });
}
