//! The drive monitor's worker pool: every drive is read on its own `drives.smart_interval` by one
//! of at most `drives.smart_workers` threads, so a hung or slow drive delays only itself.
//!
//! Why: a JBOD host has 24–100 drives and each read is a child process that may hang until the
//! tool deadline (15 s). Read one after the other, one hung disk held every other disk's reading
//! back by that long per poll. Here each drive has its own schedule: when it is due and its last
//! read is still running, that read is *late*: this interval is skipped for that drive alone, a
//! `drive_late` warning says so once per episode (an `info` event when it answers again), and
//! [`Poll::late`] counts it. The other drives' reads go on, each on a worker of its own.
//!
//! [`HealthPool::step`] never blocks: it hands due reads to the workers and takes finished ones
//! (applied to the [`DriveMonitor`], which keeps the memory of what was reported). `run` calls it
//! a few times per interval; [`HealthPool::finish`] waits (bounded) for reads still running at
//! stop. To change the scheduling, change [`HealthPool::step`]; workers only run [`read`].

use super::monitor::{DriveMonitor, Poll};
use super::reading::{read, Reading};
use super::tools::{DriveTools, HealthDevice};
use crate::events::event;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wattflip_drives::PowerCheck;
use wattflip_proto::v1;

/// The UTC clock of readings, shared with the workers.
pub type UtcClock = Arc<dyn Fn() -> i64 + Send + Sync>;

struct Job {
    index: usize,
    dev: HealthDevice,
    skip_smartctl: bool,
}

struct Slot {
    dev: HealthDevice,
    next_due: Instant,
    /// When the read still running started.
    running_since: Option<Instant>,
    /// A `drive_late` event was sent for the running read.
    late_reported: bool,
}

/// Bounded worker threads reading drives, each on its own schedule. Workers end when the pool is
/// dropped (a worker in a hung tool call ends when that call's deadline kills the child).
pub struct HealthPool {
    jobs: Sender<Job>,
    done: Receiver<(usize, Reading)>,
    slots: Vec<Slot>,
    interval: Duration,
    clock: UtcClock,
}

impl HealthPool {
    /// Starts `workers` threads (at least 1, at most one per device) for the monitor's devices,
    /// all first due at `start`.
    pub fn new(monitor: &DriveMonitor, interval: Duration, workers: usize, clock: UtcClock, start: Instant) -> std::io::Result<HealthPool> {
        let (tools, devices, nocheck) = monitor.read_plan();
        let (jobs, job_rx) = channel::<Job>();
        let (done_tx, done) = channel();
        let job_rx = Arc::new(Mutex::new(job_rx));
        for i in 0..workers.clamp(1, devices.len().max(1)) {
            let (rx, tx, tools, clock) = (job_rx.clone(), done_tx.clone(), tools.clone(), clock.clone());
            std::thread::Builder::new().name(format!("drive-read-{i}")).spawn(move || worker(rx, tx, tools, nocheck, clock))?;
        }
        let slots = devices.into_iter().map(|dev| Slot { dev, next_due: start, running_since: None, late_reported: false }).collect();
        Ok(HealthPool { jobs, done, slots, interval, clock })
    }

    /// Applies the reads that finished, then starts every read that is due (a drive whose last
    /// read still runs is late instead: skipped this interval, reported once). Never blocks.
    pub fn step(&mut self, monitor: &mut DriveMonitor, now: Instant) -> Poll {
        let mut out = Poll::default();
        while let Ok((i, r)) = self.done.try_recv() {
            out.merge(self.finished(monitor, i, r));
        }
        for i in 0..self.slots.len() {
            let interval = self.interval;
            let slot = &mut self.slots[i];
            if now < slot.next_due {
                continue;
            }
            // The next due time stays on the drive's grid; after a long stall it restarts from now.
            slot.next_due += interval;
            if slot.next_due <= now {
                slot.next_due = now + interval;
            }
            if let Some(since) = slot.running_since {
                out.late += 1;
                if !slot.late_reported {
                    slot.late_reported = true;
                    out.events.push(late_event((self.clock)(), &slot.dev, now.duration_since(since), interval));
                }
                continue;
            }
            let job = Job { index: i, dev: slot.dev.clone(), skip_smartctl: monitor.refused(&slot.dev.tag) };
            if self.jobs.send(job).is_ok() {
                slot.running_since = Some(now);
            }
        }
        out
    }

