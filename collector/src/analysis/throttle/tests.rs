//! The detector's tests: episodes from hand-written series, the same episodes whatever the order
//! and batching of arrival, and the bounds (state retained and work per sample).

use super::*;

const S: i64 = 1_000_000_000;
const T0: i64 = 1_700_000_000 * S;

fn temp(t: i64, c: f64) -> Obs {
    Obs::Temperature { time_ns: T0 + t * S, source: "nvme_cli".into(), celsius: c }
}
fn run(t: i64, pattern: &str, mib: f64) -> Obs {
    Obs::Run { start_ns: T0 + t * S, end_ns: T0 + (t + 1) * S, pattern: pattern.into(), mib_per_s: mib }
}
fn smart(t: i64, trans: u64, warning: u32) -> Obs {
    Obs::Smart {
        time_ns: T0 + t * S,
        critical_warning: warning,
        counters: [Some(trans), Some(0), Some(trans * 30), Some(0), Some(0)],
        composite_celsius: Some(80.0),
    }
}
fn power(t: i64, w: f64) -> Obs {
    Obs::Power { time_ns: T0 + t * S, watts: w }
}

fn detector(warning: Option<f64>) -> ThrottleDetector {
    detector_with(warning, None)
}

fn detector_with(warning: Option<f64>, critical: Option<f64>) -> ThrottleDetector {
    let mut d = ThrottleDetector::new();
    d.set_inventory(
        "h1",
        &v1::Inventory {
            drive_thermal_limits: vec![v1::DriveThermalLimits {
                device: "nvme0".into(),
                serial: "S1".into(),
                warning_celsius: warning.unwrap_or(0.0),
                critical_celsius: critical.unwrap_or(0.0),
                namespaces: vec!["nvme0n1".into()],
            }],
            ..Default::default()
        },
    );
    d
}

fn feed(d: &mut ThrottleDetector, series: Vec<Obs>) -> Vec<ThrottleEvent> {
    series.into_iter().flat_map(|o| d.observe("h1", "nvme0", o)).collect()
}

/// The episodes as InfluxDB ends up holding them (the last version of each).
fn stored(d: &ThrottleDetector) -> Vec<ThrottleEvent> {
    d.episodes("h1").into_values().collect()
}

fn event(trigger: &str, signal: &str, pattern: &str, onset: i64, celsius: Option<f64>, warn: Option<f64>) -> ThrottleEvent {
    ThrottleEvent {
        time_ns: T0 + onset * S,
        device: "nvme0".into(),
        trigger: trigger.into(),
        signal: signal.into(),
        pattern: pattern.into(),
        onset_celsius: celsius,
        warning_celsius: warn,
        critical_celsius: None,
        throughput_drop_pct: None,
        power_drop_pct: None,
        duration_s: 0.0,
        ongoing: true,
    }
}

#[test]
fn temperature_crossing_with_a_throughput_drop_is_one_episode() {
    let mut d = detector(Some(70.0));
    let got = feed(
        &mut d,
        vec![
            run(0, "SW/131072", 1000.0),
            temp(10, 60.0),
            run(12, "SW/131072", 990.0), // normal: becomes the baseline
            temp(20, 72.0),              // onset
            temp(25, 73.0),
            run(30, "SW/131072", 841.5),  // 15 % below 990
            temp(140, 73.5),              // the onset is settled (2 min behind): the episode opens
            run(150, "SW/131072", 811.8), // 18 %: waits for the temperatures to reach it
            temp(155, 74.0),              // they have: the episode widens
            temp(180, 65.0),              // recovery
            run(190, "SW/131072", 1000.0),
        ],
    );
    let mut open = event("temperature", "throughput", "SW/131072", 20, Some(72.0), Some(70.0));
    open.throughput_drop_pct = Some(drop_pct(990.0, 841.5));
    open.duration_s = 11.0;
    let mut wider = open.clone();
    wider.throughput_drop_pct = Some(drop_pct(990.0, 811.8));
    wider.duration_s = 131.0;
    let mut closed = wider.clone();
    closed.duration_s = 160.0;
    closed.ongoing = false;
    assert_eq!(got, vec![open, wider, closed.clone()]);
    assert_eq!(stored(&d), vec![closed]);
    assert_eq!((drop_pct(990.0, 841.5), drop_pct(1000.0, 850.0)), (15.0, 15.0));
}

