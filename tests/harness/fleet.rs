//! A small fleet filled end to end, for the dashboard and report tests: a private `influxd`, the
//! real collector, two real agents (`run`) on fixture sysfs trees whose RAPL counters a thread
//! advances in place, as the kernel presents them (the same file, rewritten; never replaced), at a
//! constant known power per zone ([`RAPL_WATTS`]), and a real `probe --quick --collector` on the
//! first host while the agents sample. The first host also has the hwmon tree (temperatures, an
//! ACPI power meter); the second is RAPL-only (no temperature at all). Then [`seed`] adds what no
//! producer in main writes yet.
//!
//! **Seed data** ([`seed`]): records that need hardware this machine lacks (a drive rail monitor,
//! an NVMe drive that takes power caps) are sent as the agent sends them, through the real
//! collector's gRPC ingest: per-run energy and background work on `probe_run`, `nvme_smart`,
//! `power_state`, governor-sweep runs and load ladders (from which the collector itself derives
//! `energy_proportionality` and `energy_proportionality_level`), the second host's drive power
//! estimate, and a stale third agent that reported once long before the run ([`STALE_HOST`]).
//! Only `throttle_event`, `source_agreement` and `device_efficiency` are written as line protocol
//! straight to InfluxDB, built by the collector's own schema functions (`wattflip_proto::schema::
//! throttle_event_point`, `source_agreement_point`, `device_efficiency_point`), since no fixture
//! makes a drive throttle, the cross-source check is not wired into ingest yet, and efficiency
//! reaches InfluxDB as the agent's `efficiency.lp` file.

use crate::*;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wattflip_proto::schema::{source_agreement_point, throttle_event_point, HostTags, ThrottleEvent};
use wattflip_proto::v1;

/// The fleet's hosts (agent id, `rack` label). The first one runs the probe.
pub const HOSTS: [(&str, &str); 2] = [("e2e-dash-1", "r7"), ("e2e-dash-2", "r8")];
/// A third agent that reported once, [`STALE_AGE_NS`] before the fleet started, and never again:
/// known to the fleet (its Hello and temperatures are stored) but not online, which is what the
/// fleet overview's "Agents online" must tell apart from the two live hosts.
pub const STALE_HOST: (&str, &str) = ("e2e-dash-stale", "r9");
pub const STALE_AGE_NS: i64 = 20 * 60 * 1_000_000_000;
/// The seeded NVMe drive of the first host: its controller (temperature, SMART, power states)
/// and namespace (probe runs), as the fixture's hwmon tree names them.
pub const SEED_CONTROLLER: &str = "nvme0";
pub const SEED_NAMESPACE: &str = "nvme0n1";
pub const SEED_MODEL: &str = "QEMU NVMe Ctrl";
/// A SATA disk of the first host whose power mode is seeded (standby, then active).
pub const SEED_POWER_MODE_DEVICE: &str = "sdb";
/// Granularity values and baseline patterns of the seeded energy runs.
pub const SEED_SIZES_KIB: [u64; 3] = [4, 32, 128];
pub const SEED_PATTERNS: [&str; 4] = ["SR", "RR", "SW", "RW"];
/// A second drive of the first host that only reports its temperature (no inventory, so no
/// warning threshold the throttle detector could compare against): [`SEED_TEMPERATURES`].
pub const SEED_TEMP_DEVICE: &str = "nvme1";
pub const SEED_TEMP_SENSOR: &str = "Composite";
/// Its readings: (ms after [`seed_bucket`], °C). Four in the first 10 s bucket whose first, last,
/// smallest, largest and mean values all differ (36, 37, 35, 38.5, 36.625), so a panel's
/// aggregation shows in its number; two in the next (max 34.5, the latest reading).
pub const SEED_TEMPERATURES: [(i64, f64); 6] = [(1_000, 36.0), (3_000, 38.5), (5_000, 35.0), (7_000, 37.0), (12_000, 33.0), (15_000, 34.5)];
/// Events the agents would send (host index into [`HOSTS`], s after the seed's `t0`, kind,
/// severity, device, message); the live fleet adds one of its own (the fixture's unreadable
/// acpitz sensor on the first host). Not `probe_unsupported`, which the HTML report counts.
pub const SEED_EVENTS: [(usize, i64, &str, v1::Severity, &str, &str); 2] = [
    (0, 4, "drive_disagreement", v1::Severity::Info, SEED_CONTROLLER, "nvme-cli and sysfs disagree on the composite temperature"),
    // As the agent's exporter words it (agent/src/export/grpc.rs); it names no device.
    (1, 9, "backlog_dropped", v1::Severity::Warning, "", "12 batch(es) dropped because the collector was unreachable and the spool or backlog was full"),
];

