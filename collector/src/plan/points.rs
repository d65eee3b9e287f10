//! Which `power` points a sum or a peak may use: the one definition shared by every plan query
//! (built from these constants) and every dashboard panel (which spell [`SUMMABLE`] out; the test
//! below scans every dashboard JSON and every plan query and fails on one that bypasses it). To
//! change a rule, change it here, in the dashboards the test names, and in docs/schema.md.
//!
//! Rules (docs/schema.md, `power`):
//! - Full-rate points around probes (`rate=full`, 1–10 ms apart) repeat what the window
//!   aggregates already hold: a sum, mean or peak over time filters them out with [`SUMMABLE`];
//!   only a probe's trace selects [`FULL_RATE_ONLY`].
//! - Scopes overlap (psys ⊇ package ⊇ core): zones are only summed within one scope, and a
//!   host's power is the first tier of [`HOST_TIERS`] it has data for, never a mix of tiers.
//! - A sum over hosts with different tiers (the power-budget dashboard) selects the points the
//!   collector tagged with their host's tier at ingest, [`BUDGET_TAG`] ([`HOST_LEVEL`]): the
//!   tag's scopes are those [`budget_scopes`] gives for the host's known scopes.

/// The filter every query that sums, averages or peaks `power` over time carries (a missing tag
/// compares as the empty string, so aggregate points pass).
pub const SUMMABLE: &str = "\"rate\" != 'full'";
/// The filter of a query that wants a probe's full-rate trace.
pub const FULL_RATE_ONLY: &str = "\"rate\" = 'full'";

/// The tag the collector writes on the `power` points that make up their host's power: the
/// value is the host's tier ([`Tier::tag`]); points of other scopes carry no such tag.
pub const BUDGET_TAG: &str = "budget";
/// The filter of a query that adds up host power across hosts whose best scope differs: only the
/// points of each host's tier (docs/schema.md, `power`, tag `budget`).
pub const HOST_LEVEL: &str = "\"budget\" != ''";

/// Tags of `power` and `agent` points that are not labels (a label is any other tag key: `rack`,
/// `site`, …; `plan budget --group-by` and the hourly tier's group tables are per label).
pub const NOT_LABELS: &[&str] = &["host", "source", "zone", "scope", "method", "rate", "session", BUDGET_TAG];

/// One tier of host power: a name, the value of its [`BUDGET_TAG`], and the scopes whose zones
/// are summed into a host's total.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tier {
    pub name: &'static str,
    pub tag: &'static str,
    pub scopes: &'static [&'static str],
}

/// Host-level power in order of precedence: a whole-host meter (scope `wall`: IPMI DCMI, the
/// ACPI power meter; `host` accepted too), PSU input (PMBus `pin`), PSU output, the sum of the host's rails, then RAPL
/// (psys when present, as it contains package and DRAM; else package + DRAM) plus the drives'
/// power (NVMe estimate, scope `drive`). A lower tier underestimates (rails and RAPL miss fans,
/// PSU losses, disks without a monitor), which the budget's coverage lines say per host.
pub const HOST_TIERS: &[Tier] = &[
    Tier { name: "host meter", tag: "wall", scopes: &["wall", "host"] },
    Tier { name: "PSU input", tag: "psu_in", scopes: &["psu_in"] },
    Tier { name: "PSU output", tag: "psu_out", scopes: &["psu_out"] },
    Tier { name: "rails", tag: "rails", scopes: &["rail"] },
    Tier { name: "RAPL + NVMe estimate", tag: "rapl_nvme", scopes: &["psys", "package", "dram", "drive"] },
];

/// The tier a host's power comes from, given the scopes it has data for, and the scopes of that
/// tier it sums (psys replaces package and DRAM, which it contains).
pub fn host_tier<'a>(scopes: impl IntoIterator<Item = &'a str> + Clone) -> Option<(Tier, Vec<&'static str>)> {
    let has = |s: &str| scopes.clone().into_iter().any(|x| x == s);
    let tier = HOST_TIERS.iter().find(|t| t.scopes.iter().any(|s| has(s)))?;
    let mut used: Vec<&'static str> = tier.scopes.iter().copied().filter(|s| has(s)).collect();
    if used.contains(&"psys") {
        used.retain(|s| *s != "package" && *s != "dram");
    }
    Some((*tier, used))
}

