//! The fleet's seeded efficiency probes (`device_efficiency`, docs/efficiency.md), written by
//! `fleet::seed` as line protocol the way the agent's `efficiency.lp` is loaded, for the
//! device-efficiency dashboard's checks (`e2e/dashboards.rs`). A new seeded phase is a row of
//! [`SEED_EFFICIENCY`].

use crate::fleet::{HOSTS, SEED_NAMESPACE};
use wattflip_proto::schema::{device_efficiency_point, EfficiencyPhase, HostTags};

/// Efficiency probes (`device_efficiency`, written as the agent's `efficiency.lp` is loaded):
/// (host index, s after `t0`, model, firmware, profile, verdict, metrics). Host 1's drive (model A,
/// firmware 1.0) and host 2's (model B, firmware 2.1); host 2's random-write phase found no stable
/// interval and carries no metric, only its stability figures.
pub type SeedEfficiency = (usize, i64, &'static str, &'static str, &'static str, &'static str, &'static [(&'static str, f64)]);
pub const SEED_EFFICIENCY: [SeedEfficiency; 6] = [
    (0, 2, "SEED-EFF-A", "1.0", "ready_idle", "stable", &[("watts", 4.8), ("watts_per_tb", 1.25), ("gb_per_watt", 800.0)]),
    (
        0,
        3,
        "SEED-EFF-A",
        "1.0",
        "rand_read_4k",
        "stable",
        &[
            ("iops", 180_000.0),
            ("mib_per_s", 703.125),
            ("watts", 9.6),
            ("iops_per_watt", 18_750.0),
            ("mib_per_s_per_watt", 73.2421875),
            ("joules_per_io", 9.6 / 180_000.0),
            ("joules_per_mib", 9.6 / 703.125),
        ],
    ),
    (
        0,
        4,
        "SEED-EFF-A",
        "1.0",
        "seq_read_128k",
        "stable",
        &[
            ("iops", 24_000.0),
            ("mib_per_s", 3000.0),
            ("watts", 12.0),
            ("iops_per_watt", 2000.0),
            ("mib_per_s_per_watt", 250.0),
            ("joules_per_io", 0.0005),
            ("joules_per_mib", 0.004),
        ],
    ),
    (1, 2, "SEED-EFF-B", "2.1", "ready_idle", "stable", &[("watts", 6.0), ("watts_per_tb", 1.5625), ("gb_per_watt", 640.0)]),
    (
        1,
        3,
        "SEED-EFF-B",
        "2.1",
        "rand_read_4k",
        "stable",
        &[
            ("iops", 120_000.0),
            ("mib_per_s", 468.75),
            ("watts", 10.0),
            ("iops_per_watt", 12_000.0),
            ("mib_per_s_per_watt", 46.875),
            ("joules_per_io", 10.0 / 120_000.0),
            ("joules_per_mib", 10.0 / 468.75),
        ],
    ),
    (1, 4, "SEED-EFF-B", "2.1", "rand_write_4k", "unstable", &[]),
];

/// The seeded efficiency phases as points (the agent's schema function).
pub fn points(t0: i64) -> Vec<wattflip_proto::lineproto::Point> {
    SEED_EFFICIENCY
        .iter()
        .map(|&(h, s, model, firmware, profile, verdict, metrics)| {
            let (host, rack) = HOSTS[h];
            let tags = HostTags { host: host.into(), labels: [("rack".to_string(), rack.to_string())].into() };
            let stable = verdict == "stable";
            let e = EfficiencyPhase {
                time_ns: t0 + s * 1_000_000_000,
                device: SEED_NAMESPACE.into(),
                model: model.into(),
                firmware: firmware.into(),
                serial: format!("SER-{h}"),
                profile: profile.into(),
                verdict: verdict.into(),
                energy_source: "hwmon:ina226-0-0040/power1".into(),
                probe_id: t0.to_string(),
                windows: if stable { 10 } else { 120 },
                interval_s: stable.then_some(10.0),
                max_deviation: Some(if stable { 0.01 } else { 0.031 }),
                trend_change: Some(if stable { 0.002 } else { -0.064 }),
                metrics: metrics.to_vec(),
                power_state: None,
            };
            device_efficiency_point(&e, &tags)
        })
        .collect()
}