/// The truth of the fleet's RAPL power: per host (index into [`HOSTS`]), each zone of the
/// two-sockets fixture (directory, zone name as the agent tags it) and its constant power in W.
pub const RAPL_WATTS: [&[(&str, &str, u64)]; 2] = [
    &[
        ("intel-rapl:0", "package-0", 28),
        ("intel-rapl:0:0", "package-0/core", 17),
        ("intel-rapl:0:1", "package-0/dram", 4),
        ("intel-rapl:1", "package-1", 24),
        ("intel-rapl:1:0", "package-1/core", 14),
        ("intel-rapl:1:1", "package-1/dram", 3),
        ("intel-rapl:2", "psys", 80),
    ],
    &[
        ("intel-rapl:0", "package-0", 31),
        ("intel-rapl:0:0", "package-0/core", 19),
        ("intel-rapl:0:1", "package-0/dram", 5),
        ("intel-rapl:1", "package-1", 27),
        ("intel-rapl:1:0", "package-1/core", 16),
        ("intel-rapl:1:1", "package-1/dram", 4),
        ("intel-rapl:2", "psys", 90),
    ],
];
/// How often the counters move (the kernel's RAPL updates every ~1 ms; 10 ms keeps the writer
/// cheap on a loaded machine). A window of the agent's sees its power within two such periods.
pub const COUNTER_PERIOD: Duration = Duration::from_millis(10);

pub fn now_ns() -> i64 {
    wattflip_proto::units::UnixNanos::now().0
}

/// The filled fleet; everything stops on drop.
pub struct Fleet {
    pub influx: Influx,
    pub collector: Collector,
    pub db: String,
    /// The probe's result folder (report.html, report.json, …).
    pub probe_out: PathBuf,
    /// When the fleet started and when the seeds were written, UTC ns.
    pub started_ns: i64,
    pub ended_ns: i64,
    /// The seeds' time origin (`t0` of [`seed`], [`seed_runs`]), UTC ns.
    pub seed_t0: i64,
    _dirs: Vec<tempfile::TempDir>,
}

/// Advances every RAPL counter of `trees` (one per host, [`RAPL_WATTS`]) every [`COUNTER_PERIOD`]
/// until `stop`, in place: each `energy_uj` is opened once and rewritten at offset 0 (`pwrite`),
/// as the kernel's attribute keeps its inode, so an agent holding the file open sees every move.
/// The value is the zone's initial counter plus its power times the time elapsed, in µJ, so the
/// counters follow the truth exactly at each write whatever the writer's scheduling delays.
fn advance_counters(trees: Vec<PathBuf>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    use std::os::unix::fs::FileExt;
    let mut zones = Vec::new();
    for (powercap, watts) in trees.iter().zip(RAPL_WATTS) {
        for (dir, _, w) in watts {
            let path = powercap.join(dir).join("energy_uj");
            let start: u64 = std::fs::read_to_string(&path).expect("fixture counter").trim().parse().expect("integer counter");
            let file = std::fs::OpenOptions::new().write(true).open(&path).expect("open the fixture counter for writing");
            zones.push((file, start, *w));
        }
    }
    std::thread::spawn(move || {
        let t0 = std::time::Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let us = t0.elapsed().as_micros() as u64;
            for (file, start, w) in &zones {
                // The counters never reach max_energy_range_uj in a test (2.6e11 µJ): the value
                // only grows, so the rewritten text is never shorter than the old one.
                file.write_all_at(format!("{}\n", start + w * us).as_bytes(), 0).expect("write counter in place");
            }
            std::thread::sleep(COUNTER_PERIOD);
        }
    })
}