    /// Waits until no read is running or `deadline` passes, applying what finishes (at stop, so
    /// the reads started are sent).
    pub fn finish(&mut self, monitor: &mut DriveMonitor, deadline: Instant) -> Poll {
        let mut out = Poll::default();
        while self.slots.iter().any(|s| s.running_since.is_some()) {
            let wait = deadline.saturating_duration_since(Instant::now());
            match self.done.recv_timeout(wait) {
                Ok((i, r)) => out.merge(self.finished(monitor, i, r)),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        out
    }

    fn finished(&mut self, monitor: &mut DriveMonitor, i: usize, r: Reading) -> Poll {
        let Some(slot) = self.slots.get_mut(i) else { return Poll::default() };
        slot.running_since = None;
        let mut out = monitor.absorb(&slot.dev, r);
        if std::mem::take(&mut slot.late_reported) {
            let msg = format!("{}: answered again; its reads are back on drives.smart_interval", slot.dev.node);
            out.events.push(event((self.clock)(), "drive_late", v1::Severity::Info, &slot.dev.tag, msg));
        }
        out
    }
}

fn worker(jobs: Arc<Mutex<Receiver<Job>>>, done: Sender<(usize, Reading)>, tools: DriveTools, nocheck: Option<PowerCheck>, clock: UtcClock) {
    loop {
        // The lock is held only while waiting for the next job, never during a read.
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(poisoned) => poisoned.into_inner().recv(),
        };
        let Ok(job) = job else { return };
        let r = read(&tools, &job.dev, job.skip_smartctl, nocheck, &|| clock());
        if done.send((job.index, r)).is_err() {
            return;
        }
    }
}

fn late_event(utc: i64, dev: &HealthDevice, running: Duration, interval: Duration) -> v1::Event {
    let msg = format!(
        "{}: its read has run {:.1} s, longer than drives.smart_interval ({:.1} s): this drive's next read waits for it \
         (the other drives are read on time); check the drive and its cabling, or raise drives.smart_interval",
        dev.node,
        running.as_secs_f64(),
        interval.as_secs_f64()
    );
    tracing::warn!(device = %dev.node, "{msg}");
    let mut e = event(utc, "drive_late", v1::Severity::Warning, &dev.tag, msg);
    e.attributes.insert("running_ms".into(), running.as_millis().to_string());
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use wattflip_drives::command::command_line as command_line_of;
    use wattflip_drives::{CommandError, CommandOutput, CommandRunner, Exit, Smartctl};

    const HUNG: &str = "/dev/sd0";
    const SLOW: [&str; 5] = ["/dev/sd1", "/dev/sd2", "/dev/sd3", "/dev/sd4", "/dev/sd5"];

    /// 100 SATA drives behind one fake smartctl: `/dev/sd0` never answers (the runner waits out the
    /// tool deadline, as the real one kills a hung child), `/dev/sd1`..`sd5` answer after
    /// `slow`, the rest at once. Every call's start is recorded per device.
    struct Fleet {
        start: Instant,
        slow: Duration,
        starts: Mutex<BTreeMap<String, Vec<Duration>>>,
    }

    impl CommandRunner for Fleet {
        fn run(&self, argv: &[String], timeout: Duration) -> Result<CommandOutput, CommandError> {
            let dev = argv.last().cloned().unwrap_or_default();
            self.starts.lock().unwrap().entry(dev.clone()).or_default().push(self.start.elapsed());
            if dev == HUNG {
                std::thread::sleep(timeout);
                return Err(CommandError::Timeout { command: command_line_of(argv), timeout, stderr: String::new() });
            }
            if SLOW.contains(&dev.as_str()) {
                std::thread::sleep(self.slow);
            }
            let stdout = format!(
                r#"{{"smartctl":{{"version":[7,4],"exit_status":0}},"device":{{"name":"{dev}","type":"sat","protocol":"ATA"}},"power_mode":{{"ata_value":255,"name":"ACTIVE or IDLE"}},"temperature":{{"current":30}}}}"#
            );
            Ok(CommandOutput { argv: argv.to_vec(), exit: Exit::Code(0), stdout, stderr: String::new() })
        }
    }

    /// The issue's JBOD, scaled down in time: 100 drives at a 600 ms interval, one hung (2 s tool
    /// deadline), five answering in 400 ms. Every one of the 99 answering drives starts a read on
    /// each interval (0, 0.6, … 3.0 s, within the step granularity); the hung drive is read
    /// again only after its deadline, its lateness is one warning per episode (and one info
    /// when it answers again), and no other drive is ever late.
    #[test]
    fn a_hung_drive_delays_only_itself_among_100() {
        let interval = Duration::from_millis(600);
        let fleet = Arc::new(Fleet { start: Instant::now(), slow: Duration::from_millis(400), starts: Mutex::new(BTreeMap::new()) });
        let smartctl = Smartctl::new(fleet.clone()).with_timeout(Duration::from_secs(2));
        let tools = DriveTools { nvme: None, smartctl: Some(smartctl), unavailable: Vec::new() };
        let devices: Vec<HealthDevice> = (0..100)
            .map(|i| HealthDevice {
                node: format!("/dev/sd{i}"),
                tag: format!("sd{i}"),
                device_type: Some("sat".into()),
                serial: String::new(),
                nvme: false,
                identified: true,
            })
            .collect();
        let mut monitor = DriveMonitor::new(tools, devices);
        let clock: UtcClock = Arc::new(|| 1);
        let workers = crate::drives::config::DrivesConfig::default().smart_workers;
        let mut pool = HealthPool::new(&monitor, interval, workers, clock, fleet.start).unwrap();
        let mut out = Poll::default();
        while fleet.start.elapsed() < Duration::from_millis(3150) {
            out.merge(pool.step(&mut monitor, Instant::now()));
            std::thread::sleep(Duration::from_millis(10));
        }
        out.merge(pool.finish(&mut monitor, Instant::now() + Duration::from_millis(800)));
        let starts = fleet.starts.lock().unwrap().clone();
        let slack = Duration::from_millis(250);
        for i in 1..100 {
            let dev = format!("/dev/sd{i}");
            let s = &starts[&dev];
            assert_eq!(s.len(), 6, "{dev}: reads started at {s:?}");
            for (k, t) in s.iter().enumerate() {
                let due = interval * k as u32;
                assert!(*t >= due && *t <= due + slack, "{dev}: read {k} started at {t:?}, due at {due:?}");
            }
            let temps = out.temperature.iter().filter(|t| t.device == format!("sd{i}")).count();
            assert_eq!(temps, 6, "{dev}: every read gave its temperature");
        }
        // The hung drive: read at 0, late at 0.6/1.2/1.8, its deadline at 2.0, read again at 2.4,
        // late again at 3.0.
        let hung = &starts[HUNG];
        assert_eq!(hung.len(), 2, "{hung:?}");
        assert!(hung[1] >= interval * 4 && hung[1] <= interval * 4 + slack, "{hung:?}");
        assert_eq!(out.late, 4);
        let late: Vec<(&str, i32)> = out.events.iter().filter(|e| e.kind == "drive_late").map(|e| (e.device.as_str(), e.severity)).collect();
        let (warn, info) = (v1::Severity::Warning as i32, v1::Severity::Info as i32);
        assert_eq!(late, vec![("sd0", warn), ("sd0", info), ("sd0", warn)]);
        let errors: Vec<&str> = out.events.iter().filter(|e| e.kind == "sensor_error").map(|e| e.device.as_str()).collect();
        assert_eq!(errors, vec!["sd0"], "the deadline is one error, reported once");
        assert_eq!(out.drive_power_modes.len(), 99 * 6);
    }
}
