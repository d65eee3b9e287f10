//! The hourly tier (`rollup_1h`, docs/schema.md *Retention and rollups*): computed from the
//! 1-minute rollups, one hour at a time, by `SELECT … INTO` statements that read every host of
//! the hour, so no statement lists hosts. Three kinds of table:
//! - `power`: each series' hour (the minute tier's fields over the hour, plus
//!   `peak_minute_watts`, the largest minute mean), for dashboards and the plan's scopes;
//! - `host_power`: per host and `budget` tier, the largest minute of the sum of its tier zones'
//!   minute means (`peak_watts`) and the minutes counted;
//! - `group_power_<label>` per label (`rack`, `site`, …): per label value, the largest minute of
//!   the sum over every tier zone carrying it (the coincident peak `plan budget` reports).
//!
//! An hour is recomputed whole once its power minutes were recomputed and then left alone for
//! `rollup_settle` and the hour has ended, so late and backfilled minutes land in it as in the
//! minute tier. Each table's coverage (`since_ns`: every hour from there on is computed) is a point
//! of [`COVERAGE`]; a new table starts at the hour it appeared, and [`Tier::backfill_step`] walks
//! back to the oldest minute rollup. A new table is one more statement in [`statements`].

use crate::plan::points::{HOST_LEVEL, NOT_LABELS, SUMMABLE};
use crate::rollup::client::Client;
use crate::sinks::influx::config::{HOURLY_RP, ROLLUP_RP};
use crate::sinks::influx::tiers::{group_table, hour_of, ident, COVERAGE, HOST_POWER, HOUR_NS, SERIES};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Hours one backfill step computes (each hour one statement per table).
const BACKFILL_HOURS: i64 = 6;

/// Each series' hour: the minute tier's aggregates over the hour.
const SERIES_FIELDS: &str = "sum(\"watts_sum\") / sum(\"count\") AS \"watts\", max(\"watts\") AS \"peak_minute_watts\", \
     max(\"peak_watts\") AS \"peak_watts\", min(\"low_watts\") AS \"low_watts\", sum(\"count\") AS \"count\", \
     sum(\"watts_sum\") AS \"watts_sum\", sum(\"joules\") AS \"joules\", sum(\"interval_ns\") AS \"interval_ns\", \
     max(\"max_watts\") AS \"max_watts\", min(\"min_watts\") AS \"min_watts\", sum(\"readings\") AS \"readings\", \
     sum(\"flagged\") AS \"flagged\"";

/// (table, statement) that recompute the hours `[from_ns, to_ns)` of every table for `labels`.
pub fn statements(database: &str, labels: &[String], from_ns: i64, to_ns: i64) -> Vec<(String, String)> {
    let db = ident(database);
    let (src, dst) = (format!("{db}.{}.\"power\"", ident(ROLLUP_RP)), format!("{db}.{}", ident(HOURLY_RP)));
    let time = format!("time >= {from_ns} AND time < {to_ns}");
    let mut out = vec![(SERIES.to_string(), format!("SELECT {SERIES_FIELDS} INTO {dst}.\"power\" FROM {src} WHERE {time} GROUP BY time(1h), * fill(none)"))];
    // The sum per minute over the tier zones of each `by` value, its largest minute per hour.
    let peaks = |table: &str, by: &str| {
        format!(
            "SELECT max(\"w\") AS \"peak_watts\", count(\"w\") AS \"minutes\" INTO {dst}.{} FROM (SELECT sum(\"watts\") AS \"w\" FROM {src} \
             WHERE {SUMMABLE} AND {HOST_LEVEL} AND {time} GROUP BY time(1m), {by} fill(none)) WHERE {time} GROUP BY time(1h), {by} fill(none)",
            ident(table)
        )
    };
    out.push((HOST_POWER.to_string(), peaks(HOST_POWER, "\"host\", \"budget\"")));
    for l in labels {
        out.push((group_table(l), peaks(&group_table(l), &ident(l))));
    }
    out
}

/// A tag value in line protocol.
fn tag_value(s: &str) -> String {
    s.replace('\\', "\\\\").replace(',', "\\,").replace('=', "\\=").replace(' ', "\\ ")
}

/// The coverage lines of `tables` at `now_ns`.
pub fn coverage_lines(tables: &BTreeMap<String, i64>, now_ns: i64) -> String {
    tables.iter().map(|(t, since)| format!("{COVERAGE},table={} since_ns={since}i {now_ns}\n", tag_value(t))).collect()
}