impl Fleet {
    /// Runs the fleet and the probe, stops the agents, then writes the seeds.
    pub fn start(db: &str) -> Fleet {
        let started_ns = now_ns();
        let influx = Influx::start();
        let collector = Collector::start(&influx.url, db);
        let mut dirs = Vec::new();
        let mut agents = Vec::new();
        let mut configs = Vec::new();
        // The counters move before any agent reads them: an interval of the agent's never sees a
        // counter that has not started yet.
        let roots: Vec<(tempfile::TempDir, PathBuf)> =
            (0..HOSTS.len()).map(|i| if i == 0 { sysfs_tree(&["two-sockets", "hwmon"]) } else { sysfs_tree(&["two-sockets"]) }).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let advancer = advance_counters(roots.iter().map(|(_, sys)| sys.join("class/powercap")).collect(), stop.clone());
        for ((host, rack), (tmp, sys)) in HOSTS.into_iter().zip(roots) {
            let cfg = agent_config(
                tmp.path(),
                &format!(
                    "agent_id = \"{host}\"\n[labels]\nrack = \"{rack}\"\n[collector]\nurl = \"{}\"\n\
                     [sampling]\ninterval = \"250ms\"\n[sources]\nsysfs_root = \"{}\"\n{}",
                    collector.url,
                    sys.display(),
                    pki().agent_tls(host)
                ),
            );
            // A fixed number of ticks (20 s), so each agent ends by itself once the collector has
            // acknowledged everything; the probe runs inside this window.
            agents.push(spawn_agent(tmp.path(), &["run", "--config", cfg.to_str().expect("utf-8 path"), "--samples", "80"]));
            configs.push(cfg);
            dirs.push(tmp);
        }

        // The real probe on the first host, streamed to the collector while the agents sample.
        let probe_dir = tempfile::Builder::new().prefix("wf-probe-").tempdir().expect("tempdir");
        let probe_out = probe_dir.path().join("out");
        let scratch = probe_dir.path().join("scratch.dat");
        // Every agent streams before the probe starts: its first power points are in InfluxDB.
        for (host, _) in HOSTS {
            let q = format!("SELECT count(watts) FROM power WHERE host = '{host}'");
            let streaming = wait_for(Duration::from_secs(30), || influx.try_rows(db, &q).filter(|r| !r.is_empty()));
            assert!(streaming.is_some(), "{host} sent no power point within 30 s:\n{}", collector.log());
        }
        let mut probe = spawn_agent(
            probe_dir.path(),
            &[
                "probe",
                "--quick",
                "--target",
                scratch.to_str().expect("utf-8 path"),
                "--out",
                probe_out.to_str().expect("utf-8 path"),
                "--collector",
                &collector.url,
                "--config",
                configs[0].to_str().expect("utf-8 path"),
            ],
        );
        let status = wait_child(&mut probe, Duration::from_secs(300), probe_dir.path());
        let err = std::fs::read_to_string(probe_dir.path().join("agent.stderr")).unwrap_or_default();
        assert!(status.success(), "probe --quick --collector failed:\n{err}\ncollector log:\n{}", collector.log());
        let _ = std::fs::remove_file(&scratch);
        for (agent, dir) in agents.iter_mut().zip(&dirs) {
            let status = wait_child(agent, Duration::from_secs(60), dir.path());
            let err = std::fs::read_to_string(dir.path().join("agent.stderr")).unwrap_or_default();
            assert!(status.success(), "agent run failed:\n{err}");
            assert!(err.contains("80 ticks"), "agent run did not sample 80 ticks:\n{err}");
        }
        stop.store(true, Ordering::Relaxed);
        advancer.join().expect("counter thread");
        dirs.push(probe_dir);
        let mut fleet = Fleet { influx, collector, db: db.to_string(), probe_out, started_ns, ended_ns: 0, seed_t0: 0, _dirs: dirs };
        fleet.seed_t0 = seed(&fleet);
        fleet.ended_ns = now_ns();
        fleet
    }
}

