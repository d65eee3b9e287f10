//! The unit tests of `schema.rs` (their own file: with them schema.rs was over 600 lines).

use super::*;
use crate::domain::convert_batch;
use crate::lineproto::encode_all;

#[test]
fn power_and_temperature_lines_carry_host_and_labels() {
    let b = v1::Batch {
        agent_id: "a1".into(),
        sequence: 3,
        power: vec![v1::PowerSample {
            time_ns: 1_000,
            source: "rapl".into(),
            zone: "package-0".into(),
            scope: "package".into(),
            method: v1::Method::Measured as i32,
            watts: Some(20.0),
            joules: Some(2.0),
            interval_ns: 100_000_000,
            ..Default::default()
        }],
        temperature: vec![v1::TemperatureSample { time_ns: 2_000, source: "hwmon".into(), device: "nvme0".into(), sensor: "Composite".into(), celsius: 49.85 }],
        ..Default::default()
    };
    let b = convert_batch("a1", b).unwrap();
    let tags = HostTags { host: "a1".into(), labels: [("rack".to_string(), "r7".to_string())].into() };
    let (body, errs) = encode_all(&batch_points(&b, &tags));
    assert!(errs.is_empty());
    assert_eq!(
        body,
        "power,host=a1,method=measured,rack=r7,scope=package,source=rapl,zone=package-0 watts=20,joules=2,interval_ns=100000000i 1000\n\
         temperature,device=nvme0,host=a1,rack=r7,sensor=Composite,source=hwmon celsius=49.85 2000\n"
    );
}

#[test]
fn electrical_lines_carry_volts_or_amperes() {
    let e = |time_ns: i64, channel: &str, volts: Option<f64>, amperes: Option<f64>| v1::ElectricalSample {
        time_ns,
        source: "hwmon".into(),
        chip: "ina3221-0-0041".into(),
        channel: channel.into(),
        volts,
        amperes,
    };
    let b = v1::Batch {
        agent_id: "a1".into(),
        sequence: 1,
        electrical: vec![e(1_000, "SSD 12V", Some(12.0), None), e(1_000, "curr1", None, Some(0.5))],
        ..Default::default()
    };
    let b = convert_batch("a1", b).unwrap();
    let tags = HostTags { host: "a1".into(), labels: BTreeMap::new() };
    let (body, errs) = encode_all(&batch_points(&b, &tags));
    assert!(errs.is_empty());
    assert_eq!(
        body,
        "electrical,channel=SSD\\ 12V,chip=ina3221-0-0041,host=a1,source=hwmon volts=12 1000\n\
         electrical,channel=curr1,chip=ina3221-0-0041,host=a1,source=hwmon amperes=0.5 1000\n"
    );
    let both = v1::Batch { agent_id: "a1".into(), sequence: 1, electrical: vec![e(1_000, "in1", Some(1.0), Some(1.0))], ..Default::default() };
    assert_eq!(convert_batch("a1", both).unwrap_err().to_string(), "electrical[0].volts: exactly one of volts and amperes must be set");
    let nan = v1::Batch { agent_id: "a1".into(), sequence: 1, electrical: vec![e(1_000, "curr1", None, Some(f64::NAN))], ..Default::default() };
    assert_eq!(convert_batch("a1", nan).unwrap_err().to_string(), "electrical[0].amperes: NaN is not a finite number");
}

#[test]
fn sweep_runs_carry_their_power_state_and_power_only_when_known() {
    let run = v1::ProbeRun {
        run_id: "1-0-ps2".into(),
        device: "nvme0n1".into(),
        model: "M".into(),
        bench: "governor_sweep".into(),
        experiment: "governor_sweep/SW:128KiB".into(),
        pattern: "SW".into(),
        start_ns: 1_000,
        end_ns: 2_000,
        power_state: Some(2),
        power_state_max_w: Some(3.6),
        power_w: Some(3.5),
        energy_source: "hwmon:ina226/power1".into(),
        ..Default::default()
    };
    let tags = HostTags { host: "a1".into(), labels: BTreeMap::new() };
    let mut line = String::new();
    probe_run_point(&run, &tags).write_line(&mut line).unwrap();
    assert!(line.contains(",power_state_max_w=3.6,power_w=3.5,power_state=2i,energy_source=\"hwmon:ina226/power1\""), "{line}");
    // Without a power source: no power fields at all, never a zero.
    let bare = v1::ProbeRun { power_w: None, power_state_max_w: None, energy_source: String::new(), ..run };
    let mut line = String::new();
    probe_run_point(&bare, &tags).write_line(&mut line).unwrap();
    assert!(!line.contains("power_w") && !line.contains("power_state_max_w") && line.contains(",power_state=2i"), "{line}");
    assert!(!line.contains("firmware"), "no firmware known, no tag: {line}");
}

