//! Scheduled probes in `run` mode. Each `[[probes]]` entry of the agent config has a cron
//! expression (`sec min hour day-of-month month day-of-week`, UTC) and a jitter: every host adds its
//! own fixed offset in `[0, jitter)`, derived from its agent id and the schedule name, so a fleet
//! with one config does not hit shared storage or power feeds at the same second. Probes on the
//! same device never overlap: each device has a lock that a probe holds for its whole run.
//! A probe uses the calibration stored for its target in its `out` folder (`probe --calibrate
//! --out` the same folder). Power is recorded around each probe and every run carries its energy, through the same
//! function as the `probe` command. Results go to the exporter like any other sample: one batch
//! with the probe's runs, then its full-rate power in bounded batches (`convert::batches`).

use crate::clock::Clock;
use crate::events::event;
use crate::probes::{self, convert, ProbeJob};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch, Mutex};
use wattflip_proto::v1;

/// This host's fixed offset for a schedule: FNV-1a of `agent_id/name`, scaled into `[0, jitter)`.
pub fn host_offset(agent_id: &str, name: &str, jitter: Duration) -> Duration {
    if jitter.is_zero() {
        return Duration::ZERO;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in agent_id.bytes().chain(std::iter::once(b'/')).chain(name.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let nanos = u64::try_from(jitter.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(h % nanos)
}

/// When `job` next fires on this host after `now`.
pub fn next_fire(job: &ProbeJob, agent_id: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let offset = host_offset(agent_id, &job.name, job.jitter);
    // Look back by the offset so a fire whose jittered time is still ahead is not skipped.
    let base_after = now - chrono::Duration::from_std(offset).ok()?;
    let base = job.schedule.after(&base_after).next()?;
    Some(base + chrono::Duration::from_std(offset).ok()?)
}

/// Per-device locks: the key is the canonical target path.
#[derive(Default, Clone)]
pub struct DeviceLocks {
    locks: Arc<Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>>,
}

impl DeviceLocks {
    pub async fn lock_for(&self, target: &std::path::Path) -> Arc<Mutex<()>> {
        let key = std::fs::canonicalize(target).unwrap_or_else(|_| target.to_owned());
        self.locks.lock().await.entry(key).or_default().clone()
    }
}

/// A batch holding one event, stamped now.
fn event_batch(kind: &str, severity: v1::Severity, device: &str, message: String) -> v1::Batch {
    let time_ns = wattflip_proto::units::UnixNanos::now().0;
    v1::Batch { events: vec![event(time_ns, kind, severity, device, message)], ..Default::default() }
}

/// What the agent asks of its scheduled probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobStop {
    /// Keep running the schedule.
    Run,
    /// Start no new probe; one in flight runs to its end (a bounded `run --samples N`).
    Finish,
    /// Start no new probe and stop the one in flight between two IOs (SIGTERM): its completed
    /// runs are kept.
    Halt,
}

/// Runs one job until `stop` leaves [`JobStop::Run`], sending each probe's results to `out`.
pub async fn run_job(job: ProbeJob, agent_id: String, locks: DeviceLocks, out: mpsc::Sender<v1::Batch>, mut stop: watch::Receiver<JobStop>) {
    loop {
        if *stop.borrow() != JobStop::Run {
            return;
        }
        let Some(when) = next_fire(&job, &agent_id, Utc::now()) else {
            tracing::warn!(probe = %job.name, "schedule has no future fire time; not scheduling it");
            return;
        };
        let wait = (when - Utc::now()).to_std().unwrap_or(Duration::ZERO);
        tracing::debug!(probe = %job.name, %when, "next scheduled probe");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
        let lock = locks.lock_for(&job.args.target).await;
        let guard = tokio::select! {
            g = lock.lock_owned() => g,
            _ = stop.changed() => return,
        };
        tracing::info!(probe = %job.name, target = %job.args.target.display(), "scheduled probe starting");
        // Raised when the agent stops: the probe's IO stops between two IOs (the efficiency
        // preset's before its next window).
        let halt = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let batches = match &job.efficiency {
            Some(eff) => {
                let (job2, eff, host, h) = (job.clone(), eff.clone(), agent_id.clone(), halt.clone());
                let task = tokio::task::spawn_blocking(move || super::efficiency::scheduled(&job2, &eff, &host, h));
                supervise(&job, task, &halt, &mut stop).await.unwrap_or_else(|e| crashed(&job, &e))
            }
            None => probe_batches(&job, supervise(&job, start_probe(&job, &agent_id, halt.clone()), &halt, &mut stop).await),
        };
        drop(guard);
        let stopping = halt.load(std::sync::atomic::Ordering::Relaxed);
        for batch in batches {
            if out.send(batch).await.is_err() {
                return;
            }
        }
        if stopping {
            return;
        }
    }
}

/// Waits for a fire's task; when the agent stops meanwhile, raises `halt` and waits for the task
/// to stop between two IOs.
async fn supervise<T>(
    job: &ProbeJob,
    task: tokio::task::JoinHandle<T>,
    halt: &std::sync::atomic::AtomicBool,
    stop: &mut watch::Receiver<JobStop>,
) -> Result<T, tokio::task::JoinError> {
    tokio::pin!(task);
    tokio::select! {
        r = &mut task => r,
        // The guard `wait_for` returns is dropped inside: it must not live across an await.
        _ = async { stop.wait_for(|s| *s == JobStop::Halt).await.is_ok() } => {
            tracing::warn!(probe = %job.name, "the agent is stopping: stopping the scheduled probe's IO; its completed runs are kept");
            halt.store(true, std::sync::atomic::Ordering::Relaxed);
            (&mut task).await
        }
    }
}

/// A fire's task that panicked: a critical `probe_failed` event.
fn crashed(job: &ProbeJob, e: &tokio::task::JoinError) -> Vec<v1::Batch> {
    vec![event_batch("probe_failed", v1::Severity::Critical, &job.args.target.display().to_string(), format!("probe {} crashed: {e}", job.name))]
}

/// The batches of a uFLIP probe's fire: its results, its completed runs when interrupted, or
/// the failure as an event.
fn probe_batches(job: &ProbeJob, result: Result<Result<probes::Measured, probes::ProbeCmdError>, tokio::task::JoinError>) -> Vec<v1::Batch> {
    match result {
        Ok(Ok(m)) => {
            match &m.energy {
                Some(e) => tracing::info!(probe = %job.name, runs = m.report.runs.len(), with_energy = e.runs.len(), "scheduled probe finished"),
                None => tracing::info!(probe = %job.name, runs = m.report.runs.len(), "scheduled probe finished; no per-run energy: {}", m.energy_note),
            }
            convert::batches(&m)
        }
        Ok(Err(probes::ProbeCmdError::Probe(wattflip_uflip::ProbeError::Interrupted(report)))) => interrupted(job, *report),
        Ok(Err(e)) => {
            tracing::warn!(probe = %job.name, "scheduled probe failed: {e}");
            vec![event_batch("probe_failed", v1::Severity::Warning, &job.args.target.display().to_string(), format!("probe {}: {e}", job.name))]
        }
        Err(e) => crashed(job, &e),
    }
}

/// Runs one fire of `job` on a blocking thread; `halt` stops its IO.
fn start_probe(
    job: &ProbeJob,
    agent_id: &str,
    halt: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Result<probes::Measured, probes::ProbeCmdError>> {
    let (job, host) = (job.clone(), agent_id.to_string());
    tokio::task::spawn_blocking(move || fire(&job, &host, halt))
}

/// One fire of a uFLIP `[[probes]]` entry on the calling thread (a blocking one; `halt` stops its
/// IO): its stored calibration, power recorded with the entry's options (sizing to its
/// `energy_target` included) through the `probe` command's function, and its local copy when
/// `keep_results`.
pub fn fire(job: &ProbeJob, agent_id: &str, halt: Arc<std::sync::atomic::AtomicBool>) -> Result<probes::Measured, probes::ProbeCmdError> {
    let mut args = job.args.clone();
    args.stop = Some(halt);
    // Read at every fire: a calibration made after the agent started is picked up.
    if let Some((c, from)) = probes::apply_stored_calibration(&mut args) {
        tracing::info!(probe = %job.name, target = %c.target, from = %from.display(), io_count = ?c.counts.io_count, ignore_io = ?c.counts.ignore_io, "using the stored calibration");
    }
    let probe_host = probes::Host { clock: Clock::new(), runner: Arc::new(wattflip_drives::SystemRunner::new()) };
    let m = probes::run_probe_maybe_measured(&args, false, job.energy.as_ref(), "power = false in this [[probes]] entry", &probe_host)?;
    if job.keep_results {
        let dir = args.out.join(format!("{}-{}", job.name, m.report.started_ns));
        let tags = wattflip_proto::schema::HostTags { host: agent_id.to_string(), ..Default::default() };
        crate::report::folder::write_all(&dir, &m.report, m.energy.as_ref(), m.power.as_ref(), &tags)?;
    }
    Ok(m)
}

/// The batches of a probe stopped by the agent's shutdown: its completed runs, each marked
/// `interrupted` in its parameters, and a `probe_interrupted` event saying how many were kept.
fn interrupted(job: &ProbeJob, mut report: wattflip_uflip::ProbeReport) -> Vec<v1::Batch> {
    for r in &mut report.runs {
        r.parameters.insert("interrupted".into(), "true".into());
    }
    let kept = report.runs.len();
    let msg = format!(
        "probe {} was stopped by the agent's shutdown; its IO stopped between two IOs and its {kept} completed run(s) are kept (run_id prefix {})",
        job.name, report.started_ns
    );
    tracing::warn!(probe = %job.name, runs = kept, "{msg}");
    let device = job.args.target.display().to_string();
    let mut e = event(i64::try_from(report.ended_ns).unwrap_or(i64::MAX), "probe_interrupted", v1::Severity::Warning, &device, msg);
    e.attributes.insert("runs_kept".into(), kept.to_string());
    e.attributes.insert("probe_id".into(), report.started_ns.to_string());
    let m = probes::Measured {
        report,
        energy: None,
        power: None,
        recording: Vec::new(),
        energy_note: "the probe was interrupted".into(),
        energy_unmeasurable: false,
        sizing: None,
    };
    let mut batches = convert::batches(&m);
    if let Some(first) = batches.first_mut() {
        first.events.push(e);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::ProbeArgs;
    use std::str::FromStr;

    fn job(expr: &str, jitter: Duration) -> ProbeJob {
        ProbeJob {
            name: "nightly".into(),
            schedule: cron::Schedule::from_str(expr).unwrap(),
            jitter,
            args: ProbeArgs {
                target: PathBuf::from("/tmp/x"),
                size: 1 << 30,
                benches: vec![],
                quick: true,
                values: Default::default(),
                overrides: Default::default(),
                format: None,
                repetitions: None,
                out: PathBuf::from("/tmp/out"),
                emit_fio_iolog: None,
                io_trace: None,
                destroy_consent: vec![],
                overwrite_signatures: false,
                seed: None,
                read_only: false,
                pause: crate::probes::PauseChoice::Plan,
                counts: None,
                stop: None,
            },
            keep_results: false,
            energy: None,
            efficiency: None,
        }
    }

    #[test]
    fn offsets_are_per_host_stable_and_bounded() {
        let j = Duration::from_secs(600);
        let a = host_offset("node-1", "nightly", j);
        assert_eq!(a, host_offset("node-1", "nightly", j));
        assert_ne!(a, host_offset("node-2", "nightly", j));
        assert!(a < j);
        assert_eq!(host_offset("node-1", "nightly", Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn next_fire_adds_the_host_offset() {
        let j = job("0 30 2 * * *", Duration::from_secs(600));
        let now = DateTime::parse_from_rfc3339("2026-11-22T01:00:00Z").unwrap().with_timezone(&Utc);
        let off = host_offset("node-1", "nightly", j.jitter);
        let expect = DateTime::parse_from_rfc3339("2026-11-22T02:30:00Z").unwrap().with_timezone(&Utc) + chrono::Duration::from_std(off).unwrap();
        assert_eq!(next_fire(&j, "node-1", now), Some(expect));
        // Between the cron time and the jittered time, the jittered fire of today is still ahead.
        let mid = DateTime::parse_from_rfc3339("2026-11-22T02:30:00Z").unwrap().with_timezone(&Utc);
        assert_eq!(next_fire(&j, "node-1", mid), Some(expect));
    }

    #[tokio::test]
    async fn one_device_one_probe_at_a_time() {
        let locks = DeviceLocks::default();
        let a = locks.lock_for(std::path::Path::new("/nonexistent/dev")).await;
        let b = locks.lock_for(std::path::Path::new("/nonexistent/dev")).await;
        let _held = a.clone().lock_owned().await;
        assert!(b.try_lock().is_err(), "the same device shares one lock");
        let c = locks.lock_for(std::path::Path::new("/nonexistent/other")).await;
        assert!(c.try_lock().is_ok());
    }
}
