//! `plan budget` on the 1-minute rollups, reduced inside InfluxDB: a 30-day window of 1,000 hosts
//! is 43 M rollup points per zone, too many to bring back as rows, so InfluxDB sums and takes the
//! peaks and only a few rows per host and group come back. Three queries: the scopes each host
//! has in the window (its tier is chosen here, [`points::host_tier`], as on raw points), then
//! over the tiers' (host, scope) pairs only: each group's coincident peak and each host's own
//! peak. Each bucket's mean is Σ `watts_sum` ÷ Σ `count` of its minutes, the raw points' mean.
//! A new figure is one more query of the same shape.

use crate::plan::{points, Influx, PlanError};
use crate::sinks::influx::config::ROLLUP_RP;
use crate::sinks::influx::tiers::tag_condition;
use std::collections::{BTreeMap, BTreeSet};

fn group_tag(group_by: &str) -> String {
    if group_by == "host" {
        String::new()
    } else {
        format!(", \"{group_by}\"")
    }
}

/// The host-level zones each host has in the window: one row per (host, scope, zone, group). Only the
/// points the collector tagged with their host's tier ([`points::HOST_LEVEL`]) are read, so this
/// pass reads about the zones the peaks read, not every zone (cores, uncore, MMIO duplicates);
/// the tier chosen from them is the one the raw path chooses whenever the host's best tier sent
/// in the window (docs/schema.md, *The `budget` tag*).
pub fn scopes_query(since: &str, group_by: &str) -> String {
    format!(
        "SELECT count(\"count\") FROM \"{ROLLUP_RP}\".\"power\" WHERE {} AND {} AND time > now() - {since} GROUP BY \"host\", \"scope\", \"zone\"{}",
        points::SUMMABLE,
        points::HOST_LEVEL,
        group_tag(group_by)
    )
}

/// The chosen (host, scope) pairs: hosts with the same scopes share one term.
pub fn chosen_filter(chosen: &BTreeMap<String, Vec<String>>) -> String {
    let mut by_scopes: BTreeMap<&Vec<String>, BTreeSet<String>> = BTreeMap::new();
    for (host, scopes) in chosen {
        by_scopes.entry(scopes).or_default().insert(host.clone());
    }
    let terms: Vec<String> = by_scopes
        .into_iter()
        .map(|(scopes, hosts)| format!("({} AND {})", tag_condition("host", &hosts), tag_condition("scope", &scopes.iter().cloned().collect())))
        .collect();
    format!("({})", terms.join(" OR "))
}

/// Per bucket and `by` tag: the sum over the chosen zones of each zone's mean. With 1-minute
/// buckets a zone's mean is its rollup point's own `watts` (the minute's `sum / count`, as
/// InfluxDB's `mean()` computes it), so one level sums them: a subquery level over 43,200
/// buckets a series costs more than the points themselves. Longer buckets take each zone's
/// Σ `watts_sum` ÷ Σ `count` first.
fn totals(filter: &str, bucket: &str, since: &str, by: &str) -> String {
    let from = format!("\"{ROLLUP_RP}\".\"power\" WHERE {} AND {filter} AND time > now() - {since}", points::SUMMABLE);
    if bucket == "1m" {
        return format!("SELECT sum(\"watts\") AS \"total\" FROM {from} GROUP BY time(1m), \"{by}\" fill(none)");
    }
    let zones = if by == "host" { "\"host\", \"zone\"".to_string() } else { format!("\"host\", \"zone\", \"{by}\"") };
    format!(
        "SELECT sum(\"w\") AS \"total\" FROM (SELECT sum(\"watts_sum\") / sum(\"count\") AS \"w\" FROM {from} GROUP BY time({bucket}), {zones} fill(none)) \
         GROUP BY time({bucket}), \"{by}\""
    )
}

/// Each group's peak of the coincident total of its hosts.
pub fn group_peaks_query(filter: &str, bucket: &str, since: &str, group_by: &str) -> String {
    format!("SELECT max(\"total\") FROM ({}) GROUP BY \"{group_by}\"", totals(filter, bucket, since, group_by))
}

/// Each host's own peak (its chosen zones summed per bucket).
pub fn host_peaks_query(filter: &str, bucket: &str, since: &str) -> String {
    format!("SELECT max(\"total\") FROM ({}) GROUP BY \"host\"", totals(filter, bucket, since, "host"))
}