#[test]
fn probe_runs_carry_the_firmware_tag_when_known() {
    let run = v1::ProbeRun { device: "nvme0n1".into(), model: "M".into(), firmware: "2B2QEXM7".into(), bench: "granularity".into(), ..Default::default() };
    let tags = HostTags { host: "a1".into(), labels: BTreeMap::new() };
    let mut line = String::new();
    probe_run_point(&run, &tags).write_line(&mut line).unwrap();
    assert!(line.contains(",firmware=2B2QEXM7,") || line.contains(",firmware=2B2QEXM7 "), "{line}");
}

#[test]
fn absent_smart_readings_write_no_field_and_a_reported_zero_stays() {
    let smart = v1::NvmeSmart {
        time_ns: 7_000,
        device: "nvme0".into(),
        serial: "S1".into(),
        critical_warning: 0,
        percentage_used: Some(0),
        data_units_read: Some(0),
        data_units_written: Some(12),
        power_on_hours: Some(u64::MAX),
        ..Default::default()
    };
    let b = v1::Batch {
        agent_id: "a1".into(),
        sequence: 1,
        nvme_smart: vec![smart, v1::NvmeSmart { time_ns: 8_000, device: "nvme1".into(), ..Default::default() }],
        ..Default::default()
    };
    let b = convert_batch("a1", b).unwrap();
    let tags = HostTags { host: "a1".into(), labels: BTreeMap::new() };
    let (body, errs) = encode_all(&batch_points(&b, &tags));
    assert!(errs.is_empty(), "{errs:?}");
    // No composite, no TMT counters, no unsafe shutdowns: no such fields. Above i64::MAX a
    // uint saturates and stays an integer (InfluxDB 1.x has no unsigned type; a float would
    // conflict with the field's type).
    assert_eq!(
        body,
        "nvme_smart,device=nvme0,host=a1,serial=S1 critical_warning=0i,percentage_used=0i,data_units_read=0i,data_units_written=12i,power_on_hours=9223372036854775807i 7000\n\
         nvme_smart,device=nvme1,host=a1 critical_warning=0i 8000\n"
    );
}

#[test]
fn an_absent_composite_converts_and_a_nan_one_is_rejected() {
    let s = |c: Option<f64>| v1::Batch {
        agent_id: "a1".into(),
        sequence: 1,
        nvme_smart: vec![v1::NvmeSmart { time_ns: 5, device: "nvme0".into(), composite_celsius: c, ..Default::default() }],
        ..Default::default()
    };
    assert_eq!(convert_batch("a1", s(None)).unwrap().nvme_smart[0].composite_celsius, None);
    assert_eq!(convert_batch("a1", s(Some(0.0))).unwrap().nvme_smart[0].composite_celsius, Some(0.0));
    assert_eq!(convert_batch("a1", s(Some(f64::NAN))).unwrap_err().to_string(), "nvme_smart[0].composite_celsius: NaN is not a finite number");
}

#[test]
fn inventory_leaves_unknown_capacity_block_size_and_rotation_out() {
    let h = v1::Hello {
        agent_id: "a1".into(),
        inventory: Some(v1::Inventory {
            storage_devices: vec![
                v1::StorageDevice {
                    name: "sda".into(),
                    transport: "sata".into(),
                    capacity_bytes: Some(4_000_787_030_016),
                    logical_block_size: Some(4096),
                    rotational: Some(false),
                    ..Default::default()
                },
                v1::StorageDevice { name: "sdb".into(), transport: "sas".into(), ..Default::default() },
            ],
            ..Default::default()
        }),
        time_ns: 5_000,
        ..Default::default()
    };
    let h = Hello::try_from(h).unwrap();
    let tags = HostTags { host: "a1".into(), labels: BTreeMap::new() };
    let (body, errs) = encode_all(&hello_points(&h, &tags));
    assert!(errs.is_empty(), "{errs:?}");
    let lines: Vec<&str> = body.lines().filter(|l| l.starts_with("inventory,")).collect();
    assert_eq!(
        lines,
        vec![
            "inventory,device=sda,host=a1 capacity_bytes=4000787030016i,logical_block_size=4096i,firmware=\"\",transport=\"sata\",rotational=false,power_states=0i 5000",
            "inventory,device=sdb,host=a1 firmware=\"\",transport=\"sas\",power_states=0i 5000",
        ]
    );
}

