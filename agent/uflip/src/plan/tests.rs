//! The unit tests of `plan.rs`, its experiment table and its placement (their own file: with them
//! plan.rs was over 1,200 lines).

use super::*;
use crate::alloc::Area;
use crate::pattern::{MixSpec, BLOCK};

const GIB: u64 = 1 << 30;

#[test]
fn thirty_four_experiments_in_order() {
    let e = experiments();
    assert_eq!(e.len(), 34);
    assert_eq!(e.iter().filter(|x| !x.writes()).count(), 15);
    assert!(e[..15].iter().all(|x| !x.writes()));
    assert!(e[15..].iter().all(|x| x.writes()));
    assert_eq!(e[15].name(), "granularity/RW");
    assert_eq!(e[21].name(), "mix/RR-RW");
    assert_eq!(e[22].name(), "granularity/SW");
    assert_eq!(e[27].name(), "mix/SR-SW");
    assert_eq!(e[29].name(), "mix/SW-RW");
    let tail: Vec<String> = e[30..].iter().map(|x| x.name()).collect();
    assert_eq!(tail, vec!["parallelism/RW", "partitioning/SW", "parallelism/SW", "order/SW"]);
    // Per-bench experiment counts: 4+4+4+2+2+4+6+4+4.
    let count = |b: Bench| e.iter().filter(|x| x.bench == b).count();
    let counts: Vec<usize> = Bench::ALL.iter().map(|&b| count(b)).collect();
    assert_eq!(counts, vec![4, 4, 4, 2, 2, 4, 6, 4, 4]);
    assert_eq!(e.iter().map(|x| x.number).collect::<Vec<_>>(), (1..=34).collect::<Vec<_>>());
}

#[test]
fn bench_selection() {
    assert_eq!(Bench::parse_list("all").unwrap().len(), 9);
    assert_eq!(Bench::parse_list("mix, granularity").unwrap(), vec![Bench::Mix, Bench::Granularity]);
    assert_eq!(Bench::parse_list("PBU").unwrap(), vec![Bench::Bursts]);
    assert_eq!(Bench::parse_list("granularity,nope").unwrap_err(), PlanError::UnknownBench("nope".into()));
}

#[test]
fn mix_counts_example_of_section_5() {
    // SR (0/128) with RW (50/5116) at R = 1 → IgnIO = 100, IOCount = 5166.
    assert_eq!(mix_counts(0, 128, 50, 5116, 1), (100, 5166));
    assert_eq!(mix_counts(0, 128, 50, 5116, 0), (50, 5116));
    // R = −1: roles swapped: max(0 + (−1)·1 + 1, 50·2/1 + 1) = 101.
    assert_eq!(mix_counts(0, 128, 50, 5116, -1), (101, 5167));
    // R = 4, both without start-up: max(1 − 4, 0 + 1) = 1.
    assert_eq!(mix_counts(0, 128, 0, 256, 4), (1, 257));
}

#[test]
fn mix_split_matches_generator() {
    for (count, ratio) in [(7u64, 2i64), (7, -2), (4, 0), (10, 1), (9, -1), (5, 64)] {
        let mut s = PatternSpec::new(Baseline::SR, 512, count, 0, 1 << 20);
        s.mix = Some(MixSpec { baseline2: Baseline::SW, ratio, target_offset2: 1 << 20, target_size2: 1 << 20 });
        let writes = s.generate().unwrap().iter().filter(|io| io.mode == crate::pattern::Mode::Write).count() as u64;
        assert_eq!(mix_split(count, ratio), (count - writes, writes), "count {count} ratio {ratio}");
    }
    assert_eq!(mix_split(7, 2), (4, 3));
    assert_eq!(mix_split(7, -2), (3, 4));
}

