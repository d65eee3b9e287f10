//! `plan budget` on the hourly tier (`rollup_1h`, computed by the collector's `rollup::hourly`): the whole hours of the window
//! that the tier covers are read from it, one point per host and hour (`host_power`) and per
//! group and hour (`group_power_<label>`); the rest of the window (its first partial hour, the last
//! two hours, which the collector may not have computed yet, and any hour before the tier's
//! coverage) from the 1-minute rollups. A peak is a maximum, so the window's peak is the largest
//! of the parts' peaks: the same number the minute tier gives, as the hourly points are the
//! minute tier's sums per minute, maximised per hour.
//!
//! The tier sums every zone carrying a `budget` tag; the minute path sums each host's chosen tier
//! ([`points::host_tier`]). They differ only for a host whose tagged scopes in the window are more
//! than its chosen ones (it changed tier, or psys appeared beside package): such a host's peak,
//! and its groups' peaks, are read from the minute tier over the whole window, with the other
//! scopes left out. No query names a host otherwise, so the query text does not grow with the
//! fleet.

use crate::plan::budget_rollup::{chosen_filter, host_peaks_query, GroupPower};
use crate::plan::resolution::influx_duration;
use crate::plan::{points, Influx, PlanError};
use crate::sinks::influx::config::{HOURLY_RP, ROLLUP_RP};
use crate::sinks::influx::tiers::{group_table, hour_of, ident, not_tag_condition, tag_condition, COVERAGE, HOST_POWER, HOUR_NS, SERIES};
use std::collections::{BTreeMap, BTreeSet};

/// Where each part of the window is read: the hourly tier over `[h0, h1)`, the minute tier over
/// `(start, h0)` and from `h1` on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    pub start: i64,
    pub h0: i64,
    pub h1: i64,
}

impl Split {
    /// The split of the window `(now − since, now]` given the tier's coverage start; None when
    /// no whole hour of the window is covered.
    pub fn of(now_ns: i64, since_ns: i64, covered_from: i64) -> Option<Split> {
        let start = now_ns - since_ns;
        let h0 = (hour_of(start) + HOUR_NS).max(covered_from);
        let h1 = hour_of(now_ns) - HOUR_NS;
        (h1 > h0).then_some(Split { start, h0, h1 })
    }

    fn hourly(&self) -> String {
        format!("time >= {} AND time < {}", self.h0, self.h1)
    }

    /// The minute tier's two parts.
    fn edges(&self) -> [String; 2] {
        [format!("time > {} AND time < {}", self.start, self.h0), format!("time >= {}", self.h1)]
    }
}

/// Per bucket of one minute over `filter`, the sum of the tier zones' minute means per `by`, and
/// its largest minute per `by` (the minute path's shape, with an explicit time range).
pub fn minute_peaks_query(filter: &str, by: &str) -> String {
    format!(
        "SELECT max(\"total\") FROM (SELECT sum(\"watts\") AS \"total\" FROM \"{ROLLUP_RP}\".\"power\" WHERE {} AND {} AND {filter} \
         GROUP BY time(1m), {by} fill(none)) GROUP BY {by}",
        points::SUMMABLE,
        points::HOST_LEVEL
    )
}

/// The tier zones each host has in a part: as `budget_rollup::scopes_query`, on `rp`.
pub fn scopes_query(rp: &str, time: &str, group_by: &str) -> String {
    let group = if group_by == "host" { String::new() } else { format!(", {}", ident(group_by)) };
    format!(
        "SELECT count(\"count\") FROM \"{rp}\".\"power\" WHERE {} AND {} AND {time} GROUP BY \"host\", \"scope\", \"zone\"{group}",
        points::SUMMABLE,
        points::HOST_LEVEL
    )
}

/// The largest hourly peak per `by` in `table`.
pub fn hourly_peaks_query(table: &str, time: &str, by: &str) -> String {
    format!("SELECT max(\"peak_watts\") FROM \"{HOURLY_RP}\".{} WHERE {time} GROUP BY {by}", ident(table))
}

/// Keeps the larger value per key.
fn keep_max(into: &mut BTreeMap<String, f64>, key: String, v: f64) {
    let e = into.entry(key).or_insert(v);
    *e = e.max(v);
}

async fn peaks(db: &Influx, q: &str, key: &dyn Fn(&BTreeMap<String, String>) -> String, into: &mut BTreeMap<String, f64>) -> Result<(), PlanError> {
    fold_peaks(db.query_raw(q).await?, key, into);
    Ok(())
}

/// Keeps the larger `max` per key of each series of an answer.
fn fold_peaks(series: Vec<crate::plan::Series>, key: &dyn Fn(&BTreeMap<String, String>) -> String, into: &mut BTreeMap<String, f64>) {
    for s in series {
        if let Some(p) = s.f(0, "max") {
            keep_max(into, key(&s.tags), p);
        }
    }
}

/// The three parts' answers to one query each (hourly tier, first edge, last edge).
type Parts = [Vec<crate::plan::Series>; 3];

