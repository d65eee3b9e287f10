//! The IO engine (spec §3.3, §3.4, §9): executes one [`RunSpec`] on a [`Target`] with O_DIRECT
//! (writes also O_DSYNC), synchronous `pread`/`pwrite` at queue depth 1 per process, timed with
//! `CLOCK_MONOTONIC` (`Instant`) immediately around the call only. Pauses are busy-waits outside the
//! timing; ParallelDegree runs D threads, each with its own buffer and slice of the probe's one
//! checked handle (pread/pwrite carry their offset, so sharing it is safe), released together by a
//! `std::sync::Barrier`.
//!
//! IO deadline: every worker publishes when its IO in flight started; the calling thread watches
//! and, past the deadline, raises a stop flag and returns [`ProbeError::IoDeadline`] (a device
//! fault). A thread blocked in `pread`/`pwrite` (D state) cannot be interrupted: it is left
//! detached, issues no further IO once its call returns (the stop flag), and keeps its reference to
//! the handle until then; the process can still report and exit, and the kernel finishes the exit
//! of that thread when the device completes or fails the IO.
//!
//! Everything that can fail or allocate (address generation, fds, buffers) happens before the
//! barrier, so the timed loop does nothing but IO and clock reads. To add a work kind, add a
//! `Work` variant in `plan.rs` and turn it into per-process IO lists in `io_lists`.

// Re-exported where it was defined: `crate::engine::AlignedBuf` (target.rs) still names it.
pub use crate::buf::AlignedBuf;
use crate::error::ProbeError;
use crate::format::{random_format, sequential_format};
use crate::iolog;
use crate::pattern::{Io, Mode, PatternSpec};
use crate::plan::{Plan, RunSpec, Work};
use crate::report::{LegResult, RunResult, RunStatus};
use crate::stats::latency_stats;
use crate::target::Target;
use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

/// Maps monotonic instants to UTC once per probe (brief: "map a monotonic Instant to UTC once").
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    mono0: Instant,
    utc0_ns: u64,
}

impl Clock {
    /// Capture the pair now.
    pub fn start() -> Self {
        let utc0_ns = u64::try_from(wattflip_units::UnixNanos::now().0).unwrap_or(0);
        Clock { mono0: Instant::now(), utc0_ns }
    }
    /// UTC ns of a monotonic instant.
    pub fn utc_ns(&self, t: Instant) -> u64 {
        self.utc0_ns + t.saturating_duration_since(self.mono0).as_nanos() as u64
    }
    fn rel_ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.mono0).as_nanos() as u64
    }
}

/// Busy-wait `d` on the monotonic clock (§3.3; the original stops 8 µs early to absorb Windows
/// timer overhead, which `Instant` on Linux does not need).
pub fn spin(d: Duration) {
    if d.is_zero() {
        return;
    }
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Between-run pause (§7 [Proposal]): sleep through long pauses, spin the last millisecond.
/// Returns the method used ("none", "spin", "sleep+spin").
pub fn pause_between_runs(d: Duration) -> &'static str {
    if d.is_zero() {
        return "none";
    }
    let t = Instant::now();
    let spin_part = Duration::from_millis(1);
    let method = if d > 2 * spin_part {
        std::thread::sleep(d - spin_part);
        "sleep+spin"
    } else {
        "spin"
    };
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
    method
}

/// One process's work, fully prepared before timing.
struct Proc {
    ios: Vec<Io>,
    file: Arc<File>,
    buf: AlignedBuf,
    pause_io: Duration,
    burst_io: u64,
    pause_burst: Duration,
    ignore_io: u64,
    format_fill: bool,
}

/// (start relative to clock origin, latency), ns.
type Sample = (u64, u64);

struct IoFailure {
    io: Io,
    source: std::io::Error,
}

/// What a worker shares with the watchdog: when its IO in flight started (ns since the clock's
/// origin + 1; 0 = none) and which IO it is (offset; length << 1 | write).
#[derive(Default)]
struct InFlight {
    since: AtomicU64,
    offset: AtomicU64,
    len_mode: AtomicU64,
}

/// The calling thread's poll interval while workers run (outside the timed loop).
const WATCH_TICK: Duration = Duration::from_millis(20);