#[test]
fn run_order_values_and_repetitions() {
    let mut o = PlanOptions::small(GIB);
    o.benches = vec![Bench::Granularity, Bench::Order];
    let p = build_plan(&o);
    // GRA: 4 baselines × 4 sizes × 3 reps; ORD: 2 × 4 × 3.
    assert_eq!(p.total_runs(), 4 * 4 * 3 + 2 * 4 * 3);
    let nums: Vec<u32> = p.runs.iter().map(|r| r.experiment_number).collect();
    let mut sorted = nums.clone();
    sorted.sort();
    assert_eq!(nums, sorted, "runs are emitted in increasing experiment order");
    let first: Vec<(String, f64, u32)> = p.runs[..4].iter().map(|r| (r.experiment.clone(), r.value, r.repetition)).collect();
    assert_eq!(
        first,
        vec![
            ("granularity/SR".into(), 512.0, 0),
            ("granularity/SR".into(), 512.0, 1),
            ("granularity/SR".into(), 512.0, 2),
            ("granularity/SR".into(), 4096.0, 0)
        ]
    );
    // Order: SR (exp 8) comes in the read-only block, before the GRA writes; SW last.
    let order_exps: Vec<&str> = p.runs.iter().map(|r| r.experiment.as_str()).collect();
    let pos = |n: &str| order_exps.iter().position(|e| *e == n).unwrap();
    assert!(pos("order/SR") < pos("granularity/RW"));
    assert!(pos("granularity/RW") < pos("granularity/SW"));
    assert_eq!(p.runs.last().unwrap().experiment, "order/SW");
    assert!(p.runs.iter().enumerate().all(|(i, r)| r.index == i));
    // Granularity RW IOCount/IgnoreIO come from RW's own table entries (§3.5 bug 2).
    let rw = p.runs.iter().find(|r| r.experiment == "granularity/RW").unwrap();
    match &rw.work {
        Work::Pattern(ps) => {
            assert_eq!((ps[0].io_count, ps[0].ignore_io), (512, 16));
            assert_eq!((ps[0].target_offset, ps[0].target_size), (0, GIB));
        }
        _ => panic!("pattern expected"),
    }
}

fn write_areas(p: &Plan) -> Vec<(usize, Area)> {
    let mut v = Vec::new();
    for r in &p.runs {
        if let Work::Pattern(ps) = &r.work {
            for s in ps {
                let mut areas = Vec::new();
                if s.baseline == Baseline::SW {
                    areas.push(Area { start: s.target_offset, end: s.target_offset + s.target_size + s.io_shift });
                }
                if let Some(m) = &s.mix {
                    if m.baseline2 == Baseline::SW {
                        areas.push(Area { start: m.target_offset2, end: m.target_offset2 + m.target_size2 });
                    }
                }
                for a in areas {
                    // The actual IOs of plain SW runs stay inside the planned area.
                    if s.mix.is_none() {
                        for io in s.generate().unwrap() {
                            assert!(io.offset >= a.start && io.offset + io.len <= a.end, "run {} IO outside area", r.index);
                        }
                    }
                    v.push((r.index, a));
                }
            }
        }
    }
    v
}

fn fresh_bytes(p: &Plan) -> u64 {
    write_areas(p).iter().map(|(_, a)| crate::alloc::round_up_block(a.len())).sum()
}

#[test]
fn spec_defaults_give_348_points() {
    // 44 GRA + 32 ALI + 68 LOC + 18 PAT + 22 ORD + 20 PAR + 84 MIX + 32 PIO + 28 PBU = 348 points
    // (the paper's full run has 358, §4.4), × nbRun 3.
    let p = build_plan(&PlanOptions::spec_defaults(64 * GIB));
    assert_eq!(p.total_runs(), 348 * 3);
    assert_eq!(p.runs.iter().filter(|r| !r.writes()).count(), 3 * (22 + 16 + 34 + 9 + 11 + 10 + 14 + 16 + 14));
}

#[test]
fn small_all_plan_fits_one_gib() {
    let p = build_plan(&PlanOptions::small(GIB));
    let used = fresh_bytes(&p);
    assert!(used <= GIB, "fresh areas need {used} bytes");
    assert!(p.runs.iter().all(|r| !r.warnings.contains(&Warning::DeviceTooSmall)), "a 1 GiB file holds the small plan");
}

#[test]
fn sequential_write_runs_never_overlap() {
    let mut o = PlanOptions::small(8 * GIB);
    o.benches = Bench::ALL.to_vec();
    let p = build_plan(&o);
    assert_eq!(p.total_runs(), 3 * (4 * 4 + 4 * 3 + 4 * 3 + 2 * 3 + 2 * 4 + 4 * 3 + 6 * 4 + 4 * 3 + 4 * 2));
    let areas = write_areas(&p);
    assert!(areas.len() > 100);
    for (i, (ra, a)) in areas.iter().enumerate() {
        for (rb, b) in &areas[i + 1..] {
            assert!(!a.overlaps(b), "SW areas of runs {ra} and {rb} overlap: {a:?} {b:?}");
        }
    }
    assert!(p.runs.iter().all(|r| !r.warnings.contains(&Warning::DeviceTooSmall)));
}

