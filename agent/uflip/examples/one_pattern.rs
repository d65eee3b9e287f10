//! Run one uFLIP pattern on a file and print its statistics as one JSON line; used by
//! `bench/vs-fio.sh` to compare the engine with fio on byte-identical IO sequences.
//!
//! ```text
//! cargo run --release -p wattflip-uflip --example one_pattern -- \
//!     --file /var/tmp/probe.img --size 1073741824 --pattern RR --io-size 4096 \
//!     --io-count 4000 [--ignore-io 0] [--parallel 1] [--seed 1] [--iolog-dir DIR] [--iolog-only 1] \
//!     [--trace-dir DIR] [--consent ID]
//! ```
//!
//! `--iolog-only 1` writes the iolog(s) without issuing any IO, so fio can go first in a pair.
//! `--trace-dir DIR` writes every IO's start and latency (the engine's per-IO trace CSV), so the
//! script can compute the same statistics over the same span for both tools. `--consent ID` opens
//! `--file` as a block device whose data may be destroyed (ID as `probe --destroy-consent` takes
//! it, e.g. `loop:<backing file>`), so both tools can be compared without a filesystem between.
//!
//! Windows: random patterns cover the whole file (or slice p of D); sequential ones start at the
//! slice's first byte and wrap inside it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use wattflip_uflip::plan::derive_seed;
use wattflip_uflip::*;

struct Args {
    file: PathBuf,
    size: u64,
    pattern: Baseline,
    io_size: u64,
    io_count: u64,
    ignore_io: u64,
    parallel: u32,
    seed: u64,
    iolog_dir: Option<PathBuf>,
    iolog_only: bool,
    trace_dir: Option<PathBuf>,
    consent: Option<String>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        file: PathBuf::new(),
        size: 1 << 30,
        pattern: Baseline::RR,
        io_size: 4096,
        io_count: 1000,
        ignore_io: 0,
        parallel: 1,
        seed: 1,
        iolog_dir: None,
        iolog_only: false,
        trace_dir: None,
        consent: None,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut it = argv.iter();
    while let Some(k) = it.next() {
        let v = it.next().ok_or_else(|| format!("{k} needs a value"))?;
        let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{k} {v}: {e}"));
        match k.as_str() {
            "--file" => a.file = PathBuf::from(v),
            "--size" => a.size = num(v)?,
            "--pattern" => a.pattern = Baseline::parse(v).ok_or_else(|| format!("--pattern {v}: use SR, RR, SW or RW"))?,
            "--io-size" => a.io_size = num(v)?,
            "--io-count" => a.io_count = num(v)?,
            "--ignore-io" => a.ignore_io = num(v)?,
            "--parallel" => a.parallel = num(v)? as u32,
            "--seed" => a.seed = num(v)?,
            "--iolog-dir" => a.iolog_dir = Some(PathBuf::from(v)),
            "--iolog-only" => a.iolog_only = num(v)? != 0,
            "--trace-dir" => a.trace_dir = Some(PathBuf::from(v)),
            "--consent" => a.consent = Some(v.clone()),
            _ => return Err(format!("unknown option {k}")),
        }
    }
    if a.file.as_os_str().is_empty() {
        return Err("--file is required".into());
    }
    Ok(a)
}

fn main() -> ExitCode {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("one_pattern: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = match &a.consent {
        Some(id) => TargetOptions::block(&a.file, vec![id.clone()]),
        None => TargetOptions::file(&a.file, a.size),
    };
    let target = match Target::open(&opts) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("one_pattern: {e}");
            return ExitCode::from(1);
        }
    };
    let d = a.parallel.max(1);
    let slice = target.size / d as u64 / a.io_size * a.io_size;
    let procs: Vec<PatternSpec> = (0..d)
        .map(|p| {
            let mut s = PatternSpec::new(a.pattern, a.io_size, a.io_count, p as u64 * slice, slice);
            s.ignore_io = a.ignore_io;
            s.parallel_degree = d;
            s.process_id = p;
            s.seed = derive_seed(a.seed, p as u64, 0);
            s
        })
        .collect();
    if a.iolog_only {
        let Some(dir) = &a.iolog_dir else {
            eprintln!("one_pattern: --iolog-only needs --iolog-dir");
            return ExitCode::from(2);
        };
        let mut files = Vec::new();
        for (p, s) in procs.iter().enumerate() {
            let text = match s.generate() {
                Ok(ios) => iolog::iolog_text(&target.path, &ios),
                Err(e) => {
                    eprintln!("one_pattern: {e}");
                    return ExitCode::from(1);
                }
            };
            let name = iolog::iolog_name(0, &format!("one_pattern/{}", a.pattern), a.io_size as f64, 0, p as u32, d);
            match iolog::write_file(dir, &name, &text) {
                Ok(f) => files.push(f),
                Err(e) => {
                    eprintln!("one_pattern: cannot write {}: {e}", dir.join(&name).display());
                    return ExitCode::from(1);
                }
            }
        }
        println!("{}", serde_json::json!({ "iolog_files": files }));
        return ExitCode::SUCCESS;
    }
    let spec = RunSpec {
        index: 0,
        bench: "one_pattern".into(),
        experiment: format!("one_pattern/{}", a.pattern),
        experiment_number: 0,
        pattern: a.pattern.to_string(),
        varying: "none".into(),
        value: a.io_size as f64,
        repetition: 0,
        work: Work::Pattern(procs),
        pause_after: Duration::ZERO,
        warnings: vec![],
        keep_series: false,
    };
    let plan = Plan { runs: vec![spec], seed: a.seed, device_size: target.size, emit_fio_iolog: a.iolog_dir.clone(), trace_dir: a.trace_dir.clone() };
    match run(&target, &plan, &mut NullObserver) {
        Ok(rep) => {
            let r = &rep.runs[0];
            let out = serde_json::json!({
                "pattern": r.pattern, "io_size": r.io_size_bytes, "io_count": r.io_count, "parallel": d,
                "status": r.status, "iops": r.iops, "mib_per_s": r.mib_per_s, "mean_us": r.mean_us,
                "p50_us": r.p50_us, "p99_us": r.p99_us, "min_us": r.min_us, "max_us": r.max_us,
                "iolog_files": r.iolog_files, "trace_file": r.trace_file,
            });
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("one_pattern: {e}");
            ExitCode::from(1)
        }
    }
}
