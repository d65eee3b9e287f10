//! The rollup task: creates the retention policies, then every tick recomputes the buckets whose
//! writes settled, grouped into few statements (one per measurement and run of minutes with the
//! same hosts, at most [`MAX_HOSTS`] hosts and [`MAX_MINUTES`] minutes each). A failed statement
//! puts its buckets back. At start it recomputes the last minutes of every host (buckets a
//! previous process had not recomputed when it stopped); at shutdown it recomputes what waits.
//! The hours whose power minutes were recomputed wait in [`hourly::Tier`] and are recomputed
//! once ended and settled; between ticks with nothing else to do the tier is backfilled.

use crate::rollup::client::Client;
use crate::rollup::dirty::{Bucket, Dirty, MINUTE_NS};
use crate::rollup::hourly;
use crate::rollup::resolution;
use crate::rollup::setup::Setup;
use crate::rollup::statements::recompute;
use crate::sinks::influx::config::InfluxConfig;
use crate::sinks::influx::tiers::{ident, HOUR_NS, SERIES};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Hosts per statement (the regex stays short) and minutes per statement (one statement's raw
/// points stay far below `max-select-point` even for full-rate series).
pub const MAX_HOSTS: usize = 100;
pub const MAX_MINUTES: i64 = 10;
/// How far back the start-up pass recomputes, beyond the settle delay.
const CATCH_UP: Duration = Duration::from_secs(600);

/// One statement's worth of buckets.
#[derive(Debug, Clone, PartialEq)]
pub struct Work {
    pub measurement: String,
    pub hosts: BTreeSet<String>,
    pub from_ns: i64,
    pub to_ns: i64,
}

/// Groups buckets into statements: per measurement, the hosts of each minute (in chunks of
/// [`MAX_HOSTS`]), consecutive minutes with the same hosts merged up to [`MAX_MINUTES`].
pub fn plan(buckets: &[Bucket]) -> Vec<Work> {
    let mut by_minute: BTreeMap<(&str, i64), BTreeSet<String>> = BTreeMap::new();
    for b in buckets {
        by_minute.entry((b.measurement.as_str(), b.minute_ns)).or_default().insert(b.host.clone());
    }
    let mut out: Vec<Work> = Vec::new();
    for ((m, minute), hosts) in by_minute {
        let hosts: Vec<String> = hosts.into_iter().collect();
        for chunk in hosts.chunks(MAX_HOSTS) {
            let chunk: BTreeSet<String> = chunk.iter().cloned().collect();
            let merged = out
                .iter_mut()
                .rev()
                .take(hosts.len().div_ceil(MAX_HOSTS))
                .find(|w| w.measurement == m && w.to_ns == minute && w.hosts == chunk && (w.to_ns - w.from_ns) / MINUTE_NS < MAX_MINUTES);
            match merged {
                Some(w) => w.to_ns += MINUTE_NS,
                None => out.push(Work { measurement: m.to_string(), hosts: chunk, from_ns: minute, to_ns: minute + MINUTE_NS }),
            }
        }
    }
    out
}

struct Runner {
    db: Client,
    dirty: Arc<Dirty>,
    hourly: hourly::Tier,
}

impl Runner {
    /// Runs the statements of `buckets`; a failed statement's buckets wait again.
    async fn recompute(&self, buckets: &[Bucket]) {
        let stats = &self.dirty.stats;
        for w in plan(buckets) {
            let q = recompute(&self.db.cfg.database, &w.measurement, Some(&w.hosts), w.from_ns, w.to_ns);
            stats.statements.fetch_add(1, Ordering::Relaxed);
            let minutes = ((w.to_ns - w.from_ns) / MINUTE_NS) as u64;
            match self.db.exec(&q).await {
                Ok(n) => {
                    stats.points_written.fetch_add(n, Ordering::Relaxed);
                    stats.buckets_recomputed.fetch_add(minutes * w.hosts.len() as u64, Ordering::Relaxed);
                    if w.measurement == SERIES {
                        self.hourly.mark(w.from_ns, w.to_ns, Instant::now());
                    }
                }
                Err(e) => {
                    stats.statements_failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("rollup of {} for {} host(s) failed, will retry: {e}", w.measurement, w.hosts.len());
                    let again =
                        buckets.iter().filter(|b| b.measurement == w.measurement && w.hosts.contains(&b.host) && (w.from_ns..w.to_ns).contains(&b.minute_ns));
                    self.dirty.mark(again.cloned(), Instant::now());
                }
            }
        }
    }

    /// Recomputes the last minutes of every host and measurement: what a previous process stored
    /// but had not recomputed when it stopped.
    async fn catch_up(&self, settle: Duration) -> Result<(), String> {
        let now_ns = wattflip_proto::units::UnixNanos::now().0;
        let back = i64::try_from((settle + CATCH_UP).as_nanos()).unwrap_or(i64::MAX);
        let (from, to) = ((now_ns - back).div_euclid(MINUTE_NS) * MINUTE_NS, (now_ns.div_euclid(MINUTE_NS) + 1) * MINUTE_NS);
        let q = format!("SHOW MEASUREMENTS ON {}", ident(&self.db.cfg.database));
        let v = self.measurements(&q).await?;
        for m in v {
            let q = recompute(&self.db.cfg.database, &m, None, from, to);
            let n = self.db.exec(&q).await?;
            self.dirty.stats.points_written.fetch_add(n, Ordering::Relaxed);
        }
        // The hour before too: a process stopped just after an hour ended had not computed it.
        self.hourly.mark(from - HOUR_NS, to, Instant::now());
        Ok(())
    }

    /// Recomputes the hours that are ready (every hour waiting with `all`), else one backfill
    /// step; failures are logged and retried.
    async fn hours(&self, settle: Duration, all: bool, backfill: &mut bool) {
        let now_ns = wattflip_proto::units::UnixNanos::now().0;
        let ready = self.hourly.take_ready(Instant::now(), now_ns, settle, all);
        let stats = &self.dirty.stats;
        if !ready.is_empty() {
            let (n, written, r) = self.hourly.recompute(&self.db, &ready).await;
            stats.statements.fetch_add(n, Ordering::Relaxed);
            stats.points_written.fetch_add(written, Ordering::Relaxed);
            if let Err(e) = r {
                stats.statements_failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("hourly rollup of {} hour(s) failed, will retry: {e}", ready.len());
            }
            // A new label's table starts at this hour: backfill it.
            *backfill = true;
        } else if *backfill && !all {
            match self.hourly.backfill_step(&self.db).await {
                Ok(more) => *backfill = more,
                Err(e) => tracing::warn!("hourly rollup backfill failed, will retry: {e}"),
            }
        }
    }

    /// The database's measurements, but the resolution markers (they are not copied).
    async fn measurements(&self, q: &str) -> Result<Vec<String>, String> {
        let rows = self.db.rows(q).await.map_err(|e| format!("SHOW MEASUREMENTS: {e}"))?;
        Ok(rows.iter().filter_map(|r| r.first()?.as_str().map(str::to_string)).filter(|m| m != resolution::MEASUREMENT).collect())
    }
}

/// Recomputes every bucket waiting in `dirty` now (the dead-letter replay's, which runs without
/// the service); the buckets recomputed, and those that failed (they stay in `dirty`).
pub async fn recompute_now(cfg: &InfluxConfig, dirty: Arc<Dirty>) -> (u64, u64) {
    let r = Runner { db: Client::new(cfg.clone()), dirty, hourly: hourly::Tier::default() };
    let stats = &r.dirty.stats;
    let (done, failed) = (stats.buckets_recomputed.load(Ordering::Relaxed), stats.statements_failed.load(Ordering::Relaxed));
    let ready = r.dirty.take_settled(Instant::now(), Duration::ZERO);
    r.recompute(&ready).await;
    r.hours(Duration::ZERO, true, &mut false).await;
    (stats.buckets_recomputed.load(Ordering::Relaxed) - done, stats.statements_failed.load(Ordering::Relaxed) - failed)
}

/// Runs until `shutdown`: creates the policies (retrying), catches up, then recomputes settled
/// buckets every tick and logs the buckets the dirty set had to drop.
pub async fn run(cfg: InfluxConfig, dirty: Arc<Dirty>, setup: Setup, mut shutdown: watch::Receiver<bool>) {
    let Some(retention) = cfg.retention.clone() else { return };
    let r = Runner { db: Client::new(cfg), dirty, hourly: hourly::Tier::default() };
    if !setup.run(&r.db, "rollups", &retention.setup_statements(&r.db.cfg.database), &mut shutdown).await {
        return;
    }
    if let Err(e) = r.catch_up(retention.settle).await {
        tracing::warn!("rollup catch-up of the last minutes failed (they are recomputed when written again): {e}");
    }
    let tick = (retention.settle / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    let (mut dropped_seen, mut backfill) = (0, true);
    loop {
        let stop = tokio::select! {
            _ = tokio::time::sleep(tick) => false,
            _ = shutdown.changed() => true,
        };
        let settle = if stop { Duration::ZERO } else { retention.settle };
        let ready = r.dirty.take_settled(Instant::now(), settle);
        r.recompute(&ready).await;
        let mut no_backfill = false;
        r.hours(settle, false, if stop { &mut no_backfill } else { &mut backfill }).await;
        let dropped = r.dirty.stats.buckets_dropped.load(Ordering::Relaxed);
        if dropped > dropped_seen {
            tracing::warn!(dropped = dropped - dropped_seen, max = retention.max_dirty,
                "rollup buckets dropped: the dirty set was full, so these minutes' rollups may miss points (raise influx.rollup_max_dirty; wattflip_collector_rollup_buckets_dropped_total)");
            dropped_seen = dropped;
        }
        if stop {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollup::statements::aggregates;

    #[test]
    fn buckets_group_into_few_statements() {
        let b = |m: &str, h: &str, k: i64| Bucket { measurement: m.into(), host: h.into(), minute_ns: k * MINUTE_NS };
        let set = |hs: &[&str]| hs.iter().map(|h| h.to_string()).collect::<BTreeSet<String>>();
        let w = |m: &str, hs: &[&str], a: i64, z: i64| Work { measurement: m.into(), hosts: set(hs), from_ns: a * MINUTE_NS, to_ns: z * MINUTE_NS };
        let mut buckets = vec![b("power", "a", 0), b("power", "b", 0), b("power", "a", 1), b("power", "b", 1), b("power", "a", 3), b("event", "a", 1)];
        assert_eq!(plan(&buckets), vec![w("event", &["a"], 1, 2), w("power", &["a", "b"], 0, 2), w("power", &["a"], 3, 4)]);
        // 11 consecutive minutes of one host: two statements.
        buckets = (0..11).map(|k| b("power", "a", k)).collect();
        assert_eq!(plan(&buckets), vec![w("power", &["a"], 0, 10), w("power", &["a"], 10, 11)]);
        // 150 hosts in two minutes: two host chunks, each over both minutes.
        let hosts: Vec<String> = (0..150).map(|i| format!("h{i:03}")).collect();
        buckets = (0..2).flat_map(|k| hosts.iter().map(move |h| b("power", h, k))).collect();
        let p = plan(&buckets);
        assert_eq!(p.iter().map(|w| (w.hosts.len(), w.from_ns, w.to_ns)).collect::<Vec<_>>(), vec![(100, 0, 2 * MINUTE_NS), (50, 0, 2 * MINUTE_NS)]);
        assert!(aggregates("probe_run").is_none());
    }
}