#[test]
fn exhausted_device_falls_back_with_warning() {
    let mut o = PlanOptions::small(64 << 20);
    o.benches = vec![Bench::Granularity];
    o.values.granularity_io_sizes = vec![128 * KIB];
    o.counts.io_count = [8, 8, 256, 8]; // SW run = 32 MiB; the third repetition has no room
    let p = build_plan(&o);
    let sw: Vec<&RunSpec> = p.runs.iter().filter(|r| r.pattern == "SW").collect();
    assert_eq!(sw.len(), 3);
    assert_eq!(sw[0].warnings, vec![]);
    assert_eq!(sw[1].warnings, vec![]);
    assert_eq!(sw[2].warnings, vec![Warning::DeviceTooSmall]);
}

#[test]
fn locality_window_and_clip() {
    let mut o = PlanOptions::small(64 << 20);
    o.benches = vec![Bench::Locality];
    o.repetitions = 1;
    o.values.locality_factors = vec![4, 4096];
    let p = build_plan(&o);
    let get = |e: &str, v: f64| -> (PatternSpec, Vec<Warning>) {
        let r = p.runs.iter().find(|r| r.experiment == e && r.value == v).unwrap();
        match &r.work {
            Work::Pattern(ps) => (ps[0].clone(), r.warnings.clone()),
            _ => panic!(),
        }
    };
    let (s, w) = get("locality/SW", 4.0);
    assert_eq!(s.target_size, 4 * 32 * KIB);
    assert_eq!(s.target_offset % BLOCK, 0);
    assert!(w.is_empty());
    // 4096 × 32 KiB = 128 MiB > 64 MiB: clipped to the device and flagged.
    let (s, w) = get("locality/RR", 4096.0);
    assert_eq!((s.target_offset, s.target_size), (0, 64 << 20));
    assert_eq!(w, vec![Warning::TestExceedDevice]);
}

#[test]
fn parallel_slices_and_seeds() {
    let mut o = PlanOptions::small(GIB);
    o.benches = vec![Bench::Parallelism];
    o.repetitions = 1;
    o.values.parallel_degrees = vec![4];
    let p = build_plan(&o);
    let rr = p.runs.iter().find(|r| r.experiment == "parallelism/RR").unwrap();
    let Work::Pattern(ps) = &rr.work else { panic!() };
    let got: Vec<(u64, u64, u32)> = ps.iter().map(|s| (s.target_offset, s.target_size, s.process_id)).collect();
    let q = GIB / 4;
    assert_eq!(got, vec![(0, q, 0), (q, q, 1), (2 * q, q, 2), (3 * q, q, 3)]);
    let mut seeds: Vec<u64> = ps.iter().map(|s| s.seed).collect();
    seeds.dedup();
    assert_eq!(seeds.len(), 4);
    // SW processes each get a fresh area near their quarter.
    let sw = p.runs.iter().find(|r| r.experiment == "parallelism/SW").unwrap();
    let Work::Pattern(ps) = &sw.work else { panic!() };
    for (i, s) in ps.iter().enumerate() {
        assert_eq!(s.target_size, 128 * 32 * KIB);
        assert!(s.target_offset >= i as u64 * q / 2, "process {i} placed at {}", s.target_offset);
    }
}

#[test]
fn plan_is_deterministic_and_quick_is_small() {
    let a = build_plan(&PlanOptions::small(GIB));
    let b = build_plan(&PlanOptions::small(GIB));
    assert_eq!(a, b);
    let q = build_plan(&PlanOptions::quick(GIB));
    assert_eq!(q.total_runs(), 12);
    let sizes: Vec<f64> = q.runs.iter().map(|r| r.value).collect();
    assert_eq!(sizes[..3], [4096.0, 32768.0, 131072.0]);
    assert!(q.read_only().runs.iter().all(|r| !r.writes()));
    assert_eq!(q.read_only().total_runs(), 6);
}

#[test]
fn prepare_and_format_come_first() {
    let mut o = PlanOptions::quick(GIB);
    o.prepare = true;
    o.format = Some(FormatKind::Sequential);
    let p = build_plan(&o);
    assert_eq!(p.runs[0].experiment, "prepare/SPE");
    assert_eq!(p.runs[1].experiment, "prepare/SIO.SR");
    assert!(p.runs[1].keep_series);
    assert_eq!(p.runs[1 + 4].experiment, "format/sequential");
    assert_eq!(p.runs[6].experiment, "granularity/SR");
    assert_eq!(p.total_runs(), 1 + 4 + 1 + 12);
}

