//! Writes the `ingest_message` seed corpus: one Hello and batches with every kind of payload, as
//! the agent encodes them. `cargo run --example seeds -- corpus/ingest_message` (from tests/fuzz).

use prost::Message;
use std::path::PathBuf;
use wattflip_proto::v1::{self, agent_message::Kind, AgentMessage};

const T: i64 = 1_764_000_000_000_000_000;

fn main() {
    let dir = PathBuf::from(std::env::args().nth(1).expect("usage: seeds DIR"));
    std::fs::create_dir_all(&dir).expect("create the corpus folder");
    let hello = v1::Hello {
        agent_id: "node-1".into(),
        hostname: "node-1.rack7".into(),
        agent_version: "0.1.0".into(),
        protocol_version: 1,
        labels: [("rack".into(), "r7".into()), ("role".into(), "storage".into())].into(),
        inventory: Some(v1::Inventory {
            storage_devices: vec![v1::StorageDevice {
                name: "nvme0n1".into(),
                model: "QEMU NVMe Ctrl".into(),
                serial: "wf-serial-1".into(),
                firmware: "8.0.0".into(),
                capacity_bytes: Some(1 << 30),
                logical_block_size: Some(512),
                rotational: Some(false),
                transport: "nvme".into(),
                power_states: vec![v1::PowerStateDescriptor { state: 0, max_watts: 25.0, operational: true, ..Default::default() }],
                controller: "nvme0".into(),
                ..Default::default()
            }],
            power_sources: vec![v1::PowerSource {
                source: "rapl".into(),
                zone: "package-0".into(),
                scope: "package".into(),
                method: v1::Method::Measured as i32,
                counter: true,
                enabled: true,
                ..Default::default()
            }],
            temperature_sensors: vec![v1::TemperatureSensor { source: "hwmon".into(), device: "nvme0".into(), sensor: "Composite".into(), path: "/sys/class/hwmon/hwmon1".into() }],
            drive_thermal_limits: vec![v1::DriveThermalLimits { device: "nvme0".into(), serial: "wf-serial-1".into(), warning_celsius: 70.0, critical_celsius: 85.0, namespaces: vec!["nvme0n1".into()] }],
        }),
        time_ns: T,
        session: "run".into(),
        stream_epoch: 1,
    };
    let power = v1::Batch {
        agent_id: "node-1".into(),
        sequence: 1,
        power: vec![v1::PowerSample {
            time_ns: T,
            source: "rapl".into(),
            zone: "package-0".into(),
            scope: "package".into(),
            method: v1::Method::Measured as i32,
            watts: Some(12.5),
            joules: Some(12.5),
            interval_ns: 1_000_000_000,
            min_watts: Some(11.0),
            max_watts: Some(14.0),
            readings: 10,
            full_rate: false,
            flags: Vec::new(),
            joules_total: Some(1250.0),
        }],
        temperature: vec![v1::TemperatureSample { time_ns: T, source: "nvme_cli".into(), device: "nvme0".into(), sensor: "Composite".into(), celsius: 50.0 }],
        joules_total_start_ns: T - 100_000_000_000,
        ..Default::default()
    };
    let probe = v1::Batch {
        agent_id: "node-1".into(),
        sequence: 2,
        probe_runs: vec![v1::ProbeRun {
            run_id: "r-1".into(),
            device: "nvme0n1".into(),
            model: "QEMU NVMe Ctrl".into(),
            serial: "wf-serial-1".into(),
            bench: "granularity".into(),
            experiment: "granularity/SR".into(),
            pattern: "SR".into(),
            varying: "io_size".into(),
            value: 4096.0,
            start_ns: T,
            end_ns: T + 1_000_000,
            io_count: 512,
            io_size_bytes: 4096,
            mean_us: 80.0,
            iops: 12000.0,
            mib_per_s: 46.9,
            parameters: [("io_shift".into(), "0".into())].into(),
            target_kind: "file".into(),
            energy_j: Some(2.0),
            background_class: "NS".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let drives = v1::Batch {
        agent_id: "node-1".into(),
        sequence: 3,
        power_state_changes: vec![v1::PowerStateChange {
            time_ns: T,
            device: "nvme0".into(),
            serial: "wf-serial-1".into(),
            from_state: 0,
            to_state: 1,
            outcome: v1::PowerStateOutcome::Refused as i32,
            detail: "status 0x410e".into(),
            ..Default::default()
        }],
        events: vec![v1::Event {
            time_ns: T,
            kind: "critical_warning".into(),
            severity: v1::Severity::Critical as i32,
            device: "nvme0".into(),
            message: "temperature above threshold".into(),
            attributes: [("bits".into(), "2".into())].into(),
        }],
        // The second record reads 0 where the drive printed 0 (a 0 on the wire) and leaves out
        // what it did not print: the encoders must write the one and omit the other.
        nvme_smart: vec![
            v1::NvmeSmart { time_ns: T, device: "nvme0".into(), serial: "wf-serial-1".into(), critical_warning: 2, composite_celsius: Some(50.0), ..Default::default() },
            v1::NvmeSmart {
                time_ns: T + 1,
                device: "nvme0".into(),
                serial: "wf-serial-1".into(),
                percentage_used: Some(0),
                data_units_read: Some(0),
                media_errors: Some(u64::MAX),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let seeds = [("hello", Kind::Hello(hello)), ("batch-power", Kind::Batch(power)), ("batch-probe", Kind::Batch(probe)), ("batch-drives", Kind::Batch(drives))];
    for (name, kind) in seeds {
        let bytes = AgentMessage { kind: Some(kind) }.encode_to_vec();
        std::fs::write(dir.join(name), bytes).expect("write a seed");
    }
}