/// The seeded energy runs: (pattern, KiB, start ns, energy J, above idle J, background tail s).
/// Writes tail more (the paper's background work); SW's tail grows with the IO size.
pub fn seed_runs(t0: i64) -> Vec<(&'static str, u64, i64, f64, f64, f64)> {
    let mut out = Vec::new();
    for (p, pattern) in SEED_PATTERNS.iter().enumerate() {
        for (s, kib) in SEED_SIZES_KIB.iter().enumerate() {
            let start = t0 + ((p * SEED_SIZES_KIB.len() + s) as i64) * 1_000_000_000;
            let write = pattern.ends_with('W');
            let energy = 2.0 + 0.02 * *kib as f64 * if write { 2.5 } else { 1.0 };
            let tail = match *pattern {
                "SW" => 0.05 * *kib as f64 / 4.0,
                "RW" => 0.6,
                _ => 0.0,
            };
            out.push((*pattern, *kib, start, energy, energy * 0.6, tail));
        }
    }
    out
}

fn seeded_probe_run(pattern: &str, kib: u64, start: i64, energy: f64, above: f64, tail: f64) -> v1::ProbeRun {
    let io_count = 1024u64;
    let mean_us = if pattern.starts_with('S') { 20.0 } else { 90.0 } + 2.0 * kib as f64 + if pattern.ends_with('W') { 15.0 } else { 0.0 };
    let iops = 1e6 / mean_us;
    v1::ProbeRun {
        run_id: format!("seed-{pattern}-{kib}"),
        device: SEED_NAMESPACE.into(),
        model: SEED_MODEL.into(),
        serial: "WF-SERIAL-0001".into(),
        bench: "granularity".into(),
        experiment: format!("granularity/{pattern}"),
        pattern: pattern.into(),
        varying: "io_size".into(),
        value: (kib * 1024) as f64,
        repetition: 0,
        start_ns: start,
        end_ns: start + (io_count as f64 * mean_us * 1000.0) as i64,
        io_count,
        ignore_io: 32,
        io_size_bytes: kib * 1024,
        mean_us,
        min_us: mean_us * 0.8,
        max_us: mean_us * 4.0,
        stddev_us: mean_us * 0.1,
        p50_us: mean_us,
        p95_us: mean_us * 1.5,
        p99_us: mean_us * 2.0,
        iops,
        mib_per_s: iops * kib as f64 / 1024.0,
        target_kind: "block".into(),
        energy_j: Some(energy),
        energy_above_idle_j: Some(above),
        // Half-widths the dashboards bracket the energies with: 4 % and 5 %.
        energy_u95_j: Some(0.04 * energy),
        energy_above_idle_u95_j: Some(0.05 * above),
        background_s: Some(tail),
        background_energy_j: Some(if tail > 0.0 { energy * 0.1 } else { 0.0 }),
        background_class: match pattern {
            "SW" => "GWP",
            "RW" => "S",
            _ => "None",
        }
        .into(),
        energy_source: "hwmon:ina3221/SSD 12V".into(),
        ..Default::default()
    }
}

/// The start of the first whole 10 s bucket (Grafana's `$__interval` in the dashboard test) at or
/// after `t0`: [`SEED_TEMPERATURES`] are placed from there, so their buckets are known.
pub fn seed_bucket(t0: i64) -> i64 {
    const BUCKET: i64 = 10_000_000_000;
    (t0 + BUCKET - 1).div_euclid(BUCKET) * BUCKET
}

