//! Run placement (spec §5): where each run's IOs go on the device, with the fresh-area allocator
//! for writes that want never-written space, the preparation runs (§6.2) and [`build_plan`], which
//! puts the plan together. A new micro-benchmark gets a placement arm in `place`.

use super::{derive_seed, experiments, mix_counts, mix_split, BaselineTable, Bench, Experiment, Plan, PlanOptions, RunSpec, Warning, Work};
use crate::alloc::FreshAreaAllocator;
use crate::pattern::{Baseline, MixSpec, PatternSpec, BLOCK};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

struct Planner<'a> {
    o: &'a PlanOptions,
    alloc: FreshAreaAllocator,
    rng: ChaCha8Rng,
    dev: u64,
}

struct Placed {
    to: u64,
    ts: u64,
    warnings: Vec<Warning>,
}

impl Planner<'_> {
    /// Random BLOCK-aligned offset with room for `size` inside `[lo, lo+span)`; clipped + Warn 2 when
    /// `size` does not fit.
    fn random_in(&mut self, lo: u64, span: u64, size: u64) -> Placed {
        if size > span {
            return Placed { to: lo, ts: span, warnings: vec![Warning::TestExceedDevice] };
        }
        let slots = (span - size) / BLOCK;
        let to = lo + self.rng.random_range(0..=slots) * BLOCK;
        Placed { to, ts: size, warnings: vec![] }
    }

    fn random(&mut self, size: u64) -> Placed {
        self.random_in(0, self.dev, size)
    }

    /// A fresh area (best fit); when none is left, a random offset and Warn 1 (§5 ORD rule,
    /// applied to every write that wants a fresh area).
    fn fresh(&mut self, size: u64) -> Placed {
        if size <= self.dev {
            if let Some(a) = self.alloc.alloc_best_fit(size) {
                return Placed { to: a.start, ts: size, warnings: vec![] };
            }
        }
        let mut p = self.random(size);
        p.warnings.insert(0, Warning::DeviceTooSmall);
        p
    }

    fn whole(&self) -> Placed {
        Placed { to: 0, ts: self.dev, warnings: vec![] }
    }

    /// Window for a plain baseline of `size` bytes (GRA/ALI/PIO/PBU rule of §5).
    fn baseline_window(&mut self, b: Baseline, size: u64) -> Placed {
        match b {
            Baseline::RR | Baseline::RW => self.whole(),
            Baseline::SR => self.random(size),
            Baseline::SW => self.fresh(size),
        }
    }
}

/// Build the plan (pure; deterministic for given options).
pub fn build_plan(o: &PlanOptions) -> Plan {
    let mut pl =
        Planner { o, alloc: FreshAreaAllocator::new(o.device_size), rng: ChaCha8Rng::seed_from_u64(derive_seed(o.seed, 0x504c_414e, 0)), dev: o.device_size };
    let mut runs: Vec<RunSpec> = Vec::new();
    if o.prepare {
        prepare_runs(&mut pl, &mut runs);
    }
    if let Some(kind) = o.format {
        let index = runs.len();
        runs.push(RunSpec {
            index,
            bench: "format".into(),
            experiment: format!("format/{}", kind.as_str()),
            experiment_number: 0,
            pattern: "FORMAT".into(),
            varying: "none".into(),
            value: 0.0,
            repetition: 0,
            work: Work::Format { kind, seed: derive_seed(o.seed, index as u64, 0) },
            pause_after: o.prepare_pause,
            warnings: vec![],
            keep_series: false,
        });
        // A format resets freshness (§5 "since the last format").
        pl.alloc = FreshAreaAllocator::new(o.device_size);
    }
    for exp in experiments().into_iter().filter(|e| o.benches.contains(&e.bench)) {
        for (value, vnum) in values_of(o, exp.bench) {
            for rep in 0..o.repetitions {
                let index = runs.len();
                let seed = derive_seed(o.seed, index as u64, 1);
                let counts = o.counts.scaled(o.io_scale.get(index).copied().unwrap_or(1.0));
                let (work, warnings) = place(&mut pl, &exp, vnum, seed, &counts);
                runs.push(RunSpec {
                    index,
                    bench: exp.bench.name().into(),
                    experiment: exp.name(),
                    experiment_number: exp.number,
                    pattern: exp.pattern().into(),
                    varying: exp.bench.varying().into(),
                    value,
                    repetition: rep,
                    work,
                    pause_after: o.pause_between_runs,
                    warnings,
                    keep_series: false,
                });
            }
        }
    }
    Plan { runs, seed: o.seed, device_size: o.device_size, emit_fio_iolog: o.emit_fio_iolog.clone(), trace_dir: o.trace_dir.clone() }
}