/// The peak of hosts whose tier is one zone, with 1-minute buckets: the largest minute mean,
/// one query level (the nested form walks every empty minute of the window per host).
pub fn one_zone_peaks_query(filter: &str, since: &str) -> String {
    format!("SELECT max(\"watts\") FROM \"{ROLLUP_RP}\".\"power\" WHERE {} AND {filter} AND time > now() - {since} GROUP BY \"host\"", points::SUMMABLE)
}

/// What the rollup path brings back ([`power`]): the scopes of each (group, host)
/// in the window, each counted host's own peak and each group's coincident peak.
#[derive(Debug, Default)]
pub struct GroupPower {
    pub scopes: BTreeMap<(String, String), BTreeSet<String>>,
    pub host_peak: BTreeMap<String, f64>,
    pub group_peak: BTreeMap<String, f64>,
}

/// The power of every (group, host) of the window from the rollups: its scopes, and for the hosts
/// with a host-level tier their own peak, plus each group's coincident peak.
pub async fn power(
    db: &Influx,
    bucket: &str,
    since: &str,
    group_by: &str,
    group_of: &dyn Fn(&BTreeMap<String, String>) -> String,
) -> Result<GroupPower, PlanError> {
    let mut out = GroupPower::default();
    // (host, scope) → zones.
    let mut zones: BTreeMap<(String, String), usize> = BTreeMap::new();
    for s in db.query_raw(&scopes_query(since, group_by)).await? {
        let host = s.tags.get("host").cloned().unwrap_or_default();
        let scope = s.tags.get("scope").cloned().unwrap_or_default();
        *zones.entry((host.clone(), scope.clone())).or_default() += 1;
        out.scopes.entry((group_of(&s.tags), host)).or_default().insert(scope);
    }
    let (mut chosen, mut one_zone, mut several) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    for ((_, host), scopes) in &out.scopes {
        if let Some((_, used)) = points::host_tier(scopes.iter().map(String::as_str)) {
            let used: Vec<String> = used.iter().map(|s| s.to_string()).collect();
            let n: usize = used.iter().map(|s| zones.get(&(host.clone(), s.clone())).copied().unwrap_or(0)).sum();
            let side = if n == 1 && bucket == "1m" { &mut one_zone } else { &mut several };
            side.insert(host.clone(), used.clone());
            chosen.insert(host.clone(), used);
        }
    }
    if chosen.is_empty() {
        return Ok(out);
    }
    let filter = chosen_filter(&chosen);
    let mut peak_queries = Vec::new();
    if !one_zone.is_empty() {
        peak_queries.push(one_zone_peaks_query(&chosen_filter(&one_zone), since));
    }
    if !several.is_empty() {
        peak_queries.push(host_peaks_query(&chosen_filter(&several), bucket, since));
    }
    for s in db.query_raw(&group_peaks_query(&filter, bucket, since, group_by)).await? {
        if let Some(p) = s.f(0, "max") {
            out.group_peak.insert(group_of(&s.tags), p);
        }
    }
    for q in peak_queries {
        for s in db.query_raw(&q).await? {
            if let Some(p) = s.f(0, "max") {
                out.host_peak.insert(s.tags.get("host").cloned().unwrap_or_default(), p);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_with_the_same_scopes_share_a_term() {
        let chosen: BTreeMap<String, Vec<String>> = [
            ("a".to_string(), vec!["wall".to_string()]),
            ("b".to_string(), vec!["wall".to_string()]),
            ("c".to_string(), vec!["drive".to_string(), "psys".to_string()]),
        ]
        .into();
        assert_eq!(chosen_filter(&chosen), "((\"host\" = 'c' AND \"scope\" =~ /^(?:drive|psys)$/) OR (\"host\" =~ /^(?:a|b)$/ AND \"scope\" = 'wall'))");
        assert_eq!(
            group_peaks_query("(x)", "1m", "30d", "rack"),
            "SELECT max(\"total\") FROM (SELECT sum(\"watts\") AS \"total\" FROM \"rollup_1m\".\"power\" WHERE \"rate\" != 'full' AND (x) AND time > now() - 30d \
             GROUP BY time(1m), \"rack\" fill(none)) GROUP BY \"rack\""
        );
        let q = host_peaks_query("(x)", "5m", "30d");
        assert!(
            q.starts_with(
                "SELECT max(\"total\") FROM (SELECT sum(\"w\") AS \"total\" FROM (SELECT sum(\"watts_sum\") / sum(\"count\") AS \"w\" FROM \"rollup_1m\""
            ),
            "{q}"
        );
        assert!(q.ends_with("GROUP BY time(5m), \"host\", \"zone\" fill(none)) GROUP BY time(5m), \"host\") GROUP BY \"host\""), "{q}");
    }
}
