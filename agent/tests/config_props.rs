//! Property test of the agent's config parser (issue 38): every key set to every hostile value of
//! `wattflip_infra::edge` (huge, negative and malformed durations, integer and float edges, NaN,
//! long strings, wrong types), and random combinations of them, never panics, and every duration
//! in a config that is accepted lies within a century, so none can overflow `Instant + Duration`.
//! A new key goes into [`KEYS`].

use std::path::Path;
use std::time::Duration;
use wattflip_agent::config::Config;
use wattflip_agent::export::spool::SyncPolicy;
use wattflip_infra::edge;

/// Every key of the agent config, dotted (`probes[0].x`: a key of the first `[[probes]]`).
const KEYS: &[&str] = &[
    "agent_id",
    "hostname",
    "labels.site",
    "labels",
    "collector.url",
    "collector.urls",
    "collector.server_name",
    "collector.connect_timeout",
    "collector.backoff_initial",
    "collector.backoff_max",
    "sampling.interval",
    "sampling.power_interval",
    "sampling.recheck_interval",
    "sampling.power_intervals.rapl",
    "sampling.power_intervals.hwmon",
    "sampling.power_intervals.ipmi",
    "sampling.power_intervals.nvme_estimate",
    "sources.sysfs_root",
    "sources.rapl",
    "sources.hwmon",
    "sources.ipmi",
    "sources.ipmitool",
    "sources.command_timeout",
    "buffer.max_batches",
    "metrics.listen",
    "spool.dir",
    "spool.max_bytes",
    "spool.segment_bytes",
    "spool.sync",
    "drives.nvme_cli",
    "drives.smartctl",
    "drives.nvme_path",
    "drives.smartctl_path",
    "drives.timeout",
    "drives.smart_interval",
    "drives.smart_nocheck",
    "drives.smart_workers",
    "drives.state_dir",
    "drives.destroy_consent",
    "drives.sweep_patterns",
    "drives.sweep_settle",
    "drives.io_deadline_floor",
    "probes[0].name",
    "probes[0].schedule",
    "probes[0].jitter",
    "probes[0].target",
    "probes[0].size",
    "probes[0].bench",
    "probes[0].quick",
    "probes[0].repetitions",
    "probes[0].format",
    "probes[0].seed",
    "probes[0].destroy_consent",
    "probes[0].keep_results",
    "probes[0].out",
    "probes[0].read_only",
    "probes[0].values",
    "probes[0].power",
    "probes[0].power_interval",
    "probes[0].idle",
    "probes[0].tail",
    "probes[0].power_zone",
    "probes[0].energy_target",
    "probes[0].energy_budget",
    "probes[0].io_sizes",
    "probes[0].io_shifts",
    "probes[0].target_size_ios",
    "probes[0].partitions",
    "probes[0].orders",
    "probes[0].parallel_degrees",
    "probes[0].mix_ratios",
    "probes[0].pause_io_us",
    "probes[0].burst_io",
    "probes[0].io_count",
    "probes[0].io_count.SR",
    "probes[0].ignore_io",
    "probes[0].ignore_io.RW",
    "tls.insecure_plaintext_loopback_only",
    "tls.ca_file",
];

/// A valid config that reaches every check: plaintext on loopback, a spool, one scheduled probe.
const BASE: &str = "[tls]\ninsecure_plaintext_loopback_only = true\n[spool]\ndir = \"/nonexistent/wattflip-props/spool\"\n\
                    [[probes]]\nschedule = \"0 0 3 * * *\"\ntarget = \"/nonexistent/wattflip-props/scratch\"\n";

fn durations(c: &Config) -> Vec<(String, Duration)> {
    let mut d = vec![
        ("sampling.interval".to_string(), c.sampling_interval),
        ("sampling.power_interval".into(), c.power_interval),
        ("sources.command_timeout".into(), c.kinds.command_timeout),
        ("sampling.recheck_interval".into(), c.kinds.recheck),
        ("collector.connect_timeout".into(), c.collector.connect_timeout),
        ("collector.backoff_initial".into(), c.collector.backoff_initial),
        ("collector.backoff_max".into(), c.collector.backoff_max),
        ("drives.timeout".into(), c.drives.timeout),
        ("drives.smart_interval".into(), c.drives.smart_interval),
        ("drives.sweep_settle".into(), c.drives.sweep_settle),
        ("drives.io_deadline_floor".into(), c.drives.io_deadline_floor),
    ];
    for name in ["rapl", "hwmon", "ipmi", "nvme_estimate"] {
        d.extend(c.power_intervals.get(name).map(|v| (format!("sampling.power_intervals.{name}"), v)));
    }
    if let Some(SyncPolicy::Interval(v)) = c.spool.as_ref().map(|s| s.sync) {
        d.push(("spool.sync".into(), v));
    }
    for (i, p) in c.probes.iter().enumerate() {
        d.push((format!("probes[{i}].jitter"), p.jitter));
        if let Some(e) = &p.energy {
            d.extend([(format!("probes[{i}].power_interval"), e.period), (format!("probes[{i}].idle"), e.idle), (format!("probes[{i}].tail"), e.tail)]);
            d.push((format!("probes[{i}].energy_budget"), e.energy_budget));
        }
    }
    d
}

#[test]
fn no_config_value_panics_or_passes_an_unbounded_duration() {
    let parse = |text: &str| Config::from_str(Path::new("props.toml"), text).ok().map(|c| durations(&c));
    assert!(parse(BASE).is_some(), "the base config must be valid");
    let found = edge::explore(KEYS, &BASE.parse().unwrap(), 2000, &parse);
    assert_eq!(found.failures, Vec::<String>::new());
    // Some hostile values are valid for some keys (`0s` for a jitter, `true` for a switch): the
    // test reached accepted configs, not only refusals.
    assert!(found.accepted > 50, "only {} accepted configs", found.accepted);
}