/// The scenario of issue 19: a GC pause (15 % slower while cool) before the drive gets hot,
/// then a 20 % drop while hot, and drive power falling 10 % exactly (8 W → 7.2 W, which
/// (b − v)·100/b computes as 9.999999999999998 %).
fn scenario() -> Vec<Obs> {
    vec![
        temp(0, 55.0),
        run(0, "SW/131072", 1000.0),
        power(1, 8.0),
        power(2, 8.0),
        run(8, "SW/131072", 850.0), // GC pause while cool: no throttling, and no baseline
        temp(9, 60.0),
        run(12, "SW/131072", 1000.0), // back: the baseline
        run(14, "RR/4096", 400.0),
        temp(20, 72.0), // onset
        temp(24, 73.0),
        run(30, "SW/131072", 800.0), // 20 %
        power(31, 7.2),              // 10 % exactly
        run(32, "RR/4096", 380.0),   // 5 %: not a drop
        temp(40, 71.0),
        temp(60, 65.0), // recovery
        run(61, "SW/131072", 1000.0),
        power(62, 8.0),
        temp(70, 50.0),
        temp(200, 50.0), // 2 min after the onset: it is settled
    ]
}

fn scenario_episode() -> ThrottleEvent {
    let mut e = event("temperature", "throughput+power", "SW/131072", 20, Some(72.0), Some(70.0));
    e.throughput_drop_pct = Some(20.0);
    e.power_drop_pct = Some(drop_pct(8.0, 7.2));
    e.duration_s = 40.0;
    e.ongoing = false;
    e
}

fn is_thermal(o: &Obs) -> bool {
    matches!(o, Obs::Temperature { .. } | Obs::Smart { .. })
}

/// A deterministic shuffle (xorshift), so a failing order can be replayed from its seed.
fn shuffled(mut v: Vec<Obs>, seed: u64) -> Vec<Obs> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// A random merge of `a` and `b` that keeps the order within each.
fn interleaved(a: &[Obs], b: Vec<Obs>, seed: u64) -> Vec<Obs> {
    let mut x = seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1;
    let (mut a, mut b) = (a.iter().cloned().peekable(), b.into_iter().peekable());
    let mut out = Vec::new();
    loop {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let next = if x.is_multiple_of(2) { a.next().or_else(|| b.next()) } else { b.next().or_else(|| a.next()) };
        match next {
            Some(o) => out.push(o),
            None => return out,
        }
    }
}

#[test]
fn the_same_episodes_whatever_the_order_of_arrival() {
    assert!(drop_pct(8.0, 8.0 * 0.9) < 10.0, "the float boundary this scenario exercises");
    let want = vec![scenario_episode()];
    let all = scenario();
    let (thermal, signals): (Vec<Obs>, Vec<Obs>) = all.iter().cloned().partition(is_thermal);
    // Temperatures first (the agent's normal order: runs come after the probe).
    let mut d = detector(Some(70.0));
    feed(&mut d, thermal.iter().chain(&signals).cloned().collect());
    assert_eq!(stored(&d), want, "temperatures first");
    // Runs and power first.
    let mut d = detector(Some(70.0));
    feed(&mut d, signals.iter().chain(&thermal).cloned().collect());
    assert_eq!(stored(&d), want, "runs first");
    // Each side newest first.
    let mut d = detector(Some(70.0));
    feed(&mut d, thermal.iter().rev().chain(signals.iter().rev()).cloned().collect());
    assert_eq!(stored(&d), want, "each side newest first");
    // Interleaved: 200 random merges of the temperatures (in the order a live stream sends
    // them) with the runs and power samples in any order, one observation at a time.
    for seed in 0..200 {
        let mut d = detector(Some(70.0));
        feed(&mut d, interleaved(&thermal, shuffled(signals.clone(), seed), seed));
        assert_eq!(stored(&d), want, "interleaved, seed {seed}");
    }
}

