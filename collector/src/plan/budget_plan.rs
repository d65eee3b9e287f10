//! The power-budget plan (`wattflip-collector plan budget`): which racks, sites or hosts exceed a
//! power budget at their coincident peak, each host's power taken from the first tier of
//! [`points::HOST_TIERS`] it has data for, and every host of the window counted or listed as
//! missing with the reason. Its queries are documented in `docs/analyses.md`; a new grouping or
//! tier rule goes here with a test of its arithmetic.

use crate::plan::budget_hourly;
use crate::plan::budget_rollup::GroupPower;
use crate::plan::resolution::{budget_resolution, rewrite_whole, whole_policy, Choice, Resolution};
use crate::plan::{check_budget, points, Influx, PlanError};
use crate::sinks::influx::config::{HOURLY_RP, ROLLUP_RP};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// One host counted in a group's budget: where its power comes from and its own peak.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HostPower {
    pub host: String,
    /// The tier of [`points::HOST_TIERS`] its power comes from (`host meter`, `PSU input`, …).
    pub tier: String,
    /// The scopes summed (e.g. `psys` + `drive`).
    pub scopes: Vec<String>,
    pub peak_w: f64,
}

/// A host of the group left out of its total, and why.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MissingHost {
    pub host: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GroupBudget {
    pub group: String,
    /// Hosts counted in the total.
    pub hosts: usize,
    /// Peak of the coincident total; None when no host of the group has host-level power.
    pub peak_w: Option<f64>,
    pub headroom_w: Option<f64>,
    pub exceeds: bool,
    pub counted: Vec<HostPower>,
    pub missing: Vec<MissingHost>,
    /// `3 of 4 hosts counted (host meter 1, RAPL + NVMe estimate 2); missing: h9 (no power data in the last 30d)`.
    pub coverage: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BudgetPlan {
    pub group_by: String,
    pub budget_w: f64,
    /// The tiers in order of precedence.
    pub precedence: Vec<String>,
    pub groups: Vec<GroupBudget>,
    /// What the power came from: raw points, 1-minute rollups or the hourly tier, and why.
    pub resolution: String,
}

/// Per bucket and zone, every scope: the host's tier is chosen in Rust ([`points::host_tier`]).
pub fn budget_query(bucket: &str, since: &str, group_by: &str) -> String {
    let group = if group_by == "host" { String::new() } else { format!(", \"{group_by}\"") };
    format!(
        "SELECT mean(\"watts\") FROM \"power\" WHERE {} AND time > now() - {since} \
         GROUP BY time({bucket}), \"host\", \"zone\", \"scope\"{group} fill(none)",
        points::SUMMABLE
    )
}

/// Every host known in the window (its Hellos) with its group label, so a host without power
/// data is listed as missing rather than silently absent.
pub fn budget_hosts_query(since: &str, group_by: &str) -> String {
    let group = if group_by == "host" { String::new() } else { format!(", \"{group_by}\"") };
    format!("SELECT last(\"version\") FROM \"agent\" WHERE time > now() - {since} GROUP BY \"host\"{group}")
}

/// The labels hosts carry (tag keys of `agent` and `power` other than the standard ones).
async fn labels(db: &Influx) -> Result<Vec<String>, PlanError> {
    let mut out = std::collections::BTreeSet::new();
    for q in ["SHOW TAG KEYS FROM \"agent\"", "SHOW TAG KEYS FROM \"power\""] {
        for s in db.query(q).await? {
            for row in &s.values {
                if let Some(k) = row.first().and_then(|v| v.as_str()) {
                    if !points::NOT_LABELS.contains(&k) {
                        out.insert(k.to_string());
                    }
                }
            }
        }
    }
    Ok(out.into_iter().collect())
}

/// Peak power per group: each host's power from the first tier of [`points::HOST_TIERS`] it has
/// data for in the window (its zones of that tier summed per bucket), the hosts of a group summed
/// per bucket, and the group's peak is the maximum of that coincident total (not the sum of the
/// hosts' own peaks). Every host the window knows (power or Hello) is counted or listed as
/// missing with the reason.
pub async fn budget(db: &Influx, group_by: &str, budget_w: f64, bucket: &str, since: &str, choice: Choice) -> Result<BudgetPlan, PlanError> {
    check_budget(budget_w)?;
    let storage = db.storage().await?;
    let resolution = budget_resolution(choice, &storage, bucket, since)?;
    let hosts_q = match whole_policy(&storage, since) {
        Resolution::Rollup(_) | Resolution::Hourly(_) => rewrite_whole(&budget_hosts_query(since, group_by), ROLLUP_RP),
        Resolution::Raw(_) => budget_hosts_query(since, group_by),
    };
    if group_by.is_empty() || group_by.contains(['"', '\\']) {
        return Err(PlanError::Input(format!("--group-by `{group_by}`: name a label (rack, site, …) or `host`")));
    }
    if group_by != "host" {
        let labels = labels(db).await?;
        if !labels.iter().any(|l| l == group_by) {
            let known = if labels.is_empty() { "none (group by `host`)".to_string() } else { labels.join(", ") };
            return Err(PlanError::Input(format!("--group-by `{group_by}`: no host has the label `{group_by}`; labels: {known}")));
        }
    }
    let group_of = |tags: &BTreeMap<String, String>| -> String {
        let host = tags.get("host").cloned().unwrap_or_default();
        if group_by == "host" {
            host
        } else {
            tags.get(group_by).filter(|g| !g.is_empty()).cloned().unwrap_or_else(|| format!("(no {group_by})"))
        }
    };
    let mut known: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in db.query_raw(&hosts_q).await? {
        known.entry(group_of(&s.tags)).or_default().insert(s.tags.get("host").cloned().unwrap_or_default());
    }
    if resolution.is_rollup() {
        let hourly = match resolution {
            Resolution::Hourly(_) => budget_hourly::power(db, since, group_by, &group_of).await?,
            _ => None,
        };
        let (p, line) = match hourly {
            Some(h) => (h.power, h.resolution),
            None => {
                let mut line = resolution.describe().to_string();
                if matches!(resolution, Resolution::Hourly(_)) {
                    line.push_str(&format!("; the hourly tier ({HOURLY_RP}) covers no whole hour of this window before the last two"));
                }
                (crate::plan::budget_rollup::power(db, bucket, since, group_by, &group_of).await?, line)
            }
        };
        for (g, h) in p.scopes.keys() {
            known.entry(g.clone()).or_default().insert(h.clone());
        }
        if p.scopes.is_empty() {
            return Err(no_power(since));
        }
        let groups = known.into_iter().map(|(group, hosts)| group_budget_from_peaks(group, hosts, &p, since, budget_w)).collect();
        return Ok(plan(group_by, budget_w, groups, &line));
    }
    // (group, host) → scope → time → watts summed over zones.
    let mut power: PowerByHost = BTreeMap::new();
    for s in db.query_raw(&budget_query(bucket, since, group_by)).await? {
        let host = s.tags.get("host").cloned().unwrap_or_default();
        let scope = s.tags.get("scope").cloned().unwrap_or_default();
        let by_time = power.entry((group_of(&s.tags), host)).or_default().entry(scope).or_default();
        for i in 0..s.values.len() {
            let (Some(t), Some(w)) = (s.values[i].first().and_then(|v| v.as_i64()), s.f(i, "mean")) else {
                continue;
            };
            *by_time.entry(t).or_default() += w;
        }
    }
    for (g, h) in power.keys() {
        known.entry(g.clone()).or_default().insert(h.clone());
    }
    if power.is_empty() {
        return Err(no_power(since));
    }
    let groups = known.into_iter().map(|(group, hosts)| group_budget(group, hosts, &power, since, budget_w)).collect();
    Ok(plan(group_by, budget_w, groups, resolution.describe()))
}

fn no_power(since: &str) -> PlanError {
    PlanError::NoData {
        what: "host power".into(),
        since: since.into(),
        hint: "agents need a host-level power source (IPMI DCMI, ACPI power meter, PMBus PSU, rails, RAPL)".into(),
    }
}

fn plan(group_by: &str, budget_w: f64, groups: Vec<GroupBudget>, resolution: &str) -> BudgetPlan {
    BudgetPlan {
        group_by: group_by.into(),
        budget_w,
        precedence: points::HOST_TIERS.iter().map(|t| t.name.to_string()).collect(),
        groups,
        resolution: resolution.to_string(),
    }
}

/// [`group_budget`] from peaks InfluxDB computed: the same hosts counted and missing.
fn group_budget_from_peaks(group: String, hosts: BTreeSet<String>, p: &GroupPower, since: &str, budget_w: f64) -> GroupBudget {
    let (mut counted, mut missing) = (Vec::new(), Vec::new());
    for host in hosts {
        let Some(scopes) = p.scopes.get(&(group.clone(), host.clone())) else {
            missing.push(MissingHost { host, reason: format!("no host-level power data in the last {since}") });
            continue;
        };
        let (Some((tier, used)), Some(peak_w)) = (points::host_tier(scopes.iter().map(String::as_str)), p.host_peak.get(&host)) else {
            let have: Vec<&str> = scopes.iter().map(String::as_str).collect();
            missing.push(MissingHost { host, reason: format!("only scopes {}: none is host-level", have.join(", ")) });
            continue;
        };
        counted.push(HostPower { host, tier: tier.name.into(), scopes: used.iter().map(|s| s.to_string()).collect(), peak_w: *peak_w });
    }
    let peak_w = if counted.is_empty() { None } else { p.group_peak.get(&group).copied() };
    finish(group, counted, missing, peak_w, budget_w)
}

/// (group, host) → scope → time → watts summed over zones.
type PowerByHost = BTreeMap<(String, String), BTreeMap<String, BTreeMap<i64, f64>>>;

/// One group's budget: each host's power from its tier, the coincident total of the hosts counted
/// and its peak against `budget_w`; a host without host-level power is listed as missing.
fn group_budget(group: String, hosts: BTreeSet<String>, power: &PowerByHost, since: &str, budget_w: f64) -> GroupBudget {
    let mut totals: BTreeMap<i64, f64> = BTreeMap::new();
    let (mut counted, mut missing) = (Vec::new(), Vec::new());
    for host in hosts {
        let Some(scopes) = power.get(&(group.clone(), host.clone())) else {
            missing.push(MissingHost { host, reason: format!("no power data in the last {since}") });
            continue;
        };
        let Some((tier, used)) = points::host_tier(scopes.keys().map(String::as_str)) else {
            let have: Vec<&str> = scopes.keys().map(String::as_str).collect();
            missing.push(MissingHost { host, reason: format!("only scopes {}: none is host-level", have.join(", ")) });
            continue;
        };
        let mut own: BTreeMap<i64, f64> = BTreeMap::new();
        for scope in &used {
            for (t, w) in scopes.get(*scope).into_iter().flatten() {
                *own.entry(*t).or_default() += w;
            }
        }
        for (t, w) in &own {
            *totals.entry(*t).or_default() += w;
        }
        let peak_w = own.values().copied().fold(f64::NEG_INFINITY, f64::max);
        counted.push(HostPower { host, tier: tier.name.into(), scopes: used.iter().map(|s| s.to_string()).collect(), peak_w });
    }
    let peak_w = (!totals.is_empty()).then(|| totals.values().copied().fold(f64::NEG_INFINITY, f64::max));
    finish(group, counted, missing, peak_w, budget_w)
}

/// A group's figures from its hosts and its peak.
fn finish(group: String, counted: Vec<HostPower>, missing: Vec<MissingHost>, peak_w: Option<f64>, budget_w: f64) -> GroupBudget {
    let coverage = coverage_line(&counted, &missing);
    GroupBudget {
        group,
        hosts: counted.len(),
        peak_w,
        headroom_w: peak_w.map(|p| budget_w - p),
        exceeds: peak_w.is_some_and(|p| p > budget_w),
        counted,
        missing,
        coverage,
    }
}

fn coverage_line(counted: &[HostPower], missing: &[MissingHost]) -> String {
    let mut by_tier: Vec<(&str, usize)> = Vec::new();
    for t in points::HOST_TIERS {
        let n = counted.iter().filter(|h| h.tier == t.name).count();
        if n > 0 {
            by_tier.push((t.name, n));
        }
    }
    let tiers: Vec<String> = by_tier.iter().map(|(t, n)| format!("{t} {n}")).collect();
    let mut s = format!("{} of {} hosts counted", counted.len(), counted.len() + missing.len());
    if !tiers.is_empty() {
        let _ = write!(s, " ({})", tiers.join(", "));
    }
    if !missing.is_empty() {
        let m: Vec<String> = missing.iter().map(|m| format!("{} ({})", m.host, m.reason)).collect();
        let _ = write!(s, "; missing: {}", m.join(", "));
    }
    s
}

pub fn budget_table(p: &BudgetPlan) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Power budget {:.1} W per {} (per host: {})", p.budget_w, p.group_by, p.precedence.join(" > "));
    let _ = writeln!(s, "{:<20} {:>6} {:>10} {:>11}  status", p.group_by, "hosts", "peak W", "headroom W");
    for g in &p.groups {
        let (peak, headroom, status) = match (g.peak_w, g.headroom_w) {
            (Some(p), Some(h)) => (format!("{p:.1}"), format!("{h:.1}"), if g.exceeds { "EXCEEDS" } else { "ok" }),
            _ => ("-".to_string(), "-".to_string(), "no host power"),
        };
        let _ = writeln!(s, "{:<20} {:>6} {:>10} {:>11}  {status}", g.group, g.hosts, peak, headroom);
        let _ = writeln!(s, "  {}", g.coverage);
    }
    let _ = writeln!(s, "resolution: {}", p.resolution);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coverage_names_tiers_and_missing_hosts() {
        let h = |host: &str, tier: &str| HostPower { host: host.into(), tier: tier.into(), scopes: Vec::new(), peak_w: 1.0 };
        let counted = [h("a", "RAPL + NVMe estimate"), h("b", "host meter"), h("c", "host meter")];
        let missing = [MissingHost { host: "d".into(), reason: "no power data in the last 30d".into() }];
        assert_eq!(
            coverage_line(&counted, &missing),
            "3 of 4 hosts counted (host meter 2, RAPL + NVMe estimate 1); missing: d (no power data in the last 30d)"
        );
        assert_eq!(coverage_line(&[], &missing), "0 of 1 hosts counted; missing: d (no power data in the last 30d)");
    }
}
