//! Throughput benchmark for the shunt-trace integrators (not a test): generates a large raw f32 trace
//! and a CSV trace in a temp dir and prints samples/s (f32, from memory and from the page cache) and
//! MB/s (CSV). Run with:
//!
//! ```text
//! cargo run --release -p wattflip-energy --example trace_bench [-- --samples N --csv-mb M --reps R]
//! ```
//!
//! Defaults: 128 Mi f32 samples (512 MiB), 256 MB of CSV, 3 repetitions; the best repetition is
//! reported (the machine is shared). Also times the second pass of a trace import (the samples
//! around the edges of 1,000 runs: 4 ranges of 6 ms each, `read_raw_samples`/`read_csv_samples`). To benchmark a new format, add a generator and a timed loop here.

use std::io::{BufWriter, Write};
use std::time::Instant;
use wattflip_energy::{
    integrate_csv, integrate_raw_streaming, read_csv_samples, read_raw_samples, CsvOptions, FixedRateIntegrator, Hertz, Nanos, Ohms, SampleFormat,
    ShuntCircuit, Sidecar, UnixNanos, Volts,
};

/// 1,000 runs spread over `span_ns`, 4 edge ranges of 6 ms each (what the import's second pass reads).
fn edge_ranges(span_ns: i64) -> Vec<(UnixNanos, UnixNanos)> {
    (0..4000i64)
        .map(|i| {
            let at = span_ns / 4001 * (i + 1);
            (UnixNanos(at - 3_000_000), UnixNanos(at + 3_000_000))
        })
        .collect()
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn best_of<T>(reps: u64, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut out = f();
    for _ in 0..reps {
        let t = Instant::now();
        out = f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    (best, out)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let samples = arg("--samples", 128 << 20);
    let csv_bytes = arg("--csv-mb", 256) * 1_000_000;
    let reps = arg("--reps", 3).max(1);
    let dir = tempfile::tempdir()?;
    let circuit = ShuntCircuit::new(Ohms(0.1), Volts(12.0))?;
    let rate = Hertz(1e6);
    let window = Nanos::from_millis(1);

    // A 4096-sample pattern (0.05–0.15 V) repeated: deterministic and cheap to generate.
    let pattern: Vec<f32> = (0..4096).map(|i| 0.1 + 0.05 * ((i as f32) * 0.01).sin()).collect();
    let pattern_bytes: Vec<u8> = pattern.iter().flat_map(|v| v.to_le_bytes()).collect();

    // ---- f32 from memory: the kernel alone, 256 KiB chunks (what the file reader feeds it).
    let chunk: Vec<u8> = pattern_bytes.iter().copied().cycle().take(256 * 1024).collect();
    let chunks = (samples * 4).div_ceil(chunk.len() as u64);
    let (secs, e_mem) = best_of(reps, || {
        let mut it = FixedRateIntegrator::new(circuit, SampleFormat::F32le, Volts(1.0), rate, window).map_err(|e| e.to_string())?;
        for _ in 0..chunks {
            it.push_bytes(&chunk);
            let _ = it.drain_windows();
        }
        Ok::<_, String>(it.finish(None).energy)
    });
    let n_mem = chunks * chunk.len() as u64 / 4;
    println!("f32 in memory : {:>8.1} M samples/s  ({} samples, {:.3} s, energy {})", n_mem as f64 / secs / 1e6, n_mem, secs, e_mem?);

    // ---- f32 from a file (page cache after the first pass).
    let data = dir.path().join("trace.f32");
    {
        let mut w = BufWriter::with_capacity(1 << 22, std::fs::File::create(&data)?);
        let mut left = samples;
        while left > 0 {
            let n = left.min(pattern.len() as u64) as usize;
            w.write_all(&pattern_bytes[..4 * n])?;
            left -= n as u64;
        }
        w.flush()?;
    }
    std::fs::write(dir.path().join("trace.f32.json"), br#"{"format": "f32le", "sample_rate_hz": 1000000, "shunt_ohms": 0.1, "supply_volts": 12.0}"#)?;
    let sidecar = Sidecar::find_beside(&data)?;
    let (secs, s) = best_of(reps, || {
        let mut windows = 0u64;
        integrate_raw_streaming(&data, &sidecar, window, |_| windows += 1).map(|s| (s, windows))
    });
    let (s, windows) = s?;
    println!(
        "f32 from file : {:>8.1} M samples/s  ({:.1} MB/s; {} samples, {} windows, {:.3} s, energy {})",
        s.samples as f64 / secs / 1e6,
        (s.samples * 4) as f64 / secs / 1e6,
        s.samples,
        windows,
        secs,
        s.energy
    );

    // ---- Second pass over the f32 file: the edge ranges, one seek each.
    let mut timed = sidecar.clone();
    timed.start = Some(UnixNanos(0));
    let ranges = edge_ranges((s.samples as f64 / rate.0 * 1e9) as i64);
    let (secs, got) = best_of(reps, || read_raw_samples(&data, &timed, &ranges));
    let got: usize = got?.iter().map(Vec::len).sum();
    println!("f32 2nd pass  : {:>8.3} s for {} edge ranges ({} samples)", secs, ranges.len(), got);

    // ---- CSV: "t_seconds,v_volts" lines, ~24 bytes each, 1 MHz timestamps with 6 decimals.
    let csv = dir.path().join("trace.csv");
    let mut written = 0u64;
    let mut lines = 0u64;
    {
        let mut w = BufWriter::with_capacity(1 << 22, std::fs::File::create(&csv)?);
        w.write_all(b"time_s,v_shunt_V\n")?;
        let mut line = String::with_capacity(64);
        while written < csv_bytes {
            line.clear();
            let us = lines;
            use std::fmt::Write as _;
            let v = pattern[(lines % 4096) as usize];
            writeln!(line, "{}.{:06},{:.6}", us / 1_000_000, us % 1_000_000, v)?;
            w.write_all(line.as_bytes())?;
            written += line.len() as u64;
            lines += 1;
        }
        w.flush()?;
    }
    let opts = CsvOptions { window, ..CsvOptions::default() };
    let (secs, s) = best_of(reps, || integrate_csv(&csv, circuit, &opts));
    let s = s?;
    println!(
        "CSV from file : {:>8.1} MB/s  ({:.1} M lines/s; {} bytes, {} samples, {:.3} s, energy {})",
        written as f64 / secs / 1e6,
        lines as f64 / secs / 1e6,
        written,
        s.samples,
        secs,
        s.energy
    );
    let opts = CsvOptions { time_origin: Some(UnixNanos(0)), ..opts };
    let ranges = edge_ranges(lines as i64 * 1000);
    let (secs2, got) = best_of(reps, || read_csv_samples(&csv, circuit, &opts, &ranges));
    let got: usize = got?.iter().map(Vec::len).sum();
    println!(
        "CSV 2nd pass  : {:>8.1} MB/s  ({:.3} s for {} edge ranges, {} samples; import = both passes)",
        written as f64 / secs2 / 1e6,
        secs2,
        ranges.len(),
        got
    );
    Ok(())
}