/// One batch of `obs` as the agent sends it (namespace nvme0n1 for runs, drive power as a
/// `drive`-scope sample of zone nvme0).
fn batch_of(obs: &[Obs], seq: u64) -> Batch {
    use wattflip_proto::domain::convert_batch;
    let mut b = v1::Batch { agent_id: "h1".into(), sequence: seq, ..Default::default() };
    for o in obs {
        match o {
            Obs::Temperature { time_ns, source, celsius } => b.temperature.push(v1::TemperatureSample {
                time_ns: *time_ns,
                source: source.clone(),
                device: "nvme0".into(),
                sensor: "Composite".into(),
                celsius: *celsius,
            }),
            Obs::Run { start_ns, end_ns, pattern, mib_per_s } => {
                let (p, size) = pattern.split_once('/').unwrap();
                b.probe_runs.push(v1::ProbeRun {
                    run_id: format!("r{start_ns}{p}"),
                    device: "nvme0n1".into(),
                    bench: "granularity".into(),
                    experiment: format!("granularity/{p}"),
                    pattern: p.into(),
                    io_size_bytes: size.parse().unwrap(),
                    start_ns: *start_ns,
                    end_ns: *end_ns,
                    mib_per_s: *mib_per_s,
                    ..Default::default()
                })
            }
            Obs::Power { time_ns, watts } => b.power.push(v1::PowerSample {
                time_ns: *time_ns,
                source: "nvme_estimate".into(),
                zone: "nvme0".into(),
                scope: "drive".into(),
                method: v1::Method::Estimated as i32,
                watts: Some(*watts),
                ..Default::default()
            }),
            Obs::Smart { .. } => unreachable!("not in the scenario"),
        }
    }
    convert_batch("h1", b).unwrap()
}

#[test]
fn the_same_episodes_from_batches_split_across_streams() {
    let want = vec![scenario_episode()];
    let all = scenario();
    let (thermal, signals): (Vec<Obs>, Vec<Obs>) = all.iter().cloned().partition(is_thermal);
    // Live temperatures in batches of three, the probe's runs in one batch at the end, then the
    // same again as a resend after a reconnect: one episode, emitted once as closed.
    let mut d = detector(Some(70.0));
    let mut emitted = Vec::new();
    for (i, chunk) in thermal.chunks(3).enumerate() {
        emitted.extend(d.observe_batch("h1", &batch_of(chunk, i as u64 + 1)));
    }
    emitted.extend(d.observe_batch("h1", &batch_of(&signals, 10)));
    assert_eq!(emitted, want, "temperatures streamed, runs after the probe");
    assert!(d.observe_batch("h1", &batch_of(&all, 11)).is_empty(), "a resent batch changes nothing");
    // Two streams, each carrying half of both sides (odd and even observations), the odd one
    // first: its temperatures show an onset at 24 s, the even one's the real one at 20 s,
    // within the lateness bound. Then the settling reading.
    let (last, early) = all.split_last().unwrap();
    let mut d = detector(Some(70.0));
    let odd: Vec<Obs> = early.iter().skip(1).step_by(2).cloned().collect();
    let even: Vec<Obs> = early.iter().step_by(2).cloned().collect();
    assert!(d.observe_batch("h1", &batch_of(&odd, 1)).is_empty(), "nothing settled yet");
    assert!(d.observe_batch("h1", &batch_of(&even, 1)).is_empty(), "nothing settled yet");
    assert_eq!(d.observe_batch("h1", &batch_of(std::slice::from_ref(last), 2)), want, "split across two streams");
    // Runs in one batch before any temperature, then the temperatures one batch each.
    let mut d = detector(Some(70.0));
    assert!(d.observe_batch("h1", &batch_of(&signals, 1)).is_empty(), "runs alone decide nothing");
    for (i, t) in thermal.iter().enumerate() {
        d.observe_batch("h1", &batch_of(std::slice::from_ref(t), i as u64 + 2));
    }
    assert_eq!(stored(&d), want, "runs first, temperatures after");
}