#[test]
fn hello_writes_one_point_per_power_state() {
    let ps = |state: u32, max_watts: f64, operational: bool, entry: u32, exit: u32| v1::PowerStateDescriptor {
        state,
        max_watts,
        operational,
        entry_latency_us: entry,
        exit_latency_us: exit,
    };
    let dev = |name: &str, states: Vec<v1::PowerStateDescriptor>| v1::StorageDevice {
        name: name.into(),
        model: "INTEL SSDPE2KX010T8".into(),
        serial: "PHLJ9041".into(),
        firmware: "VDV10131".into(),
        capacity_bytes: Some(1_000_204_886_016),
        logical_block_size: Some(512),
        transport: "nvme".into(),
        power_states: states,
        ..Default::default()
    };
    let h = v1::Hello {
        agent_id: "a1".into(),
        hostname: "h1".into(),
        agent_version: "0.1.0".into(),
        protocol_version: 1,
        inventory: Some(v1::Inventory {
            storage_devices: vec![
                dev("nvme0n1", vec![ps(0, 25.0, true, 0, 0), ps(1, 12.5, true, 0, 0), ps(4, 0.0045, false, 2000, 11000)]),
                v1::StorageDevice { name: "sda".into(), transport: "sata".into(), ..Default::default() },
            ],
            ..Default::default()
        }),
        time_ns: 5_000,
        session: "run".into(),
        ..Default::default()
    };
    let h = Hello::try_from(h).unwrap();
    let tags = HostTags { host: "a1".into(), labels: BTreeMap::new() };
    let (body, errs) = encode_all(&hello_points(&h, &tags));
    // The session is a tag of the `agent` point only.
    assert!(body.starts_with("agent,host=a1,session=run hostname=\"h1\","), "{body}");
    assert_eq!(body.matches("session=").count(), 1, "{body}");
    assert!(errs.is_empty(), "{errs:?}");
    let lines: Vec<&str> = body.lines().filter(|l| l.starts_with("power_state_descriptor,")).collect();
    assert_eq!(
        lines,
        vec![
            "power_state_descriptor,device=nvme0n1,host=a1,model=INTEL\\ SSDPE2KX010T8,serial=PHLJ9041,state=0 max_watts=25,operational=true,entry_latency_us=0i,exit_latency_us=0i 5000",
            "power_state_descriptor,device=nvme0n1,host=a1,model=INTEL\\ SSDPE2KX010T8,serial=PHLJ9041,state=1 max_watts=12.5,operational=true,entry_latency_us=0i,exit_latency_us=0i 5000",
            "power_state_descriptor,device=nvme0n1,host=a1,model=INTEL\\ SSDPE2KX010T8,serial=PHLJ9041,state=4 max_watts=0.0045,operational=false,entry_latency_us=2000i,exit_latency_us=11000i 5000",
        ]
    );
    // The count on the inventory point stays; a device without states writes no descriptor.
    assert!(body.contains(",power_states=3i 5000\n"), "{body}");
    assert!(body.contains("inventory,device=sda,host=a1 "), "{body}");
    assert_eq!(body.lines().count(), 1 + 2 + 3);
}

/// The line protocol of a batch as the collector writes it (host `a1`, no labels).
fn lines_of(b: v1::Batch) -> String {
    let b = convert_batch("a1", b).unwrap();
    let tags = HostTags { host: "a1".into(), labels: BTreeMap::new() };
    let (body, errs) = encode_all(&batch_points(&b, &tags));
    assert!(errs.is_empty(), "{errs:?}");
    body
}