/// A value of the varying parameter, both as f64 for the result and as the raw integer.
#[derive(Clone, Copy)]
enum V {
    U(u64),
    I(i64),
}

impl V {
    fn u(self) -> u64 {
        match self {
            V::U(x) => x,
            V::I(x) => x.max(0) as u64,
        }
    }
    fn i(self) -> i64 {
        match self {
            V::U(x) => x as i64,
            V::I(x) => x,
        }
    }
}

fn values_of(o: &PlanOptions, b: Bench) -> Vec<(f64, V)> {
    let v = &o.values;
    let u = |l: &[u64]| l.iter().map(|&x| (x as f64, V::U(x))).collect::<Vec<_>>();
    let i = |l: &[i64]| l.iter().map(|&x| (x as f64, V::I(x))).collect::<Vec<_>>();
    match b {
        Bench::Granularity => u(&v.granularity_io_sizes),
        Bench::Alignment => u(&v.alignment_shifts),
        Bench::Locality => u(&v.locality_factors),
        Bench::Partitioning => u(&v.partitions),
        Bench::Order => i(&v.orders),
        Bench::Parallelism => v.parallel_degrees.iter().map(|&d| (d as f64, V::U(d as u64))).collect(),
        Bench::Mix => i(&v.mix_ratios),
        Bench::Pause => u(&v.pause_io_us),
        Bench::Bursts => u(&v.burst_io),
    }
}

/// Placement of one run (§5) with its IO `counts` (the plan's, or scaled for this run).
fn place(pl: &mut Planner<'_>, exp: &Experiment, v: V, seed: u64, counts: &BaselineTable) -> (Work, Vec<Warning>) {
    let o = pl.o;
    let b = exp.base;
    let mut spec = PatternSpec::new(b, o.io_size, counts.count(b), 0, 0);
    spec.ignore_io = counts.ignore(b);
    spec.seed = seed;
    // Every arm sets it (Parallelism returns its own work and warnings).
    let warnings;
    match exp.bench {
        Bench::Granularity | Bench::Alignment | Bench::Pause | Bench::Bursts => {
            match exp.bench {
                Bench::Granularity => spec.io_size = v.u(),
                Bench::Alignment => spec.io_shift = v.u(),
                Bench::Pause => spec.pause_io_us = v.u(),
                _ => {
                    spec.burst_io = v.u().max(1);
                    spec.pause_burst_us = o.pause_burst_us;
                }
            }
            let mut size = spec.io_size.saturating_mul(spec.io_count);
            if spec.io_shift != 0 {
                size += spec.io_size; // §5: room for the shifted last IO
            }
            let p = pl.baseline_window(b, size);
            spec.target_offset = p.to;
            spec.target_size = p.ts;
            warnings = p.warnings;
        }
        Bench::Locality => {
            let ts = v.u().max(1).saturating_mul(spec.io_size);
            let p = if b.mode() == crate::pattern::Mode::Write && v.u() <= o.locality_fresh_max { pl.fresh(ts) } else { pl.random(ts) };
            spec.target_offset = p.to;
            spec.target_size = p.ts;
            warnings = p.warnings;
        }
        Bench::Partitioning => {
            spec.partitions = v.u().max(1);
            let p = if b.mode() == crate::pattern::Mode::Write {
                // Deviation (documented): every SW run gets its own fresh window so the §5 goal
                // holds for all P; the original reused the whole device for P > 16.
                pl.fresh(spec.io_size.saturating_mul(spec.io_count).saturating_mul(o.partition_spread.max(1)))
            } else {
                let unit = 256 * BLOCK;
                let ts = if pl.dev >= unit { pl.dev / unit * unit } else { pl.dev / BLOCK * BLOCK };
                Placed { to: 0, ts, warnings: vec![] }
            };
            spec.target_offset = p.to;
            spec.target_size = p.ts;
            warnings = p.warnings;
        }
        Bench::Order => {
            spec.order = v.i();
            let ts =
                if spec.order == 0 { BLOCK.max(spec.io_size) } else { spec.order.unsigned_abs().saturating_mul(spec.io_size).saturating_mul(spec.io_count) };
            let p = if b.mode() == crate::pattern::Mode::Write { pl.fresh(ts) } else { pl.random(ts) };
            spec.target_offset = p.to;
            spec.target_size = p.ts;
            warnings = p.warnings;
        }
        Bench::Parallelism => return place_parallel(pl, b, &spec, v, seed),
        Bench::Mix => warnings = place_mix(pl, exp, &mut spec, v, counts),
    }
    (Work::Pattern(vec![spec]), warnings)
}