fn worker(p: &mut Proc, clock: &Clock, barrier: Option<&Barrier>, flight: &InFlight, stop: &AtomicBool) -> Result<Vec<Sample>, IoFailure> {
    let mut samples = Vec::with_capacity(p.ios.len());
    let mut filled_len = 0u64;
    if let Some(b) = barrier {
        b.wait();
    }
    for (i, io) in p.ios.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let len = io.len as usize;
        if p.format_fill && io.len != filled_len {
            // §6.1: format data bytes are the IO size in sectors; refilled only when the size changes.
            let byte = (io.len / 512) as u8;
            p.buf.as_mut_slice()[..len].fill(byte);
            filled_len = io.len;
        }
        let t0 = Instant::now();
        flight.offset.store(io.offset, Ordering::Relaxed);
        flight.len_mode.store(io.len << 1 | u64::from(io.mode == Mode::Write), Ordering::Relaxed);
        flight.since.store(clock.rel_ns(t0) + 1, Ordering::Release);
        let r = match io.mode {
            Mode::Read => p.file.read_at(&mut p.buf.as_mut_slice()[..len], io.offset),
            Mode::Write => p.file.write_at(&p.buf.as_slice()[..len], io.offset),
        };
        let t1 = Instant::now();
        flight.since.store(0, Ordering::Release);
        match r {
            Ok(n) if n == len => {}
            Ok(n) => {
                let source = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, format!("short transfer: {n} of {len} bytes"));
                return Err(IoFailure { io: *io, source });
            }
            Err(source) => return Err(IoFailure { io: *io, source }),
        }
        samples.push((clock.rel_ns(t0), t1.saturating_duration_since(t0).as_nanos() as u64));
        // Waits happen after the timing stopped and never count in response time (§3.3).
        spin(p.pause_io);
        if !p.pause_burst.is_zero() && (i as u64 + 1).is_multiple_of(p.burst_io.max(1)) {
            spin(p.pause_burst);
        }
    }
    Ok(samples)
}

fn base_result(spec: &RunSpec, target: &Target) -> RunResult {
    let (io_size, ignore) = match &spec.work {
        Work::Pattern(ps) | Work::Phases(ps) => ps.first().map(|p| (p.io_size, p.ignore_io)).unwrap_or((0, 0)),
        Work::Format { .. } => (0, 0),
    };
    RunResult {
        run_id: spec.index,
        bench: spec.bench.clone(),
        experiment: spec.experiment.clone(),
        experiment_number: spec.experiment_number,
        pattern: spec.pattern.clone(),
        varying: spec.varying.clone(),
        value: spec.value,
        repetition: spec.repetition,
        start_ns: 0,
        end_ns: 0,
        io_count: 0,
        ignore_io: ignore,
        measured_ios: 0,
        io_size_bytes: io_size,
        mean_us: 0.0,
        min_us: 0.0,
        max_us: 0.0,
        stddev_us: 0.0,
        p50_us: 0.0,
        p95_us: 0.0,
        p99_us: 0.0,
        iops: 0.0,
        mib_per_s: 0.0,
        parameters: spec.parameters(),
        target_kind: target.kind.as_str().to_string(),
        status: RunStatus::Ok,
        warnings: spec.warnings.clone(),
        trace_file: None,
        iolog_files: Vec::new(),
        series_us: Vec::new(),
        legs: Vec::new(),
    }
}

/// Per-process IO lists, or the reason the run cannot be done on this target.
/// Per-process IO list with the pattern it came from (`None` for a format).
type IoLists<'a> = Vec<(Vec<Io>, Option<&'a PatternSpec>)>;

fn io_lists<'a>(spec: &'a RunSpec, target: &Target) -> Result<IoLists<'a>, String> {
    let lbs = target.logical_block_size.max(1);
    match &spec.work {
        Work::Format { kind, seed } => {
            let ios = match kind {
                crate::format::FormatKind::Random => random_format(target.size, lbs, *seed),
                crate::format::FormatKind::Sequential => sequential_format(target.size, lbs),
            };
            Ok(vec![(ios, None)])
        }
        Work::Pattern(ps) => {
            let mut out = Vec::with_capacity(ps.len());
            for p in ps {
                out.push((checked_ios(p, target)?, Some(p)));
            }
            Ok(out)
        }
        Work::Phases(ps) => {
            // One process, legs concatenated: no gap between the last IO of a leg and the first of
            // the next. The first leg's pattern supplies the (zero) pauses; `leg_lengths` splits
            // the statistics again.
            let mut all = Vec::new();
            for p in ps {
                all.extend(checked_ios(p, target)?);
            }
            Ok(vec![(all, ps.first())])
        }
    }
}