#[test]
fn a_late_baseline_or_run_gives_a_late_event_rather_than_none() {
    // The hot period is closed and the drop run is known, but its baseline arrives last
    // (another stream): the episode appears then, closed.
    let mut d = detector(Some(70.0));
    let got = feed(&mut d, vec![temp(0, 60.0), temp(20, 75.0), temp(60, 60.0), temp(200, 60.0), run(30, "SW/131072", 700.0)]);
    assert!(got.is_empty(), "no baseline yet: {got:?}");
    let got = feed(&mut d, vec![run(10, "SW/131072", 1000.0)]);
    let mut e = event("temperature", "throughput", "SW/131072", 20, Some(75.0), Some(70.0));
    e.throughput_drop_pct = Some(30.0);
    e.duration_s = 40.0;
    e.ongoing = false;
    assert_eq!(got, vec![e.clone()]);
    // A larger drop of the same period arrives an hour later (within the retention): the
    // episode is emitted again, widened.
    let got = feed(&mut d, vec![temp(3600, 60.0), run(40, "SW/131072", 500.0)]);
    e.throughput_drop_pct = Some(50.0);
    assert_eq!(got, vec![e]);
    // Past the retention, data is dropped: nothing changes.
    assert!(feed(&mut d, vec![temp(RETENTION_NS / S + 7200, 60.0), run(45, "SW/131072", 100.0)]).is_empty());
}

#[test]
fn a_signal_past_the_temperatures_waits_until_the_lateness_bound() {
    // Temperatures stop at 20 s (hot); a drop at 30 s is judged once the drive's newest
    // observation is LATENESS_NS later, with the period still open.
    let mut d = detector(Some(70.0));
    assert!(feed(&mut d, vec![run(0, "SW/131072", 1000.0), temp(20, 75.0), run(30, "SW/131072", 800.0)]).is_empty());
    let later = 30 + LATENESS_NS / S;
    let got = feed(&mut d, vec![run(later, "RR/4096", 100.0)]);
    let mut e = event("temperature", "throughput", "SW/131072", 20, Some(75.0), Some(70.0));
    e.throughput_drop_pct = Some(20.0);
    e.duration_s = 11.0;
    assert_eq!(got, vec![e]);
}

#[test]
fn thresholds_have_a_tolerance() {
    // Exactly 10 % of a throughput of 12 MiB/s (10.8) and of a temperature reaching the
    // limit through float noise.
    assert!(drop_pct(12.0, 12.0 * 0.9) < 10.0);
    let kelvin = 343.15 - 273.150_000_000_000_03; // float noise: 69.99999999999994
    assert!(kelvin < 70.0);
    let mut d = detector(Some(70.0));
    feed(&mut d, vec![temp(0, 60.0), run(1, "SW/131072", 12.0), temp(2, kelvin), run(3, "SW/131072", 12.0 * 0.9), temp(9, 60.0), temp(200, 60.0)]);
    let mut e = event("temperature", "throughput", "SW/131072", 2, Some(kelvin), Some(70.0));
    e.throughput_drop_pct = Some(drop_pct(12.0, 12.0 * 0.9));
    e.duration_s = 7.0;
    e.ongoing = false;
    assert_eq!(stored(&d), vec![e]);
}