/// ParallelDegree (§5): D processes, each in its own slice of the device (reads, random writes) or
/// in a fresh area near the start of its share (sequential writes).
fn place_parallel(pl: &mut Planner<'_>, b: Baseline, spec: &PatternSpec, v: V, seed: u64) -> (Work, Vec<Warning>) {
    let mut warnings = Vec::new();
    let d = (v.u().clamp(1, crate::pattern::MAX_PARALLEL as u64)) as u32;
    let slice = pl.dev / d as u64 / BLOCK * BLOCK;
    let size = spec.io_size.saturating_mul(spec.io_count);
    let start = pl.alloc.lowest_free().unwrap_or(0);
    let mut procs = Vec::new();
    for p in 0..d {
        let mut s = spec.clone();
        s.parallel_degree = d;
        s.process_id = p;
        s.seed = derive_seed(seed, p as u64, 2);
        let placed = match b {
            Baseline::RR | Baseline::RW => Placed { to: p as u64 * slice, ts: slice, warnings: vec![] },
            Baseline::SR => pl.random_in(p as u64 * slice, slice, size),
            Baseline::SW => {
                let near = start + p as u64 * (pl.dev.saturating_sub(start) / d as u64);
                match pl.alloc.alloc_nearest_after(near, size) {
                    Some(a) => Placed { to: a.start, ts: size, warnings: vec![] },
                    None => {
                        let mut r = pl.random(size);
                        r.warnings.insert(0, Warning::DeviceTooSmall);
                        r
                    }
                }
            }
        };
        s.target_offset = placed.to;
        s.target_size = placed.ts;
        for w in placed.warnings {
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
        procs.push(s);
    }
    (Work::Pattern(procs), warnings)
}

/// Mix (§5): each sub-pattern's window for the IOs it receives; the warnings of both, once each.
fn place_mix(pl: &mut Planner<'_>, exp: &Experiment, spec: &mut PatternSpec, v: V, counts: &BaselineTable) -> Vec<Warning> {
    let b = exp.base;
    let mut warnings = Vec::new();
    let b2 = exp.base2.unwrap_or(Baseline::RR);
    let ratio = v.i();
    let (ign, count) = mix_counts(counts.ignore(b), counts.count(b), counts.ignore(b2), counts.count(b2), ratio);
    spec.ignore_io = ign;
    spec.io_count = count;
    // Each sub-pattern's window holds exactly the IOs it receives (§3.2 interleaving), so
    // fresh areas are not wasted on IOs that go to the other pattern.
    let (n1, n2) = mix_split(count, ratio);
    let p1 = pl.baseline_window(b, spec.io_size * n1.max(1));
    let p2 = pl.baseline_window(b2, spec.io_size * n2.max(1));
    spec.target_offset = p1.to;
    spec.target_size = p1.ts;
    spec.mix = Some(MixSpec { baseline2: b2, ratio, target_offset2: p2.to, target_size2: p2.ts });
    for w in p1.warnings.into_iter().chain(p2.warnings) {
        if !warnings.contains(&w) {
            warnings.push(w);
        }
    }
    warnings
}

/// §6.2 preparation runs: SPE (one run of three back-to-back legs SR, RW, SR) and SIO.SR/RR/SW/RW
/// (nbRun × IOC2 each), each followed by `prepare_pause`. Their per-IO series are kept for
/// [`crate::calibrate`] and [`crate::spe_effect`].
fn prepare_runs(pl: &mut Planner<'_>, runs: &mut Vec<RunSpec>) {
    let o = pl.o;
    let sz = o.io_size;
    let push = |runs: &mut Vec<RunSpec>, exp: String, pattern: &str, varying: &str, value: f64, rep: u32, spec: PatternSpec, warnings: Vec<Warning>| {
        let index = runs.len();
        let mut spec = spec;
        spec.seed = derive_seed(o.seed, index as u64, 1);
        runs.push(RunSpec {
            index,
            bench: "prepare".into(),
            experiment: exp,
            experiment_number: 0,
            pattern: pattern.into(),
            varying: varying.into(),
            value,
            repetition: rep,
            work: Work::Pattern(vec![spec]),
            pause_after: o.prepare_pause,
            warnings,
            keep_series: true,
        });
    };
    // SPE: SR at a random offset in the first half, RW anywhere above it, SR again at the same place,
    // as ONE run: a pause between the RW and the second SR would let the drive finish its
    // background work and hide exactly the slowdown SPE exists to show (§6.2).
    let spe = o.spe_io_count.max(1);
    let half = (pl.dev / 2).max(sz * spe);
    let p = pl.random_in(0, half.min(pl.dev), sz * spe);
    let index = runs.len();
    let mut legs = [
        PatternSpec::new(Baseline::SR, sz, spe, p.to, p.ts),
        PatternSpec::new(Baseline::RW, sz, spe, p.to, (pl.dev - p.to) / sz * sz),
        PatternSpec::new(Baseline::SR, sz, spe, p.to, p.ts),
    ];
    for (leg, s) in legs.iter_mut().enumerate() {
        s.seed = derive_seed(o.seed, index as u64, 1 + leg as u64);
    }
    runs.push(RunSpec {
        index,
        bench: "prepare".into(),
        experiment: "prepare/SPE".into(),
        experiment_number: 0,
        pattern: "SR-RW-SR".into(),
        varying: "legs".into(),
        value: 3.0,
        repetition: 0,
        work: Work::Phases(legs.to_vec()),
        pause_after: o.prepare_pause,
        warnings: p.warnings,
        keep_series: true,
    });
    // SIO: long runs of each baseline to read start-up length and period (§6.3).
    let n = o.prepare_io_count.max(1);
    for b in Baseline::ALL {
        for rep in 0..o.repetitions {
            let size = sz * n;
            // Without a format afterwards, SW preparation runs must also take fresh areas.
            let p = match b {
                Baseline::SW if o.format.is_none() => pl.fresh(size),
                Baseline::SW | Baseline::SR => pl.random(size),
                _ => pl.whole(),
            };
            let mut s = PatternSpec::new(b, sz, n, p.to, p.ts);
            s.ignore_io = 0;
            push(runs, format!("prepare/SIO.{b}"), b.as_str(), "io_count", n as f64, rep, s, p.warnings);
        }
    }
}