/// Writes every seed (see the module comment): first through the collector, then line protocol.
/// Returns the seeds' time origin `t0`.
pub fn seed(fleet: &Fleet) -> i64 {
    let (host, rack) = HOSTS[0];
    let t0 = now_ns() - 40_000_000_000;
    let runs = seed_runs(t0);

    // 1. Through the real collector: the wire format carries these already.
    let mut batch = v1::Batch { agent_id: host.into(), sequence: 1, ..Default::default() };
    for &(pattern, kib, start, energy, above, tail) in &runs {
        batch.probe_runs.push(seeded_probe_run(pattern, kib, start, energy, above, tail));
    }
    for i in 0..4u64 {
        batch.nvme_smart.push(v1::NvmeSmart {
            time_ns: t0 + i as i64 * 5_000_000_000,
            device: SEED_CONTROLLER.into(),
            serial: "WF-SERIAL-0001".into(),
            composite_celsius: Some(70.0 + 6.0 * i as f64),
            percentage_used: Some(3),
            data_units_read: Some(1_000 + i),
            data_units_written: Some(2_000 + 10 * i),
            warning_temp_time_min: Some(i.saturating_sub(1)),
            thm_temp1_trans_count: Some(i),
            thm_temp2_trans_count: Some(i / 2),
            thm_temp1_total_time_s: Some(4 * i),
            power_on_hours: Some(1200),
            ..Default::default()
        });
    }
    for (i, (from, to, observed, outcome, detail)) in [
        (0, 2, 2, v1::PowerStateOutcome::Applied, "governor sweep: state 2 (8 W cap) set and read back"),
        (2, 0, 0, v1::PowerStateOutcome::Restored, "restore guard: original state 0 put back"),
    ]
    .into_iter()
    .enumerate()
    {
        batch.power_state_changes.push(v1::PowerStateChange {
            time_ns: t0 + 3_000_000_000 + i as i64 * 20_000_000_000,
            device: SEED_CONTROLLER.into(),
            serial: "WF-SERIAL-0001".into(),
            from_state: from,
            to_state: to,
            observed_state: observed,
            outcome: outcome as i32,
            detail: detail.into(),
        });
    }
    for (ms, celsius) in SEED_TEMPERATURES {
        batch.temperature.push(v1::TemperatureSample {
            time_ns: seed_bucket(t0) + ms * 1_000_000,
            source: "nvme".into(),
            device: SEED_TEMP_DEVICE.into(),
            sensor: SEED_TEMP_SENSOR.into(),
            celsius,
        });
    }
    // A SATA disk of the first host that spun down: smartctl's `-n standby` left it asleep (a
    // `drive_power_mode` point, skipped), then it was read awake.
    for (i, (mode, skipped)) in [("standby", true), ("active", false)].into_iter().enumerate() {
        batch.drive_power_modes.push(v1::DrivePowerMode {
            time_ns: t0 + 1_000_000_000 + i as i64 * 10_000_000_000,
            device: SEED_POWER_MODE_DEVICE.into(),
            serial: "WF-SATA-0001".into(),
            mode: mode.into(),
            skipped,
        });
    }
    send_through_collector(&fleet.collector.url, host, rack, batch);

    // 2. The governor sweep and load ladders, as the agent's `governor sweep` and `probe --ladder`
    //    send them; the collector derives `energy_proportionality(_level)` from the ladders.
    let mut batch = v1::Batch { agent_id: host.into(), sequence: 2, ..Default::default() };
    for (state, watts, seq, rand) in [(0u8, 18.5, 2000.0, 410.0), (1, 15.2, 1250.0, 405.0), (2, 8.9, 600.0, 398.0)] {
        for (pattern, size, mibs) in [("SW", "128KiB", seq), ("RR", "4KiB", rand)] {
            let start = t0 + 20_000_000_000 + i64::from(state) * 2_000_000_000 + i64::from(pattern == "RR") * 1_000_000_000;
            let w = if pattern == "RR" { watts * 0.7 } else { watts };
            batch.probe_runs.push(v1::ProbeRun {
                run_id: format!("{t0}-sweep-{state}-{pattern}"),
                device: SEED_NAMESPACE.into(),
                model: SEED_MODEL.into(),
                bench: "governor_sweep".into(),
                experiment: format!("governor_sweep/{pattern}:{size}"),
                pattern: pattern.into(),
                varying: "power_state".into(),
                value: f64::from(state),
                start_ns: start,
                end_ns: start + 500_000_000,
                io_count: 1000,
                io_size_bytes: if pattern == "RR" { 4096 } else { 131_072 },
                mib_per_s: mibs,
                iops: mibs * 1024.0 / if pattern == "RR" { 4.0 } else { 128.0 },
                mean_us: if pattern == "RR" { 95.0 } else { 62.0 },
                energy_j: Some(w * 0.5),
                energy_source: "hwmon:ina3221/SSD 12V".into(),
                // As a real sweep sends them (agent/src/probes/power_sweep.rs).
                power_state: Some(u32::from(state)),
                power_w: Some(w),
                ..Default::default()
            });
        }
    }
    // Load ladders: two on the drive rail, and one measured on the host's psys.
    let (idle, peak) = (3.1, 11.6);
    // The rail ladders are one random (RR: the collector derives IOPS/W) and one sequential (SW:
    // MiB/s per W), so every efficiency column of the dashboards has data.
    for (k, (pattern, scope, offset)) in [("RR", "rail", 0.0), ("SW", "rail", 0.0), ("RR", "psys", 90.0)].into_iter().enumerate() {
        let bump = if pattern == "SW" { 0.08 } else { 0.0 };
        for (i, level) in (10..=100).step_by(10).enumerate() {
            let u = f64::from(level) / 100.0;
            // Sub-linear power: most of the dynamic range is spent at low load.
            let p = idle / peak + (1.0 - idle / peak) * u.sqrt() + bump * u * (1.0 - u);
            let start = t0 + 1_000_000_000 * (k as i64 * 12 + i as i64);
            batch.probe_runs.push(v1::ProbeRun {
                run_id: format!("{}-{i}", t0 + k as i64),
                device: SEED_NAMESPACE.into(),
                model: SEED_MODEL.into(),
                bench: "load_ladder".into(),
                experiment: format!("load_ladder/{pattern}"),
                pattern: pattern.into(),
                varying: "load_pct".into(),
                value: f64::from(level),
                start_ns: start,
                end_ns: start + 500_000_000,
                io_count: 100,
                io_size_bytes: 4096,
                mean_us: 120.0,
                iops: 400.0 * u,
                mib_per_s: 1.6 * u,
                energy_j: Some((p * peak + offset) * 0.5),
                idle_baseline_w: Some(idle + offset),
                energy_source: format!("rapl-or-hwmon:{scope}"),
                parameters: [("energy_scope".to_string(), scope.to_string())].into(),
                ..Default::default()
            });
        }
    }
    send_through_collector_seq(&fleet.collector.url, host, rack, batch, 2);

    // 2b. Drive power of the second host's NVMe controller, as the agent's `nvme_estimate` source
    //     sends it (the PSD maximum power of the current state, every 10 s, scope `drive`, zone =
    //     the controller): on the second host so the first host's power channels stay those of
    //     its fixture.
    let (host2, rack2) = HOSTS[1];
    let mut batch = v1::Batch { agent_id: host2.into(), sequence: 1, ..Default::default() };
    for i in 0..4 {
        batch.power.push(v1::PowerSample {
            time_ns: t0 + i * 10_000_000_000,
            source: "nvme_estimate".into(),
            zone: SEED_CONTROLLER.into(),
            scope: "drive".into(),
            method: v1::Method::Estimated as i32,
            watts: Some(if i == 2 { 4.6 } else { 8.25 }),
            ..Default::default()
        });
    }
    send_through_collector(&fleet.collector.url, host2, rack2, batch);

    // 2c. The stale agent: its Hello and three temperature samples (1 s apart), all from
    //     STALE_AGE_NS before the fleet started, as an agent that has since gone away sent them.
    let (stale, stale_rack) = STALE_HOST;
    let stale_t = fleet.started_ns - STALE_AGE_NS;
    let mut batch = v1::Batch { agent_id: stale.into(), sequence: 1, ..Default::default() };
    for i in 0..3 {
        batch.temperature.push(v1::TemperatureSample {
            time_ns: stale_t + i * 1_000_000_000,
            source: "hwmon".into(),
            device: SEED_CONTROLLER.into(),
            sensor: "Composite".into(),
            celsius: 41.0,
        });
    }
    send_as(&fleet.collector.url, stale, stale_rack, stale_t, batch, 1, "run");

    // 2d. Events, per host as its agent sends them.
    for (i, (host, rack)) in HOSTS.iter().enumerate() {
        // After the batches above: host 1 has sent sequences 1 and 2, host 2 sequence 1.
        let seq = if i == 0 { 3 } else { 2 };
        let mut batch = v1::Batch { agent_id: host.to_string(), sequence: seq, ..Default::default() };
        for (_, s, kind, severity, device, message) in SEED_EVENTS.iter().filter(|e| e.0 == i) {
            batch.events.push(v1::Event {
                time_ns: t0 + s * 1_000_000_000,
                kind: kind.to_string(),
                severity: *severity as i32,
                device: device.to_string(),
                message: message.to_string(),
                attributes: Default::default(),
            });
        }
        send_through_collector_seq(&fleet.collector.url, host, rack, batch, seq);
    }

    // 3. Line protocol straight to InfluxDB: the fixtures cannot make a drive throttle, so this one
    //    measurement is seeded. The point comes from the collector's own schema function, so a
    //    change of the `throttle_event` schema changes the seed too and the dashboards must follow.
    let event = ThrottleEvent {
        time_ns: t0 + 15_000_000_000,
        device: SEED_CONTROLLER.into(),
        trigger: "temperature".into(),
        signal: "throughput+power".into(),
        pattern: "SW/131072".into(),
        onset_celsius: Some(82.0),
        warning_celsius: Some(70.0),
        critical_celsius: None,
        throughput_drop_pct: Some(16.5),
        power_drop_pct: Some(14.0),
        duration_s: 12.0,
        ongoing: false,
    };
    let tags = HostTags { host: host.into(), labels: [("rack".to_string(), rack.to_string())].into() };
    let mut pts = vec![throttle_event_point(&event, &tags)];
    // Cross-source checks of the first host (the collector's `sources` module computes them once
    // wired into ingest): PSU efficiency over two windows, the second outside its band.
    for (i, ratio) in [0.88, 0.99].into_iter().enumerate() {
        pts.push(source_agreement_point(&tags, t0 + (10 + 10 * i as i64) * 1_000_000_000, "psu_efficiency", ratio, (0.80, 0.97)));
    }
    pts.extend(crate::fleet_efficiency::points(t0));
    let (body, errs) = wattflip_proto::lineproto::encode_all(&pts);
    assert!(errs.is_empty(), "seed line protocol: {errs:?}");
    let resp = reqwest::blocking::Client::new()
        .post(format!("{}/write", fleet.influx.url))
        .query(&[("db", fleet.db.as_str()), ("precision", "n")])
        .body(body)
        .send()
        .expect("write seed line protocol");
    let status = resp.status().as_u16();
    assert_eq!(status, 204, "seed line protocol refused: {}", resp.text().unwrap_or_default());
    t0
}

