//! Run a whole plan on a file and print the summary table: a demo of the agent-facing API.
//!
//! ```text
//! cargo run --release -p wattflip-uflip --example probe_file -- FILE [SIZE_BYTES] [BENCHES] [quick|small|spec] [JSON_OUT]
//! ```
//! e.g. `probe_file /var/tmp/probe.img 1073741824 all small /var/tmp/report.json`.

use std::process::ExitCode;
use std::time::Instant;
use wattflip_uflip::*;

struct Progress {
    total: usize,
    t0: Instant,
}

impl Observer for Progress {
    fn planned(&mut self, total_runs: usize) {
        self.total = total_runs;
    }
    fn run_started(&mut self, _index: usize, _spec: &RunSpec) {}
    fn run_finished(&mut self, index: usize, r: &RunResult) {
        eprintln!(
            "[{:>4}/{}] {:>7.1}s {} v={} r{} mean={:.1}µs",
            index + 1,
            self.total,
            self.t0.elapsed().as_secs_f64(),
            r.experiment,
            r.value,
            r.repetition,
            r.mean_us
        );
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(file) = args.first() else {
        eprintln!("usage: probe_file FILE [SIZE_BYTES] [BENCHES] [quick|small|spec] [JSON_OUT]");
        return ExitCode::from(2);
    };
    let size: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1 << 30);
    let benches = match Bench::parse_list(args.get(2).map(String::as_str).unwrap_or("all")) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("probe_file: {e}");
            return ExitCode::from(2);
        }
    };
    let target = match Target::open(&TargetOptions::file(file, size)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("probe_file: {e}");
            return ExitCode::from(1);
        }
    };
    let mut opts = match args.get(3).map(String::as_str).unwrap_or("small") {
        "quick" => PlanOptions::quick(target.size),
        "spec" => PlanOptions::spec_defaults(target.size),
        _ => PlanOptions::small(target.size),
    };
    if args.get(3).map(String::as_str) != Some("quick") {
        opts.benches = benches;
    }
    let p = plan(&opts);
    let t0 = Instant::now();
    match run(&target, &p, &mut Progress { total: 0, t0 }) {
        Ok(rep) => {
            println!("{}", summary_table(&rep));
            println!("{} runs in {:.1} s", rep.runs.len(), t0.elapsed().as_secs_f64());
            if let Some(out) = args.get(4) {
                if let Err(e) = std::fs::write(out, serde_json::to_string_pretty(&rep).unwrap_or_default()) {
                    eprintln!("probe_file: cannot write {out}: {e}");
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("probe_file: {e}");
            ExitCode::from(1)
        }
    }
}
