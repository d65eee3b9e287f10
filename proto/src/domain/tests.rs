//! The unit tests of `domain.rs` and its point-by-point conversion (`domain/convert.rs`).

use super::*;

fn sample() -> v1::PowerSample {
    v1::PowerSample {
        time_ns: 1_700_000_000_000_000_000,
        source: "rapl".into(),
        zone: "package-0".into(),
        scope: "package".into(),
        method: v1::Method::Measured as i32,
        watts: Some(10.0),
        joules: Some(10.0),
        interval_ns: 1_000_000_000,
        ..Default::default()
    }
}

fn batch(power: Vec<v1::PowerSample>) -> v1::Batch {
    v1::Batch { agent_id: "a1".into(), sequence: 1, power, ..Default::default() }
}

#[test]
fn probe_run_firmware_is_optional_but_checked_when_present() {
    let run = |fw: &str| v1::ProbeRun { firmware: fw.into(), ..probe_run() };
    let b = |fw: &str| v1::Batch { agent_id: "a1".into(), sequence: 1, probe_runs: vec![run(fw)], ..Default::default() };
    assert!(convert_batch("a1", b("")).is_ok());
    assert!(convert_batch("a1", b("2B2QEXM7")).is_ok());
    let e = convert_batch("a1", b("FW\n1")).unwrap_err();
    assert_eq!((e.field.as_str(), e.reason.as_str()), ("probe_runs[0].firmware", "contains control characters"));
}

#[test]
fn good_batch_converts_with_units() {
    let b = convert_batch("a1", batch(vec![sample()])).unwrap();
    assert_eq!(b.power[0].watts, Some(Watts(10.0)));
    assert_eq!(b.power[0].method, Method::Measured);
    assert_eq!(b.len(), 1);
}

#[test]
fn rejections_name_the_field() {
    let mut s = sample();
    s.watts = Some(f64::NAN);
    let e = convert_batch("a1", batch(vec![sample(), s])).unwrap_err();
    assert_eq!(e.field, "power[1].watts");
    let e = convert_batch("other", batch(vec![])).unwrap_err();
    assert_eq!(e.field, "batch.agent_id");
    let mut s = sample();
    s.method = 0;
    assert_eq!(convert_batch("a1", batch(vec![s])).unwrap_err().field, "power[0].method");
    let mut s = sample();
    s.time_ns = 0;
    assert_eq!(convert_batch("a1", batch(vec![s])).unwrap_err().field, "power[0].time_ns");
    let mut b = batch(vec![]);
    b.temperature.push(v1::TemperatureSample { time_ns: 5, source: "hwmon".into(), device: "nvme0".into(), sensor: "Composite".into(), celsius: 49850.0 });
    let e = convert_batch("a1", b).unwrap_err();
    assert_eq!(e.field, "temperature[0].celsius");
}

#[test]
fn a_bad_point_is_left_out_alone_with_its_field_value_and_rule() {
    let t = |i: i64, c: f64| v1::TemperatureSample {
        time_ns: 1_700_000_000_000_000_000 + i,
        source: "hwmon".into(),
        device: "nvme0".into(),
        sensor: "Composite".into(),
        celsius: c,
    };
    let mut b = batch(vec![sample()]);
    b.temperature = vec![t(0, 41.0), t(1, 600.0), t(2, 42.0)];
    b.events.push(v1::Event { time_ns: 7, kind: "k".into(), severity: 0, ..Default::default() });
    b.power.push(v1::PowerSample { zone: "end\\".into(), ..sample() });
    let c = convert_batch_points("a1", b).unwrap();
    assert_eq!(c.batch.temperature.iter().map(|t| t.celsius.0).collect::<Vec<_>>(), [41.0, 42.0]);
    assert_eq!(c.batch.power.len(), 1);
    assert_eq!(c.batch.events.len(), 0);
    let got: Vec<(&str, &str, Rule, Option<i64>)> = c.rejected.iter().map(|r| (r.field.as_str(), r.value.as_str(), r.rule, r.time_ns)).collect();
    assert_eq!(
        got,
        [
            ("power[1].zone", "\"end\\\\\"", Rule::BadTag, Some(1_700_000_000_000_000_000)),
            ("temperature[1].celsius", "600", Rule::OutOfRange, Some(1_700_000_000_000_000_001)),
            ("events[0].severity", "0", Rule::Unspecified, Some(7)),
        ]
    );
    assert_eq!(c.rejected[1].field_name(), "temperature.celsius");
    assert_eq!(c.rejected[1].to_string(), "temperature[1].celsius = 600: 600 °C is outside -273.15..500; check the unit");
    // The strict form fails on the first.
    assert_eq!(convert_batch("a1", batch(vec![v1::PowerSample { zone: "end\\".into(), ..sample() }])).unwrap_err().field, "power[0].zone");
}