/// The queries of the three parts at once: influxd answers them in parallel (at 10,000 hosts
/// the nine first-pass queries took 31 s one after another on two cores).
async fn all_parts(db: &Influx, q: &[String; 3]) -> Result<Parts, PlanError> {
    let (a, b, c) = tokio::try_join!(db.query_raw(&q[0]), db.query_raw(&q[1]), db.query_raw(&q[2]))?;
    Ok([a, b, c])
}

/// The tables' coverage starts (`since_ns`), by table.
async fn coverage(db: &Influx) -> Result<BTreeMap<String, i64>, PlanError> {
    let q = format!("SELECT last(\"since_ns\") FROM \"{HOURLY_RP}\".\"{COVERAGE}\" GROUP BY \"table\"");
    let mut out = BTreeMap::new();
    for s in db.query_raw(&q).await? {
        if let (Some(t), Some(v)) = (s.tags.get("table"), s.values.first().and_then(|r| r.get(1)).and_then(|v| v.as_i64())) {
            out.insert(t.clone(), v);
        }
    }
    Ok(out)
}

/// What the hourly path found: the plan's figures and its resolution line.
pub struct Hourly {
    pub power: GroupPower,
    pub resolution: String,
}

/// The plan's figures from the hourly tier and the minute tier's edges; None when the tier
/// covers no whole hour of the window (or lacks the grouping's table): the caller reads the
/// minute tier, saying why.
pub async fn power(db: &Influx, since: &str, group_by: &str, group_of: &dyn Fn(&BTreeMap<String, String>) -> String) -> Result<Option<Hourly>, PlanError> {
    let Some(since_d) = influx_duration(since).and_then(|d| i64::try_from(d.as_nanos()).ok()) else {
        return Ok(None);
    };
    let cov = coverage(db).await?;
    let mut tables = vec![SERIES.to_string(), HOST_POWER.to_string()];
    if group_by != "host" {
        tables.push(group_table(group_by));
    }
    let Some(covered_from) = tables.iter().map(|t| cov.get(t).copied()).collect::<Option<Vec<i64>>>().and_then(|v| v.into_iter().max()) else {
        return Ok(None);
    };
    let now_ns = wattflip_proto::units::UnixNanos::now().0;
    let Some(split) = Split::of(now_ns, since_d, covered_from) else {
        return Ok(None);
    };
    let mut out = GroupPower::default();
    // (group, raw tag value) of every (group, host), and each host's tagged scopes.
    let mut raw_group: BTreeMap<String, String> = BTreeMap::new();
    let [e0, e1] = split.edges();
    let scopes_q = [scopes_query(HOURLY_RP, &split.hourly(), group_by), scopes_query(ROLLUP_RP, &e0, group_by), scopes_query(ROLLUP_RP, &e1, group_by)];
    let hosts_q = [hourly_peaks_query(HOST_POWER, &split.hourly(), "\"host\""), minute_peaks_query(&e0, "\"host\""), minute_peaks_query(&e1, "\"host\"")];
    let by = ident(group_by);
    let groups_q = [hourly_peaks_query(&group_table(group_by), &split.hourly(), &by), minute_peaks_query(&e0, &by), minute_peaks_query(&e1, &by)];
    let groups = async {
        match group_by {
            "host" => Ok(None),
            _ => all_parts(db, &groups_q).await.map(Some),
        }
    };
    let (scopes, hosts, groups) = tokio::try_join!(all_parts(db, &scopes_q), all_parts(db, &hosts_q), groups)?;
    for part in scopes {
        for s in part {
            let host = s.tags.get("host").cloned().unwrap_or_default();
            let scope = s.tags.get("scope").cloned().unwrap_or_default();
            let g = group_of(&s.tags);
            raw_group.insert(g.clone(), s.tags.get(group_by).cloned().unwrap_or_default());
            out.scopes.entry((g, host)).or_default().insert(scope);
        }
    }
    // The chosen scopes per host, as the minute path chooses them, and the hosts with more.
    let mut chosen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut tagged: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for ((_, host), scopes) in &out.scopes {
        tagged.entry(host.clone()).or_default().extend(scopes.iter().cloned());
        if let Some((_, used)) = points::host_tier(scopes.iter().map(String::as_str)) {
            chosen.insert(host.clone(), used.iter().map(|s| s.to_string()).collect());
        }
    }
    let odd: BTreeMap<String, Vec<String>> = chosen.iter().filter(|(h, used)| tagged[*h].len() != used.len()).map(|(h, u)| (h.clone(), u.clone())).collect();
    let host_key = |t: &BTreeMap<String, String>| t.get("host").cloned().unwrap_or_default();
    for part in hosts {
        fold_peaks(part, &host_key, &mut out.host_peak);
    }
    out.host_peak.retain(|h, _| chosen.contains_key(h) && !odd.contains_key(h));
    if !odd.is_empty() {
        peaks(db, &host_peaks_query(&chosen_filter(&odd), "1m", since), &host_key, &mut out.host_peak).await?;
    }
    match groups {
        None => out.group_peak = out.host_peak.clone(),
        Some(parts) => out.group_peak = group_peaks(db, parts, group_by, group_of, &out, &odd, &tagged, &raw_group, since).await?,
    }
    Ok(Some(Hourly { resolution: describe(&split, odd.len()), power: out }))
}