/// A sleeping drive smartctl left alone is a point with its mode, not an error; a mode
/// outside the four words is refused.
#[test]
fn drive_power_modes_are_points_with_a_drawable_level() {
    let m = |t: i64, mode: &str, skipped: bool| v1::DrivePowerMode { time_ns: t, device: "sdc".into(), serial: String::new(), mode: mode.into(), skipped };
    let b = v1::Batch { agent_id: "a1".into(), sequence: 1, drive_power_modes: vec![m(5, "standby", true), m(6, "active", false)], ..Default::default() };
    assert_eq!(
        lines_of(b),
        "drive_power_mode,device=sdc,host=a1 mode=\"standby\",level=1i,skipped=true 5\n\
             drive_power_mode,device=sdc,host=a1 mode=\"active\",level=3i,skipped=false 6\n"
    );
    let bad = v1::Batch { agent_id: "a1".into(), sequence: 1, drive_power_modes: vec![m(5, "spun-down", true)], ..Default::default() };
    assert!(convert_batch("a1", bad).unwrap_err().to_string().contains("drive_power_modes[0].mode"));
}

/// A drive identified after the Hello (asleep at discovery) is written as its `inventory` point,
/// at the record's time, tagged with its identity; a record without a device is refused by name.
#[test]
fn a_drive_identity_record_is_an_inventory_point() {
    let device = v1::StorageDevice {
        name: "bus/0:sat+megaraid,0".into(),
        model: "MZ7KH480HAHQ0D3".into(),
        serial: "S1".into(),
        firmware: "HXM7404Q".into(),
        capacity_bytes: Some(480_103_981_056),
        logical_block_size: Some(512),
        transport: "sata".into(),
        rotational: Some(false),
        ..Default::default()
    };
    let id = v1::DriveIdentity { time_ns: 7, device: Some(device) };
    let b = v1::Batch { agent_id: "a1".into(), sequence: 1, drive_identities: vec![id], ..Default::default() };
    assert_eq!(
        lines_of(b),
        "inventory,device=bus/0:sat+megaraid\\,0,host=a1,model=MZ7KH480HAHQ0D3,serial=S1 capacity_bytes=480103981056i,logical_block_size=512i,firmware=\"HXM7404Q\",transport=\"sata\",rotational=false,power_states=0i 7\n"
    );
    let bad = v1::Batch { agent_id: "a1".into(), sequence: 1, drive_identities: vec![v1::DriveIdentity { time_ns: 7, device: None }], ..Default::default() };
    assert!(convert_batch("a1", bad).unwrap_err().to_string().contains("drive_identities[0].device"));
}

#[test]
fn a_runs_coverage_and_low_confidence_are_fields_when_known() {
    let run =
        v1::ProbeRun { bench: "granularity".into(), energy_j: Some(0.5), energy_coverage: Some(0.25), energy_low_confidence: Some(true), ..Default::default() };
    let tags = HostTags { host: "a1".into(), labels: BTreeMap::new() };
    let mut line = String::new();
    probe_run_point(&run, &tags).write_line(&mut line).unwrap();
    assert!(line.contains(",energy_coverage=0.25,energy_low_confidence=true"), "{line}");
    let mut line = String::new();
    probe_run_point(&v1::ProbeRun { energy_coverage: None, energy_low_confidence: None, ..run }, &tags).write_line(&mut line).unwrap();
    assert!(!line.contains("coverage") && !line.contains("low_confidence"), "absent, never a zero: {line}");
}

fn efficiency_phase(profile: &str, verdict: &str) -> v1::EfficiencyPhase {
    v1::EfficiencyPhase {
        time_ns: 1_000,
        device: "nvme1n1".into(),
        model: "MZ-X".into(),
        firmware: "1.2".into(),
        serial: "S9".into(),
        profile: profile.into(),
        verdict: verdict.into(),
        energy_source: "hwmon:ina226-0-0040/power1".into(),
        probe_id: "900".into(),
        windows: 12,
        max_deviation: Some(0.5),
        trend_change: Some(-0.25),
        ..Default::default()
    }
}