#[test]
fn power_flags_are_words_in_canonical_order() {
    let flags = |f: &[&str]| v1::PowerSample { flags: f.iter().map(|s| s.to_string()).collect(), ..sample() };
    let b = convert_batch("a1", batch(vec![flags(&["deactivated", "estimated", "deactivated"])])).unwrap();
    assert_eq!(b.power[0].flags, vec!["deactivated".to_string(), "estimated".into()]);
    assert_eq!(convert_batch("a1", batch(vec![sample()])).unwrap().power[0].flags, Vec::<String>::new());
    let c = convert_batch_points("a1", batch(vec![flags(&["a,b"]), flags(&["Deactivated"]), flags(&[""]), flags(&["x"; 9])])).unwrap();
    let got: Vec<(&str, &str, Rule)> = c.rejected.iter().map(|r| (r.field.as_str(), r.value.as_str(), r.rule)).collect();
    assert_eq!(
        got,
        [
            ("power[0].flags", "\"a,b\"", Rule::OutOfRange),
            ("power[1].flags", "\"Deactivated\"", Rule::OutOfRange),
            ("power[2].flags", "\"\"", Rule::OutOfRange),
            ("power[3].flags", "9", Rule::OutOfRange),
        ]
    );
    assert_eq!(c.rejected[0].reason, "a flag is one lowercase word ([a-z0-9_], 1 to 32 bytes)");
}

#[test]
fn labels_are_bounded_and_cannot_shadow_schema_tags() {
    assert!(check_label("rack", "r12").is_ok());
    assert_eq!(check_label("host", "x").unwrap_err().field, "labels.host");
    assert!(check_label("Rack", "x").is_err());
    assert!(check_label("rack", "").is_err());
    let e = check_label("site", "end\\").unwrap_err();
    assert_eq!(e.field, "labels.site");
    assert!(e.reason.starts_with("ends in a backslash"), "{}", e.reason);
    assert!(check_agent_id("id", "node-1.dc_2").is_ok());
    assert!(check_agent_id("id", "node 1").is_err());
}

/// A valid probe run for the tests that change one field of it.
fn probe_run() -> v1::ProbeRun {
    v1::ProbeRun {
        run_id: "1-0".into(),
        device: "nvme0n1".into(),
        bench: "granularity".into(),
        experiment: "granularity/RR".into(),
        pattern: "RR".into(),
        start_ns: 1_700_000_000_000_000_000,
        end_ns: 1_700_000_000_100_000_000,
        ..Default::default()
    }
}

#[test]
fn a_runs_energy_coverage_is_a_share_of_its_time() {
    let run = |c: f64| v1::ProbeRun { energy_coverage: Some(c), energy_low_confidence: Some(c < 0.99), ..probe_run() };
    let b = |c: f64| v1::Batch { agent_id: "a1".into(), sequence: 1, probe_runs: vec![run(c)], ..Default::default() };
    assert!(convert_batch("a1", b(0.0)).is_ok() && convert_batch("a1", b(0.4)).is_ok() && convert_batch("a1", b(1.0)).is_ok());
    let e = convert_batch("a1", b(1.5)).unwrap_err();
    assert_eq!((e.field.as_str(), e.reason.as_str()), ("probe_runs[0].energy_coverage", "a share of the run's time, 0 to 1"));
    assert_eq!(convert_batch("a1", b(f64::NAN)).unwrap_err().field, "probe_runs[0].energy_coverage");
}