/// Sends one batch as `host` (with its labels, so the points get the same tags as the real
/// agent's) and waits for the collector's acknowledgement, which means stored.
pub fn send_through_collector(url: &str, host: &str, rack: &str, batch: v1::Batch) {
    send_through_collector_seq(url, host, rack, batch, 1)
}

fn send_through_collector_seq(url: &str, host: &str, rack: &str, batch: v1::Batch, seq: u64) {
    // The seeds stand for one-off commands (a governor sweep, a probe): their Hello has no
    // inventory and must not hide the run Hello's.
    send_as(url, host, rack, now_ns(), batch, seq, "probe")
}

/// The Hello of agent `host` with label `rack`, stamped `hello_ns` (the `agent` point's time).
pub fn hello(host: &str, rack: &str, hello_ns: i64, session: &str) -> v1::Hello {
    v1::Hello {
        agent_id: host.into(),
        hostname: host.into(),
        agent_version: env!("CARGO_PKG_VERSION").into(),
        protocol_version: wattflip_proto::PROTOCOL_VERSION,
        labels: [("rack".to_string(), rack.to_string())].into(),
        time_ns: hello_ns,
        session: session.into(),
        ..Default::default()
    }
}

/// Like [`send_through_collector`], with the Hello stamped `hello_ns` (the `agent` point's time).
fn send_as(url: &str, host: &str, rack: &str, hello_ns: i64, batch: v1::Batch, seq: u64, session: &str) {
    use tokio_stream::StreamExt as _;
    use v1::agent_message::Kind;
    let hello = hello(host, rack, hello_ns, session);
    let msgs = vec![v1::AgentMessage { kind: Some(Kind::Hello(hello)) }, v1::AgentMessage { kind: Some(Kind::Batch(batch)) }];
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    rt.block_on(async {
        let identity = pki().issue(&format!("seed-{host}"), &[host], None);
        let channel = pki().channel(url, Some(identity)).await.expect("connect to the collector");
        let mut client = v1::ingest_client::IngestClient::new(channel);
        let mut acks = client.stream(tokio_stream::iter(msgs)).await.expect("open the ingest stream").into_inner();
        let ack = tokio::time::timeout(Duration::from_secs(20), acks.next()).await.expect("ack within 20 s");
        assert_eq!(ack.expect("a reply").expect("no error").durable_sequence, seq, "seed batch acknowledged");
    });
}