/// A pattern's IOs after the §9 alignment and bounds checks, or why the target cannot run them.
fn checked_ios(p: &PatternSpec, target: &Target) -> Result<Vec<Io>, String> {
    let lbs = target.logical_block_size.max(1);
    let path = target.path.display();
    // §9 4Kn caveat: name the parameter that breaks O_DIRECT alignment.
    if !p.io_size.is_multiple_of(lbs) {
        return Err(format!("IOSize {} B is not a multiple of the logical block size {} B of {path}", p.io_size, lbs));
    }
    if !p.io_shift.is_multiple_of(lbs) {
        return Err(format!("IOShift {} B is not a multiple of the logical block size {} B of {path}", p.io_shift, lbs));
    }
    let ios = p.generate().map_err(|e| e.to_string())?;
    for io in &ios {
        if io.offset % lbs != 0 {
            return Err(format!(
                "IO offset {} (TargetOffset {} B, TargetSize {} B) is not aligned to the logical block size {} B of {path}",
                io.offset, p.target_offset, p.target_size, lbs
            ));
        }
        if io.offset.saturating_add(io.len) > target.size {
            return Err(format!("IO [{}, {}) runs past the end of {path} ({} B)", io.offset, io.offset + io.len, target.size));
        }
    }
    Ok(ios)
}

/// Execute one run on `handle` (the probe's one checked handle of `target`), every IO within
/// `deadline` (no observer calls; `crate::run` does those).
pub(crate) fn run_one(
    target: &Target,
    handle: &Arc<File>,
    plan: &Plan,
    spec: &RunSpec,
    clock: &Clock,
    deadline: Duration,
    halt: &AtomicBool,
) -> Result<RunResult, ProbeError> {
    let mut result = base_result(spec, target);
    let lists = match io_lists(spec, target) {
        Ok(l) => l,
        Err(reason) => {
            let now = clock.utc_ns(Instant::now());
            result.start_ns = now;
            result.end_ns = now;
            result.status = RunStatus::Unsupported { reason };
            return Ok(result);
        }
    };
    let degree = lists.len() as u32;
    if let Some(dir) = &plan.emit_fio_iolog {
        for (p, (ios, _)) in lists.iter().enumerate() {
            let name = iolog::iolog_name(spec.index, &spec.experiment, spec.value, spec.repetition, p as u32, degree);
            let text = iolog::iolog_text(&target.path, ios);
            let path = iolog::write_file(dir, &name, &text).map_err(|source| ProbeError::Output { path: dir.join(&name), source })?;
            result.iolog_files.push(path);
        }
    }
    let align = target.logical_block_size.max(4096) as usize;
    let mut procs = Vec::with_capacity(lists.len());
    for (p, (ios, pat)) in lists.into_iter().enumerate() {
        let file = handle.clone();
        let max_len = ios.iter().map(|io| io.len).max().unwrap_or(0) as usize;
        let mut buf = AlignedBuf::new(max_len.max(align), align).map_err(|source| ProbeError::Buffer { run: spec.index, len: max_len, align, source })?;
        buf.fill_pattern(crate::plan::derive_seed(plan.seed, spec.index as u64, p as u64 + 100));
        let (pause_io, burst_io, pause_burst, ignore_io) = match pat {
            Some(s) => (Duration::from_micros(s.pause_io_us), s.burst_io, Duration::from_micros(s.pause_burst_us), s.ignore_io),
            None => (Duration::ZERO, 1, Duration::ZERO, 0),
        };
        procs.push(Proc { ios, file, buf, pause_io, burst_io, pause_burst, ignore_io, format_fill: pat.is_none() });
    }

    let (procs, outcomes) = run_workers(procs, clock, deadline, target, spec, halt)?;
    let mut per_proc: Vec<Vec<Sample>> = Vec::with_capacity(outcomes.len());
    for o in outcomes {
        match o {
            Ok(s) => per_proc.push(s),
            Err(f) => {
                return Err(ProbeError::Io {
                    path: target.device.clone(),
                    run: spec.index,
                    experiment: spec.experiment.clone(),
                    offset: f.io.offset,
                    len: f.io.len,
                    mode: f.io.mode,
                    source: f.source,
                })
            }
        }
    }

    finish(&mut result, &procs, &per_proc, clock, spec);
    if let Some(dir) = &plan.trace_dir {
        let name = iolog::iolog_name(spec.index, &spec.experiment, spec.value, spec.repetition, 0, 1).replace(".iolog", ".csv");
        let path = write_trace(dir, &name, &procs, &per_proc, clock).map_err(|source| ProbeError::Output { path: dir.join(&name), source })?;
        result.trace_file = Some(path);
    }
    // The pause after the run is the caller's (`run` asks its observer, §7 and §11.6).
    Ok(result)
}