#[test]
fn power_is_checked_against_the_range_of_its_scope() {
    let p = |scope: &str, watts: f64| v1::PowerSample { scope: scope.into(), watts: Some(watts), joules: None, ..sample() };
    let c = convert_batch_points(
        "a1",
        batch(vec![p("drive", -5.0), p("drive", -1.0), p("drive", 200.0), p("drive", 201.0), p("package", 1e300), p("wall", 9_000.0)]),
    )
    .unwrap();
    assert_eq!(c.batch.power.iter().map(|s| s.watts.unwrap().0).collect::<Vec<_>>(), [-1.0, 200.0, 9_000.0]);
    let got: Vec<(&str, &str, Rule)> = c.rejected.iter().map(|r| (r.field.as_str(), r.value.as_str(), r.rule)).collect();
    // Values are shown as f64's Display writes them (1e300 in full).
    let huge = 1e300f64.to_string();
    assert_eq!(
        got,
        [("power[0].watts", "-5", Rule::OutOfRange), ("power[3].watts", "201", Rule::OutOfRange), ("power[4].watts", huge.as_str(), Rule::OutOfRange)]
    );
    assert_eq!(c.rejected[0].reason, "-5 W is outside -1..200 W for scope `drive`; check the unit");
    // The window's mean power: 10 kJ in 1 s on a package is 10 kW.
    let j = v1::PowerSample { watts: None, joules: Some(10_000.0), ..sample() };
    assert_eq!(
        convert_batch("a1", batch(vec![j])).unwrap_err().to_string(),
        "power[0].joules: 10000 J over 1000000000 ns (10000 W) is outside -1..1000 W for scope `package`; check the unit"
    );
}

#[test]
fn timestamps_outside_the_window_are_refused_by_name_and_invalid_ones_stay_bad_time() {
    const NOW: i64 = 1_700_000_000_000_000_000;
    let w = TimeWindow { now_ns: NOW, ahead_ns: 60_000_000_000, behind_ns: 3_600_000_000_000 };
    let at = |t: i64| v1::PowerSample { time_ns: t, ..sample() };
    let b = batch(vec![at(NOW + 60_000_000_000), at(NOW + 60_000_000_001), at(NOW - 3_600_000_000_000), at(NOW - 3_600_000_000_001), at(0)]);
    let c = convert_batch_points_within("a1", b, w).unwrap();
    assert_eq!(c.batch.power.len(), 2);
    let got: Vec<(&str, Rule)> = c.rejected.iter().map(|r| (r.field.as_str(), r.rule)).collect();
    assert_eq!(got, [("power[1].time_ns", Rule::TimeAhead), ("power[3].time_ns", Rule::TimeBehind), ("power[4].time_ns", Rule::BadTime)]);
    assert_eq!(c.rejected[0].reason, "60 s ahead of the collector's clock, beyond the 60 s allowed (limits.max_time_ahead); check the host's clock (NTP)");
    assert_eq!(c.rejected[1].reason, "3600 s behind the collector's clock, beyond the 3600 s allowed (limits.max_time_behind); check the host's clock (NTP)");
    // A run that starts now but ends a day ahead is refused at its end.
    let run = v1::ProbeRun { start_ns: NOW, end_ns: NOW + 86_400_000_000_000, ..probe_run() };
    let c = convert_batch_points_within("a1", v1::Batch { probe_runs: vec![run], ..batch(vec![]) }, w).unwrap();
    assert_eq!((c.rejected[0].field.as_str(), c.rejected[0].rule), ("probe_runs[0].end_ns", Rule::TimeAhead));
    // Without a window every valid timestamp converts.
    assert_eq!(convert_batch_points("a1", batch(vec![at(i64::MAX - 1)])).unwrap().rejected, []);
}

#[test]
fn the_agents_energy_total_and_its_epoch_start_pass_through_checked() {
    let total = |t: Option<f64>, joules: Option<f64>| v1::PowerSample { joules_total: t, joules, ..sample() };
    let mut b = batch(vec![total(Some(1234.5), Some(10.0)), total(None, Some(10.0))]);
    b.joules_total_start_ns = 1_699_999_000_000_000_000;
    let c = convert_batch("a1", b).unwrap();
    assert_eq!((c.power[0].joules_total, c.power[1].joules_total), (Some(Joules(1234.5)), None));
    assert_eq!(c.joules_total_start, Some(UnixNanos(1_699_999_000_000_000_000)));
    // Older agents: no start; a start that is no UTC time is dropped, not the batch.
    assert_eq!(convert_batch("a1", batch(vec![sample()])).unwrap().joules_total_start, None);
    let mut b = batch(vec![sample()]);
    b.joules_total_start_ns = -5;
    assert_eq!(convert_batch("a1", b).unwrap().joules_total_start, None);
    let c = convert_batch_points("a1", batch(vec![total(Some(-1.0), Some(10.0)), total(Some(5.0), None), total(Some(f64::NAN), Some(1.0))])).unwrap();
    let got: Vec<(&str, Rule)> = c.rejected.iter().map(|r| (r.field.as_str(), r.rule)).collect();
    assert_eq!(got, [("power[0].joules_total", Rule::Inconsistent), ("power[1].joules_total", Rule::Inconsistent), ("power[2].joules_total", Rule::NotFinite)]);
}