#[test]
fn the_critical_threshold_triggers_when_the_drive_reports_no_warning_threshold() {
    // CCTEMP 85 °C only: 84.85 °C is no trigger, 86 °C is, and the drop makes it an episode.
    let mut d = detector_with(None, Some(85.0));
    feed(
        &mut d,
        vec![
            run(0, "SW/131072", 2000.0),
            temp(5, 84.85),
            run(6, "SW/131072", 1990.0),  // still normal: the new baseline
            temp(10, 86.0),               // onset
            run(12, "SW/131072", 1592.0), // 20 % below 1990
            temp(30, 84.0),               // recovery
            temp(200, 60.0),
        ],
    );
    let mut closed = event("critical_temperature", "throughput", "SW/131072", 10, Some(86.0), None);
    closed.critical_celsius = Some(85.0);
    closed.throughput_drop_pct = Some(20.0);
    closed.duration_s = 20.0;
    closed.ongoing = false;
    assert_eq!(stored(&d), vec![closed]);
    // With both thresholds the warning one triggers (throttling starts there), and the event
    // carries both.
    let mut d = detector_with(Some(70.0), Some(85.0));
    let got = feed(&mut d, vec![run(0, "SW/131072", 1000.0), temp(1, 72.0), temp(200, 72.0), run(2, "SW/131072", 500.0)]);
    let mut e = event("temperature", "throughput", "SW/131072", 1, Some(72.0), Some(70.0));
    e.critical_celsius = Some(85.0);
    e.throughput_drop_pct = Some(50.0);
    e.duration_s = 2.0;
    assert_eq!(got, vec![e]);
    // Neither threshold known: a temperature alone never triggers.
    let mut d = detector_with(None, None);
    assert!(feed(&mut d, vec![run(0, "SW/131072", 1000.0), temp(1, 120.0), run(2, "SW/131072", 100.0), temp(200, 120.0)]).is_empty());
}

#[test]
fn thermal_counters_with_a_power_drop_and_no_threshold() {
    let mut d = detector(None);
    feed(
        &mut d,
        vec![
            smart(0, 0, 0),
            power(10, 10.0),
            power(20, 10.0),
            smart(60, 1, 0), // TMT1 transition: onset
            power(70, 8.5),  // 15 % below the 10 W mean
            run(75, "RW/4096", 200.0),
            smart(120, 1, 0), // counters still: recovered
            smart(200, 1, 0),
        ],
    );
    let mut closed = event("thermal_counters", "power", "", 60, Some(80.0), None);
    closed.power_drop_pct = Some(15.0);
    closed.duration_s = 60.0;
    closed.ongoing = false;
    assert_eq!(stored(&d), vec![closed]);
}

/// A record without counters (smartctl's NVMe log has none) between two nvme-cli records
/// that read the same: nothing moved. Read as zeros, the second record would look like a
/// TMT1 transition and the power drop after it like throttling.
#[test]
fn a_record_without_counters_neither_fires_nor_forgets_them() {
    let mut d = detector(None);
    let bare = |t: i64| Obs::Smart { time_ns: T0 + t * S, critical_warning: 0, counters: [None; 5], composite_celsius: None };
    feed(&mut d, vec![smart(0, 3, 0), power(10, 10.0), power(20, 10.0), bare(30), smart(60, 3, 0), power(70, 8.5)]);
    assert_eq!(stored(&d), Vec::<ThrottleEvent>::new());
}

#[test]
fn critical_warning_bit_and_both_signals_merge() {
    let mut d = detector(Some(90.0));
    feed(
        &mut d,
        vec![
            power(1, 12.0),
            run(2, "SW/131072", 2000.0),
            smart(5, 0, 2), // bit 1 set (e.g. a lowered threshold, as in QEMU)
            run(6, "SW/131072", 1500.0),
            power(8, 9.0),
            smart(20, 0, 0),
            smart(200, 0, 0),
        ],
    );
    let mut closed = event("critical_warning", "throughput+power", "SW/131072", 5, Some(80.0), Some(90.0));
    closed.throughput_drop_pct = Some(25.0);
    closed.power_drop_pct = Some(25.0);
    closed.duration_s = 15.0;
    closed.ongoing = false;
    assert_eq!(stored(&d), vec![closed]);
}