type Outcome = Result<Vec<Sample>, IoFailure>;

/// Run every process on its own thread (released together by a barrier when there are several)
/// while this thread watches the IO deadline. Returns the processes (for the statistics) with
/// their outcomes, in order; past the deadline, [`ProbeError::IoDeadline`] with the stuck thread
/// left detached (module docs).
fn run_workers(
    procs: Vec<Proc>,
    clock: &Clock,
    deadline: Duration,
    target: &Target,
    spec: &RunSpec,
    halt: &AtomicBool,
) -> Result<(Vec<Proc>, Vec<Outcome>), ProbeError> {
    let n = procs.len();
    let barrier = (n > 1).then(|| Arc::new(Barrier::new(n)));
    let stop = Arc::new(AtomicBool::new(false));
    let flights: Vec<Arc<InFlight>> = (0..n).map(|_| Arc::new(InFlight::default())).collect();
    let (tx, rx) = mpsc::channel::<(usize, Proc, Outcome)>();
    let clock = *clock;
    for (k, mut p) in procs.into_iter().enumerate() {
        let (tx, barrier, stop_w, flight) = (tx.clone(), barrier.clone(), stop.clone(), flights[k].clone());
        let spawned = std::thread::Builder::new().name(format!("uflip-io-{k}")).spawn(move || {
            let out = worker(&mut p, &clock, barrier.as_deref(), &flight, &stop_w);
            let _ = tx.send((k, p, out));
        });
        if let Err(source) = spawned {
            // Workers already started wait at the barrier for ever, idle: no IO was issued.
            stop.store(true, Ordering::Relaxed);
            return Err(ProbeError::Spawn { run: spec.index, source });
        }
    }
    drop(tx);
    let mut done: Vec<Option<(Proc, Outcome)>> = (0..n).map(|_| None).collect();
    let mut left = n;
    while left > 0 {
        match rx.recv_timeout(WATCH_TICK) {
            Ok((k, p, out)) => {
                done[k] = Some((p, out));
                left -= 1;
                continue;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // A worker died without sending (panicked).
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(ProbeError::WorkerPanicked { run: spec.index }),
        }
        // The caller asked to stop (the agent is shutting down): the workers see the stop flag
        // before their next IO; the run is abandoned.
        if halt.load(Ordering::Relaxed) {
            stop.store(true, Ordering::Relaxed);
            return Err(ProbeError::Stopped { run: spec.index });
        }
        let now = clock.rel_ns(Instant::now());
        for (k, f) in flights.iter().enumerate() {
            let since = f.since.load(Ordering::Acquire);
            if since == 0 || done[k].is_some() {
                continue;
            }
            let waited = Duration::from_nanos(now.saturating_sub(since - 1));
            if waited > deadline {
                stop.store(true, Ordering::Relaxed);
                let lm = f.len_mode.load(Ordering::Relaxed);
                return Err(ProbeError::IoDeadline {
                    path: target.device.clone(),
                    run: spec.index,
                    experiment: spec.experiment.clone(),
                    offset: f.offset.load(Ordering::Relaxed),
                    len: lm >> 1,
                    mode: if lm & 1 == 1 { Mode::Write } else { Mode::Read },
                    waited,
                    deadline,
                });
            }
        }
    }
    let mut procs = Vec::with_capacity(n);
    let mut outs = Vec::with_capacity(n);
    for d in done.into_iter().flatten() {
        procs.push(d.0);
        outs.push(d.1);
    }
    Ok((procs, outs))
}

/// Statistics over the running phase (i ≥ IgnoreIO per process), §8.
fn finish(result: &mut RunResult, procs: &[Proc], per_proc: &[Vec<Sample>], clock: &Clock, spec: &RunSpec) {
    let all = per_proc.iter().flatten();
    let first = all.clone().map(|s| s.0).min().unwrap_or(0);
    let last = all.clone().map(|s| s.0 + s.1).max().unwrap_or(0);
    result.start_ns = clock.utc_ns(clock.mono0) + first;
    result.end_ns = clock.utc_ns(clock.mono0) + last;
    result.io_count = per_proc.iter().map(|v| v.len() as u64).sum();
    let running = || procs.iter().zip(per_proc).flat_map(|(p, s)| s.iter().enumerate().skip(p.ignore_io as usize).map(move |(i, smp)| (p.ios[i].len, *smp)));
    let (st, _) = latency_stats(running().map(|(_, s)| s.1));
    let r_first = running().map(|(_, s)| s.0).min().unwrap_or(0);
    let r_last = running().map(|(_, s)| s.0 + s.1).max().unwrap_or(0);
    let bytes: u64 = running().map(|(len, _)| len).sum();
    let span_s = r_last.saturating_sub(r_first) as f64 / 1e9;
    result.measured_ios = st.n;
    result.mean_us = st.mean_us;
    result.min_us = st.min_us;
    result.max_us = st.max_us;
    result.stddev_us = st.stddev_us;
    result.p50_us = st.p50_us;
    result.p95_us = st.p95_us;
    result.p99_us = st.p99_us;
    if span_s > 0.0 {
        result.iops = st.n as f64 / span_s;
        result.mib_per_s = bytes as f64 / span_s / (1024.0 * 1024.0);
    }
    if let (Work::Phases(ps), Some(samples)) = (&spec.work, per_proc.first()) {
        result.legs = leg_results(ps, samples, &procs[0].ios, clock);
    }
    if spec.keep_series {
        result.series_us = per_proc.first().map(|s| s.iter().map(|x| x.1 as f64 / 1000.0).collect()).unwrap_or_default();
    }
}

/// Statistics of each leg of a [`Work::Phases`] run over all of the leg's IOs: the running average
/// restarts at each leg (§6.2), and a leg has no start-up phase of its own to skip because it
/// follows the previous one without a pause.
fn leg_results(ps: &[PatternSpec], samples: &[Sample], ios: &[Io], clock: &Clock) -> Vec<LegResult> {
    let base = clock.utc_ns(clock.mono0);
    let mut out = Vec::with_capacity(ps.len());
    let mut at = 0usize;
    for (leg, p) in ps.iter().enumerate() {
        let end = (at + p.io_count as usize).min(samples.len());
        let s = &samples[at..end];
        let (st, _) = latency_stats(s.iter().map(|x| x.1));
        let first = s.iter().map(|x| x.0).min().unwrap_or(0);
        let last = s.iter().map(|x| x.0 + x.1).max().unwrap_or(0);
        let bytes: u64 = ios[at..end].iter().map(|io| io.len).sum();
        let span_s = last.saturating_sub(first) as f64 / 1e9;
        out.push(LegResult {
            leg: leg as u32,
            pattern: p.baseline.to_string(),
            start_ns: base + first,
            end_ns: base + last,
            stats: st,
            iops: if span_s > 0.0 { st.n as f64 / span_s } else { 0.0 },
            mib_per_s: if span_s > 0.0 { bytes as f64 / span_s / (1024.0 * 1024.0) } else { 0.0 },
        });
        at = end;
    }
    out
}

/// Per-IO trace (§8 DET files): `process,index,offset,len,mode,start_utc_ns,latency_ns`.
fn write_trace(dir: &std::path::Path, name: &str, procs: &[Proc], per_proc: &[Vec<Sample>], clock: &Clock) -> std::io::Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(name);
    let mut w = std::io::BufWriter::new(File::create(&path)?);
    writeln!(w, "process,index,offset,len,mode,start_utc_ns,latency_ns")?;
    let base = clock.utc_ns(clock.mono0);
    for (p, (proc_, samples)) in procs.iter().zip(per_proc).enumerate() {
        for (i, (io, s)) in proc_.ios.iter().zip(samples).enumerate() {
            writeln!(w, "{p},{i},{},{},{},{},{}", io.offset, io.len, io.mode.as_str(), base + s.0, s.1)?;
        }
    }
    w.flush()?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_waits_at_least() {
        let t = Instant::now();
        spin(Duration::from_micros(300));
        assert!(t.elapsed() >= Duration::from_micros(300));
        assert_eq!(pause_between_runs(Duration::ZERO), "none");
        assert_eq!(pause_between_runs(Duration::from_micros(500)), "spin");
        let t = Instant::now();
        assert_eq!(pause_between_runs(Duration::from_millis(5)), "sleep+spin");
        assert!(t.elapsed() >= Duration::from_millis(5));
    }
}