/// Each group's peak: the hourly tier and the minute edges (`parts`, already read); groups with
/// a host of [`power`]'s `odd` set from the minute tier over the whole window, that host's other
/// scopes left out.
#[allow(clippy::too_many_arguments)]
async fn group_peaks(
    db: &Influx,
    parts: Parts,
    group_by: &str,
    group_of: &dyn Fn(&BTreeMap<String, String>) -> String,
    out: &GroupPower,
    odd: &BTreeMap<String, Vec<String>>,
    tagged: &BTreeMap<String, BTreeSet<String>>,
    raw_group: &BTreeMap<String, String>,
    since: &str,
) -> Result<BTreeMap<String, f64>, PlanError> {
    let by = ident(group_by);
    let mut group_peak = BTreeMap::new();
    for part in parts {
        fold_peaks(part, group_of, &mut group_peak);
    }
    let odd_groups: BTreeSet<String> = out.scopes.keys().filter(|(_, h)| odd.contains_key(h)).map(|(g, _)| g.clone()).collect();
    if !odd_groups.is_empty() {
        group_peak.retain(|g, _| !odd_groups.contains(g));
        // Per set of scopes left out, the hosts that leave them out.
        let mut left_out: BTreeMap<BTreeSet<String>, BTreeSet<String>> = BTreeMap::new();
        for (h, used) in odd {
            let other: BTreeSet<String> = tagged[h].iter().filter(|s| !used.contains(s)).cloned().collect();
            left_out.entry(other).or_default().insert(h.clone());
        }
        let mut filter: Vec<String> =
            left_out.iter().map(|(scopes, hosts)| format!("({} OR {})", not_tag_condition("host", hosts), not_tag_condition("scope", scopes))).collect();
        let values: BTreeSet<String> = odd_groups.iter().filter_map(|g| raw_group.get(g).cloned()).collect();
        filter.push(tag_condition(group_by, &values));
        filter.push(format!("time > now() - {since}"));
        peaks(db, &minute_peaks_query(&filter.join(" AND "), &by), group_of, &mut group_peak).await?;
    }
    Ok(group_peak)
}

/// The resolution line: the hours read from each tier.
fn describe(split: &Split, odd: usize) -> String {
    let t = |ns: i64| humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns.max(0) as u64)).to_string();
    let mut s = format!(
        "hourly tier (retention policy {HOURLY_RP}: the largest minute of each hour) from {} to {}, 1-minute rollups ({ROLLUP_RP}) before and after (--bucket 1m); \
         the same peaks as the 1-minute rollups; the newest minute or two are rolled up after the collector's rollup_settle",
        t(split.h0),
        t(split.h1)
    );
    if odd > 0 {
        s.push_str(&format!("; {odd} host(s) with more tagged scopes than their tier (and their groups) from the 1-minute rollups over the whole window"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_splits_at_whole_covered_hours() {
        let h = HOUR_NS;
        // now = 100 h + 30 min, 30 days back: hours from 100 h + 30 min − 720 h + 1 h to 99 h.
        let now = 100 * h + h / 2;
        assert_eq!(Split::of(now, 720 * h, i64::MIN), Some(Split { start: now - 720 * h, h0: -620 * h + h, h1: 99 * h }));
        // Covered only from hour 50: the minute tier reads up to it.
        assert_eq!(Split::of(now, 720 * h, 50 * h).map(|s| (s.h0, s.h1)), Some((50 * h, 99 * h)));
        // Two hours or less: no whole covered hour.
        assert_eq!(Split::of(now, 2 * h, i64::MIN), None);
        assert_eq!(Split::of(now, 720 * h, 99 * h), None);
        let s = Split { start: 5, h0: h, h1: 3 * h };
        assert_eq!(s.edges(), [format!("time > 5 AND time < {h}"), format!("time >= {}", 3 * h)]);
        assert_eq!(
            minute_peaks_query(&s.edges()[1], "\"rack\""),
            "SELECT max(\"total\") FROM (SELECT sum(\"watts\") AS \"total\" FROM \"rollup_1m\".\"power\" WHERE \"rate\" != 'full' AND \"budget\" != '' \
             AND time >= 10800000000000 GROUP BY time(1m), \"rack\" fill(none)) GROUP BY \"rack\""
        );
        assert_eq!(
            hourly_peaks_query("group_power_rack", &s.hourly(), "\"rack\""),
            "SELECT max(\"peak_watts\") FROM \"rollup_1h\".\"group_power_rack\" WHERE time >= 3600000000000 AND time < 10800000000000 GROUP BY \"rack\""
        );
    }
}