/// The tier of a host and the scopes whose points carry its [`BUDGET_TAG`], given the scopes known
/// for the host (the enabled power sources of its `run` Hello, and the scopes its points showed
/// since: `service/budget.rs`): every scope of the tier, less
/// `package` and `dram` when `psys` (which contains them) is known, and less `psys` when it is
/// not (its points would add to package and DRAM). Any other scope of the tier the host did not
/// declare is still tagged when its points arrive (an NVMe estimate sent later), as
/// [`host_tier`] sums it once it has data.
pub fn budget_scopes<'a>(known: impl IntoIterator<Item = &'a str> + Clone) -> Option<(Tier, Vec<&'static str>)> {
    let (tier, used) = host_tier(known)?;
    let psys = used.contains(&"psys");
    let scopes = tier.scopes.iter().copied().filter(|s| if psys { *s != "package" && *s != "dram" } else { *s != "psys" }).collect();
    Some((tier, scopes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn host_tiers_follow_the_precedence() {
        let tier = |scopes: &[&str]| host_tier(scopes.iter().copied()).map(|(t, used)| (t.name, used));
        assert_eq!(tier(&["rail", "wall", "package"]), Some(("host meter", vec!["wall"])));
        assert_eq!(tier(&["package", "psu_in", "rail"]), Some(("PSU input", vec!["psu_in"])));
        assert_eq!(tier(&["rail", "package", "drive"]), Some(("rails", vec!["rail"])));
        assert_eq!(tier(&["package", "dram", "drive", "core"]), Some(("RAPL + NVMe estimate", vec!["package", "dram", "drive"])));
        assert_eq!(tier(&["package", "psys", "dram"]), Some(("RAPL + NVMe estimate", vec!["psys"])));
        assert_eq!(tier(&["core", "uncore"]), None);
    }

    #[test]
    fn budget_tags_cover_the_tier_and_never_a_contained_scope() {
        let tag = |scopes: &[&str]| budget_scopes(scopes.iter().copied()).map(|(t, s)| (t.tag, s));
        assert_eq!(tag(&["wall", "package", "psys", "rail"]), Some(("wall", vec!["wall", "host"])));
        assert_eq!(tag(&["psu_in", "psu_out", "rail"]), Some(("psu_in", vec!["psu_in"])));
        assert_eq!(tag(&["psu_out", "package"]), Some(("psu_out", vec!["psu_out"])));
        assert_eq!(tag(&["rail", "package", "drive"]), Some(("rails", vec!["rail"])));
        // psys contains package and DRAM: only psys and the drives are tagged.
        assert_eq!(tag(&["package", "psys", "dram", "core"]), Some(("rapl_nvme", vec!["psys", "drive"])));
        assert_eq!(tag(&["package", "dram", "core"]), Some(("rapl_nvme", vec!["package", "dram", "drive"])));
        assert_eq!(tag(&["drive"]), Some(("rapl_nvme", vec!["package", "dram", "drive"])));
        assert_eq!(tag(&["core", "uncore", "package_mmio"]), None);
        assert_eq!(tag(&[]), None);
        // Tag values are distinct, so a query can select one tier.
        let tags: std::collections::BTreeSet<&str> = HOST_TIERS.iter().map(|t| t.tag).collect();
        assert_eq!(tags.len(), HOST_TIERS.len());
    }

    /// Every InfluxQL query of a dashboard (variables, panels, annotations) as (place, text).
    fn dashboard_queries() -> Vec<(String, String)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards");
        let mut out = Vec::new();
        let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "json")).collect();
        files.sort();
        assert_eq!(files.len(), 6, "dashboards in {}", dir.display());
        for f in files {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
            for p in d["panels"].as_array().unwrap() {
                for t in p["targets"].as_array().unwrap() {
                    out.push((format!("{name} panel `{}` {}", p["title"].as_str().unwrap(), t["refId"]), t["query"].as_str().unwrap().to_string()));
                }
            }
            for a in d["annotations"]["list"].as_array().map(Vec::as_slice).unwrap_or_default() {
                out.push((format!("{name} annotation {}", a["name"]), a["query"].as_str().unwrap_or_default().to_string()));
            }
        }
        out
    }

    /// Every plan query that reads `power`, with sample arguments.
    fn plan_queries() -> Vec<(String, String)> {
        use crate::plan::budget_hourly as hourly;
        use crate::plan::budget_rollup as rollups;
        let chosen = rollups::chosen_filter(&[("h1".to_string(), vec!["wall".to_string()])].into());
        vec![
            ("plan budget".to_string(), crate::plan::budget_query("1m", "30d", "rack")),
            ("plan budget (rollups): scopes".to_string(), rollups::scopes_query("30d", "rack")),
            ("plan budget (rollups): group peaks".to_string(), rollups::group_peaks_query(&chosen, "1m", "30d", "rack")),
            ("plan budget (rollups): host peaks".to_string(), rollups::host_peaks_query(&chosen, "1m", "30d")),
            ("plan budget (rollups): 5m peaks".to_string(), rollups::host_peaks_query(&chosen, "5m", "30d")),
            ("plan budget (rollups): one-zone peaks".to_string(), rollups::one_zone_peaks_query(&chosen, "30d")),
            ("plan budget (hourly): scopes".to_string(), hourly::scopes_query("rollup_1h", "time >= 0", "rack")),
            ("plan budget (hourly): minute edges".to_string(), hourly::minute_peaks_query("time >= 0", "\"rack\"")),
        ]
    }

    /// A query that reads `power` must carry [`SUMMABLE`] (or select the full-rate trace on
    /// purpose), and one that sums zones must keep to one scope. Every SELECT level counts: the
    /// innermost one reads the points.
    fn violations(place: &str, q: &str) -> Vec<String> {
        let mut out = Vec::new();
        // Raw points, or the rollups (`"rollup_1m"."power"`, the same series and tags).
        let reads = q.matches("FROM \"power\"").count() + q.matches(".\"power\"").count();
        if reads == 0 {
            return out;
        }
        let filtered = q.matches(SUMMABLE).count() + q.matches(FULL_RATE_ONLY).count();
        if filtered < reads {
            out.push(format!("{place}: reads `power` {reads} time(s) but filters {SUMMABLE} {filtered} time(s): {q}"));
        }
        let sums = q.contains("sum(\"w\")") || q.contains("sum(\"watts\")");
        if sums && !q.contains("\"scope\" = '") && q.matches(HOST_LEVEL).count() < reads {
            out.push(format!("{place}: sums power without keeping to one scope or to the hosts' tiers ({HOST_LEVEL}): {q}"));
        }
        out
    }

    #[test]
    fn every_dashboard_panel_and_plan_query_uses_the_shared_point_rules() {
        let all: Vec<(String, String)> = dashboard_queries().into_iter().chain(plan_queries()).collect();
        let power = all.iter().filter(|(_, q)| q.contains("FROM \"power\"") || q.contains(".\"power\"")).count();
        // Fleet overview: agents online, last seen, power per host, energy per zone; power budget:
        // six panels; throttling:
        // drive power; plan budget on raw points, on rollups and on the hourly tier's edges.
        assert_eq!(power, 4 + 6 + 1 + 6 + 2, "queries reading power: {all:#?}");
        let bad: Vec<String> = all.iter().flat_map(|(p, q)| violations(p, q)).collect();
        assert!(bad.is_empty(), "{}", bad.join("\n"));
        // The check itself catches a bypass.
        assert_eq!(violations("x", "SELECT mean(\"watts\") FROM \"power\" WHERE $timeFilter GROUP BY \"host\"").len(), 1);
        assert_eq!(violations("x", &format!("SELECT sum(\"w\") FROM (SELECT mean(\"watts\") AS \"w\" FROM \"power\" WHERE {SUMMABLE})")).len(), 1);
        let tiered = format!("SELECT sum(\"w\") FROM (SELECT mean(\"watts\") AS \"w\" FROM \"power\" WHERE {SUMMABLE} AND {HOST_LEVEL} GROUP BY *)");
        assert_eq!(violations("x", &tiered), Vec::<String>::new());
        assert_eq!(violations("x", &tiered.replace(&format!(" AND {HOST_LEVEL}"), "")).len(), 1);
    }
}