#[test]
fn series_that_must_not_trigger() {
    // Hot, but throughput stays within 10 % (9.9 % below).
    let mut d = detector(Some(70.0));
    assert!(feed(&mut d, vec![run(0, "SR/131072", 1000.0), temp(1, 75.0), run(2, "SR/131072", 901.0), temp(3, 60.0), temp(200, 60.0)]).is_empty());
    // A 30 % drop without any thermal trigger (e.g. a GC pause).
    let mut d = detector(Some(70.0));
    assert!(feed(&mut d, vec![temp(0, 50.0), run(1, "SW/131072", 1000.0), run(2, "SW/131072", 700.0), temp(200, 50.0)]).is_empty());
    // Hot, but the slow pattern has no pre-trigger value to compare with.
    let mut d = detector(Some(70.0));
    assert!(feed(&mut d, vec![run(0, "SR/131072", 1000.0), temp(1, 75.0), run(2, "SW/131072", 100.0), temp(3, 60.0), temp(200, 60.0)]).is_empty());
    // Below the threshold (69.85 °C vs 70): no trigger even with a drop.
    let mut d = detector(Some(70.0));
    assert!(feed(&mut d, vec![run(0, "SW/131072", 1000.0), temp(1, 69.85), run(2, "SW/131072", 500.0), temp(200, 69.85)]).is_empty());
    // Counters that never move; power falls.
    let mut d = detector(None);
    assert!(feed(&mut d, vec![smart(0, 3, 0), power(1, 10.0), smart(2, 3, 0), power(3, 5.0), smart(200, 3, 0)]).is_empty());
}

#[test]
fn resent_observations_do_not_duplicate_and_hosts_are_independent() {
    let mut d = detector(Some(70.0));
    let series = vec![run(0, "SW/131072", 1000.0), temp(1, 75.0), run(2, "SW/131072", 500.0), temp(200, 75.0)];
    assert_eq!(feed(&mut d, series.clone()).len(), 1);
    assert!(feed(&mut d, series.clone()).is_empty(), "a resent batch is ignored");
    // The same device name on another host has its own state (and no threshold there).
    let other: Vec<ThrottleEvent> = series.into_iter().flat_map(|o| d.observe("h2", "nvme0", o)).collect();
    assert!(other.is_empty());
}

#[test]
fn batches_map_namespaces_and_drive_power() {
    use wattflip_proto::domain::convert_batch;
    let mut d = detector(Some(70.0));
    let pr = |t: i64, mib: f64| v1::ProbeRun {
        run_id: format!("r{t}"),
        device: "nvme0n1".into(),
        bench: "governor_sweep".into(),
        experiment: "governor_sweep/SW:128KiB".into(),
        pattern: "SW".into(),
        io_size_bytes: 131_072,
        start_ns: T0 + t * S,
        end_ns: T0 + (t + 2) * S,
        mib_per_s: mib,
        energy_j: Some(20.0),
        ..Default::default()
    };
    let t =
        |s: i64, c: f64| v1::TemperatureSample { time_ns: T0 + s * S, source: "hwmon".into(), device: "nvme0".into(), sensor: "Composite".into(), celsius: c };
    let b = v1::Batch {
        agent_id: "h1".into(),
        sequence: 1,
        probe_runs: vec![pr(0, 1000.0), pr(10, 880.0)],
        temperature: vec![t(5, 71.0), t(12, 71.5), t(200, 72.0)],
        ..Default::default()
    };
    let got = d.observe_batch("h1", &convert_batch("h1", b).unwrap());
    let mut e = event("temperature", "throughput", "SW/131072", 5, Some(71.0), Some(70.0));
    e.throughput_drop_pct = Some(12.0);
    e.duration_s = 7.0;
    assert_eq!(got, vec![e]);
}