/// Issue 42: an efficiency phase sent in a batch is the `device_efficiency` point docs/schema.md
/// describes (the same line the agent writes into efficiency.lp), with its metrics and
/// half-widths in field-number order and the `power_state` tag only when run per state.
#[test]
fn an_efficiency_phase_is_a_device_efficiency_point() {
    let mut stable = efficiency_phase("rand_read_4k", "stable");
    stable.interval_s = Some(10.0);
    for (k, v) in [("iops", 1000.0), ("watts", 4.0), ("watts_u95", 0.25), ("iops_per_watt", 250.0), ("iops_per_watt_u95", 15.625)] {
        assert!(stable.set_metric(k, v), "{k}");
    }
    stable.power_state = Some(2);
    let mut unstable = efficiency_phase("seq_write_128k", "unstable");
    unstable.firmware.clear();
    let b = v1::Batch { agent_id: "a1".into(), sequence: 1, efficiency: vec![stable, unstable], ..Default::default() };
    assert_eq!(
        lines_of(b),
        "device_efficiency,device=nvme1n1,firmware=1.2,host=a1,model=MZ-X,power_state=2,profile=rand_read_4k,verdict=stable \
         serial=\"S9\",energy_source=\"hwmon:ina226-0-0040/power1\",probe_id=\"900\",windows=12i,interval_s=10,max_deviation=0.5,trend_change=-0.25,\
         watts=4,watts_u95=0.25,iops=1000,iops_per_watt=250,iops_per_watt_u95=15.625 1000\n\
         device_efficiency,device=nvme1n1,host=a1,model=MZ-X,profile=seq_write_128k,verdict=unstable \
         serial=\"S9\",energy_source=\"hwmon:ina226-0-0040/power1\",probe_id=\"900\",windows=12i,max_deviation=0.5,trend_change=-0.25 1000\n"
    );
}

/// Each refused efficiency record is left out by itself, its field and rule named; the valid one
/// beside it is kept.
#[test]
fn efficiency_records_are_refused_one_by_one_with_the_field_named() {
    let with = |profile: &str, verdict: &str, k: &str, v: f64| {
        let mut e = efficiency_phase(profile, verdict);
        e.set_metric(k, v);
        e
    };
    let mut bad_profile = efficiency_phase("rand_read_8k", "stable");
    bad_profile.time_ns = 2_000;
    let mut no_device = efficiency_phase("ready_idle", "stable");
    no_device.device.clear();
    let mut bad_interval = efficiency_phase("ready_idle", "stable");
    bad_interval.interval_s = Some(-1.0);
    let records = vec![
        with("ready_idle", "stable", "watts", 3.5),
        bad_profile,
        efficiency_phase("ready_idle", "drifting"),
        with("rand_write_4k", "unstable", "iops_per_watt", 100.0),
        with("seq_read_128k", "stable", "mib_per_s_per_watt", -2.0),
        with("seq_read_128k", "stable", "joules_per_mib_u95", f64::NAN),
        with("ready_idle", "stable", "watts", 5_000_000.0),
        no_device,
        bad_interval,
        with("rand_read_4k", "stable", "joules_per_io_above_idle", -0.001),
    ];
    let b = v1::Batch { agent_id: "a1".into(), sequence: 1, efficiency: records, ..Default::default() };
    let c = crate::domain::convert_batch_points("a1", b).unwrap();
    let got: Vec<(String, &str)> = c.rejected.iter().map(|r| (r.field.clone(), r.rule.as_str())).collect();
    assert_eq!(
        got,
        [
            ("efficiency[1].profile", "inconsistent"),
            ("efficiency[2].verdict", "inconsistent"),
            ("efficiency[3].iops_per_watt", "inconsistent"),
            ("efficiency[4].mib_per_s_per_watt", "out_of_range"),
            ("efficiency[5].joules_per_mib_u95", "not_finite"),
            ("efficiency[6].watts", "out_of_range"),
            ("efficiency[7].device", "bad_tag"),
            ("efficiency[8].interval_s", "out_of_range"),
        ]
        .map(|(f, r)| (f.to_string(), r))
    );
    assert_eq!(c.rejected[0].time_ns, Some(2_000));
    // The valid ones are kept: the stable idle phase and a profile below idle power.
    let kept: Vec<(&str, Option<f64>, Option<f64>)> = c.batch.efficiency.iter().map(|e| (e.profile.as_str(), e.watts, e.joules_per_io_above_idle)).collect();
    assert_eq!(kept, [("ready_idle", Some(3.5), None), ("rand_read_4k", None, Some(-0.001))]);
}