/// The hourly tier's state in the rollup task: hours waiting, each table's coverage, and the
/// oldest minute rollup (where backfill stops).
#[derive(Default)]
pub struct Tier {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Hour start → the last time one of its power minutes was recomputed.
    waiting: BTreeMap<i64, Instant>,
    /// Table → `since_ns` (None until read from the database).
    coverage: Option<BTreeMap<String, i64>>,
    /// The oldest minute rollup's hour (None until found).
    floor: Option<i64>,
}

impl Tier {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks the hours of `[from_ns, to_ns)` as having new minutes at `now`.
    pub fn mark(&self, from_ns: i64, to_ns: i64, now: Instant) {
        let mut s = self.lock();
        let mut h = hour_of(from_ns);
        while h < to_ns {
            s.waiting.insert(h, now);
            h += HOUR_NS;
        }
    }

    /// Removes and returns the hours that ended by `now_ns` and were last marked at least
    /// `settle` before `now` (with `all`, every hour waiting).
    pub fn take_ready(&self, now: Instant, now_ns: i64, settle: Duration, all: bool) -> Vec<i64> {
        let mut s = self.lock();
        let ready: Vec<i64> =
            s.waiting.iter().filter(|(h, t)| all || (**h + HOUR_NS <= now_ns && now.saturating_duration_since(**t) >= settle)).map(|(h, _)| *h).collect();
        for h in &ready {
            s.waiting.remove(h);
        }
        ready
    }

    /// The labels of `power` (tag keys that are not standard tags).
    async fn labels(db: &Client) -> Result<Vec<String>, String> {
        let rows = db.rows("SHOW TAG KEYS FROM \"power\"").await?;
        Ok(rows.iter().filter_map(|r| r.first()?.as_str()).filter(|k| !NOT_LABELS.contains(k) && !k.contains(['"', '\\'])).map(str::to_string).collect())
    }

    /// Reads the coverage points once, and gives every table of `labels` without coverage its
    /// start at `now_ns`'s hour (written).
    async fn coverage(&self, db: &Client, labels: &[String], now_ns: i64) -> Result<BTreeMap<String, i64>, String> {
        let read = self.lock().coverage.clone();
        let mut cov = match read {
            Some(c) => c,
            None => {
                let q = format!("SELECT last(\"since_ns\") FROM {}.{COVERAGE} GROUP BY \"table\"", ident(HOURLY_RP));
                let v = db.query_series(&q).await?;
                v.into_iter().filter_map(|(tags, rows)| Some((tags.get("table")?.clone(), rows.first()?.get(1)?.as_i64()?))).collect()
            }
        };
        let tables = std::iter::once(SERIES.to_string()).chain(std::iter::once(HOST_POWER.to_string())).chain(labels.iter().map(|l| group_table(l)));
        let new: BTreeMap<String, i64> = tables.filter(|t| !cov.contains_key(t)).map(|t| (t, hour_of(now_ns))).collect();
        if !new.is_empty() {
            db.write(coverage_lines(&new, now_ns), Some(HOURLY_RP)).await?;
            cov.extend(new);
        }
        self.lock().coverage = Some(cov.clone());
        Ok(cov)
    }

    /// Recomputes `hours` (each whole, every table); the hours that failed are marked again.
    /// The statements run and the points written.
    pub(crate) async fn recompute(&self, db: &Client, hours: &[i64]) -> (u64, u64, Result<(), String>) {
        let (mut statements, mut written) = (0, 0);
        let labels = match Self::labels(db).await {
            Ok(l) => l,
            Err(e) => return self.failed(hours, e),
        };
        let now_ns = wattflip_proto::units::UnixNanos::now().0;
        if let Err(e) = self.coverage(db, &labels, now_ns).await {
            return self.failed(hours, e);
        }
        for (i, h) in hours.iter().enumerate() {
            for (_, q) in statements_for(db, &labels, *h, *h + HOUR_NS) {
                statements += 1;
                match db.exec(&q).await {
                    Ok(n) => written += n,
                    Err(e) => {
                        let (_, _, r) = self.failed(&hours[i..], e);
                        return (statements, written, r);
                    }
                }
            }
        }
        // The oldest minute rollup may be older now (late or backfilled minutes): find it again.
        self.lock().floor = None;
        (statements, written, Ok(()))
    }

    fn failed(&self, hours: &[i64], e: String) -> (u64, u64, Result<(), String>) {
        let now = Instant::now();
        let mut s = self.lock();
        for h in hours {
            s.waiting.insert(*h, now);
        }
        (0, 0, Err(e))
    }