#[test]
fn spe_is_one_run_with_three_legs_and_no_pause_inside() {
    let mut o = PlanOptions::quick(GIB);
    o.benches = vec![];
    o.prepare = true;
    o.io_size = 4096;
    o.spe_io_count = 100;
    o.prepare_io_count = 50;
    o.repetitions = 1;
    o.prepare_pause = Duration::from_secs(10);
    let p = build_plan(&o);
    // Exact sequence: SPE, then one SIO per baseline; a pause after each, none inside SPE.
    let seq: Vec<(&str, &str, Duration)> = p.runs.iter().map(|r| (r.experiment.as_str(), r.pattern.as_str(), r.pause_after)).collect();
    let ten = Duration::from_secs(10);
    assert_eq!(
        seq,
        vec![
            ("prepare/SPE", "SR-RW-SR", ten),
            ("prepare/SIO.SR", "SR", ten),
            ("prepare/SIO.RR", "RR", ten),
            ("prepare/SIO.SW", "SW", ten),
            ("prepare/SIO.RW", "RW", ten),
        ]
    );
    let Work::Phases(legs) = &p.runs[0].work else {
        panic!("SPE must be a phased run: {:?}", p.runs[0].work);
    };
    let shape: Vec<(Baseline, u64, u64, u64, u64)> = legs.iter().map(|l| (l.baseline, l.io_size, l.io_count, l.ignore_io, l.pause_io_us)).collect();
    assert_eq!(shape, vec![(Baseline::SR, 4096, 100, 0, 0), (Baseline::RW, 4096, 100, 0, 0), (Baseline::SR, 4096, 100, 0, 0),]);
    // Both SR legs read the same window in the first half; the RW leg writes from there up.
    let (sr, rw) = (&legs[0], &legs[1]);
    assert_eq!((legs[2].target_offset, legs[2].target_size), (sr.target_offset, sr.target_size));
    assert_eq!(sr.target_size, 100 * 4096);
    assert!(sr.target_offset + sr.target_size <= GIB / 2);
    assert_eq!(rw.target_offset, sr.target_offset);
    assert_eq!(rw.target_size, GIB - sr.target_offset);
    assert!(p.runs[0].writes() && p.runs[0].keep_series);
    assert_eq!(p.runs[0].parameters()["legs"], "SR,RW,SR");
}

/// `io_scale` lengthens one run: its IOCount ×4 (8 → 32 IOs of 128 KiB) and its fresh window
/// with it (1 → 4 MiB), IgnoreIO unchanged; the other runs keep their counts. A scale that no
/// longer fits the device brings back the plan's own warning.
#[test]
fn io_scale_lengthens_one_run_and_its_window() {
    let mut o = PlanOptions::small(64 << 20);
    o.benches = vec![Bench::Granularity];
    o.values.granularity_io_sizes = vec![128 * KIB];
    o.repetitions = 1;
    o.counts = BaselineTable { io_count: [8, 8, 8, 8], ignore_io: [0, 0, 0, 2] };
    let base = build_plan(&o);
    let sw = base.runs.iter().position(|r| r.pattern == "SW").unwrap();
    o.io_scale = vec![1.0; base.runs.len()];
    o.io_scale[sw] = 4.0;
    let p = build_plan(&o);
    let first = |r: &RunSpec| match &r.work {
        Work::Pattern(ps) => ps[0].clone(),
        _ => panic!(),
    };
    let s = first(&p.runs[sw]);
    assert_eq!((s.io_count, s.ignore_io, s.target_size), (32, 0, 4 << 20));
    for (i, r) in p.runs.iter().enumerate().filter(|(i, _)| *i != sw) {
        assert_eq!(first(r).io_count, 8, "run {i}");
    }
    assert_eq!(BaselineTable { io_count: [8, 8, 8, 3], ignore_io: [0, 0, 0, 2] }.scaled(0.1).io_count, [1, 1, 1, 3]);
    o.io_scale[sw] = 128.0; // 1024 × 128 KiB = 128 MiB on a 64 MiB device
    assert_eq!(build_plan(&o).runs[sw].warnings, vec![Warning::DeviceTooSmall, Warning::TestExceedDevice]);
}