    /// One backfill step: the [`BACKFILL_HOURS`] hours before the latest coverage start that is
    /// still above the oldest minute rollup, for the tables that start there; their coverage
    /// moves back and is written. Whether there is more to do.
    pub(crate) async fn backfill_step(&self, db: &Client) -> Result<bool, String> {
        let labels = Self::labels(db).await?;
        let now_ns = wattflip_proto::units::UnixNanos::now().0;
        let mut cov = self.coverage(db, &labels, now_ns).await?;
        let known = self.lock().floor;
        let floor = match known {
            Some(f) => f,
            None => {
                let q = format!("SELECT first(\"count\") FROM {}.\"power\"", ident(ROLLUP_RP));
                let rows = db.rows(&q).await?;
                let first = rows.first().and_then(|r| r.first()?.as_i64());
                let f = first.map_or(i64::MAX, hour_of);
                self.lock().floor = Some(f);
                f
            }
        };
        let Some(top) = cov.values().copied().filter(|s| *s > floor).max() else {
            return Ok(false);
        };
        let from = (top - BACKFILL_HOURS * HOUR_NS).max(floor);
        let tables: Vec<String> = cov.iter().filter(|(_, s)| **s == top).map(|(t, _)| t.clone()).collect();
        for (t, q) in statements_for(db, &labels, from, top) {
            if tables.contains(&t) {
                db.exec(&q).await?;
            }
        }
        let moved: BTreeMap<String, i64> = tables.into_iter().map(|t| (t, from)).collect();
        db.write(coverage_lines(&moved, now_ns), Some(HOURLY_RP)).await?;
        cov.extend(moved);
        let more = cov.values().any(|s| *s > floor);
        self.lock().coverage = Some(cov);
        Ok(more)
    }
}

/// [`statements`] one hour each over `[from_ns, to_ns)` (a statement's minutes stay one hour's).
fn statements_for(db: &Client, labels: &[String], from_ns: i64, to_ns: i64) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut h = from_ns;
    while h < to_ns {
        out.extend(statements(&db.cfg.database, labels, h, h + HOUR_NS));
        h += HOUR_NS;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_read_every_host_of_the_hour_and_group_per_label() {
        let s = statements("wf", &["rack".to_string()], 0, HOUR_NS);
        assert_eq!(s.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(), ["power", "host_power", "group_power_rack"]);
        assert!(s[0].1.starts_with("SELECT sum(\"watts_sum\") / sum(\"count\") AS \"watts\", max(\"watts\") AS \"peak_minute_watts\""), "{}", s[0].1);
        assert!(s[0].1.ends_with(
            "INTO \"wf\".\"rollup_1h\".\"power\" FROM \"wf\".\"rollup_1m\".\"power\" WHERE time >= 0 AND time < 3600000000000 GROUP BY time(1h), * fill(none)"
        ));
        assert_eq!(
            s[2].1,
            "SELECT max(\"w\") AS \"peak_watts\", count(\"w\") AS \"minutes\" INTO \"wf\".\"rollup_1h\".\"group_power_rack\" FROM (SELECT sum(\"watts\") AS \"w\" \
             FROM \"wf\".\"rollup_1m\".\"power\" WHERE \"rate\" != 'full' AND \"budget\" != '' AND time >= 0 AND time < 3600000000000 GROUP BY time(1m), \"rack\" fill(none)) \
             WHERE time >= 0 AND time < 3600000000000 GROUP BY time(1h), \"rack\" fill(none)"
        );
        assert!(s[1].1.contains("GROUP BY time(1m), \"host\", \"budget\" fill(none)"), "{}", s[1].1);
        let cov: BTreeMap<String, i64> = [("group_power_a b".to_string(), 7)].into();
        assert_eq!(coverage_lines(&cov, 9), "wattflip_rollup_1h,table=group_power_a\\ b since_ns=7i 9\n");
    }

    #[test]
    fn hours_wait_until_they_ended_and_settled() {
        let t = Tier::default();
        let t0 = Instant::now();
        t.mark(HOUR_NS - 60, HOUR_NS + 60, t0);
        let s = Duration::from_secs(30);
        // Hour 1 has not ended at 1 h 30 min; hour 0 has, but was marked just now.
        assert_eq!(t.take_ready(t0, HOUR_NS + 1_800_000_000_000, s, false), Vec::<i64>::new());
        assert_eq!(t.take_ready(t0 + s, HOUR_NS + 1_800_000_000_000, s, false), vec![0]);
        assert_eq!(t.take_ready(t0 + s, HOUR_NS, s, true), vec![HOUR_NS]);
    }
}
