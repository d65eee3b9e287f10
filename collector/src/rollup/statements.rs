//! The `SELECT … INTO` statements that recompute buckets from the raw points: the 1-minute
//! aggregates of `power`, `temperature` and `electrical` ([`aggregates`]), and a whole copy of
//! every other measurement (runs, events, inventory: small, and read whole). Each statement
//! covers minute-aligned `[from, to)` of a set of hosts and groups by every tag, so a rollup
//! point has its raw series' tags and the minute's start as its time. Field names are documented
//! in docs/schema.md (*Retention and rollups*); a new rolled-up measurement is one arm here.

use crate::sinks::influx::config::{RAW_RP, ROLLUP_RP};
use crate::sinks::influx::tiers::{ident, tag_condition};
use std::collections::BTreeSet;

/// The aggregates of a rolled-up measurement (`mean("watts") AS "watts", …`), None for a
/// measurement copied whole.
pub fn aggregates(measurement: &str) -> Option<&'static str> {
    match measurement {
        // `watts` keeps its name as the minute's mean so one query reads either resolution;
        // `joules` is the exact energy: the sum of the counters' own joules (docs/schema.md).
        "power" => Some(
            "mean(\"watts\") AS \"watts\", max(\"watts\") AS \"peak_watts\", min(\"watts\") AS \"low_watts\", \
             count(\"watts\") AS \"count\", sum(\"watts\") AS \"watts_sum\", sum(\"joules\") AS \"joules\", \
             sum(\"interval_ns\") AS \"interval_ns\", max(\"max_watts\") AS \"max_watts\", min(\"min_watts\") AS \"min_watts\", \
             sum(\"readings\") AS \"readings\", count(\"flags\") AS \"flagged\"",
        ),
        "temperature" => Some(
            "mean(\"celsius\") AS \"celsius\", max(\"celsius\") AS \"peak_celsius\", min(\"celsius\") AS \"low_celsius\", count(\"celsius\") AS \"count\"",
        ),
        "electrical" => Some(
            "mean(\"volts\") AS \"volts\", max(\"volts\") AS \"peak_volts\", min(\"volts\") AS \"low_volts\", count(\"volts\") AS \"volts_count\", \
             mean(\"amperes\") AS \"amperes\", max(\"amperes\") AS \"peak_amperes\", min(\"amperes\") AS \"low_amperes\", count(\"amperes\") AS \"amperes_count\"",
        ),
        _ => None,
    }
}

/// The hosts condition: one host by equality (`''` matches points without a host tag), several
/// by an anchored regex of the escaped names.
pub fn hosts_condition(hosts: &BTreeSet<String>) -> String {
    tag_condition("host", hosts)
}

/// The statement that recomputes `measurement` for `hosts` (None: every host) over
/// `[from_ns, to_ns)`.
pub fn recompute(database: &str, measurement: &str, hosts: Option<&BTreeSet<String>>, from_ns: i64, to_ns: i64) -> String {
    let (db, m) = (ident(database), ident(measurement));
    let hosts = hosts.map(|h| format!("{} AND ", hosts_condition(h))).unwrap_or_default();
    let filter = format!("{hosts}time >= {from_ns} AND time < {to_ns}");
    match aggregates(measurement) {
        Some(aggs) => format!(
            "SELECT {aggs} INTO {db}.{rollup}.{m} FROM {db}.{raw}.{m} WHERE {filter} GROUP BY time(1m), * fill(none)",
            rollup = ident(ROLLUP_RP),
            raw = ident(RAW_RP)
        ),
        None => format!("SELECT * INTO {db}.{rollup}.{m} FROM {db}.{raw}.{m} WHERE {filter} GROUP BY *", rollup = ident(ROLLUP_RP), raw = ident(RAW_RP)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_name_both_policies_and_escape_hosts() {
        let one: BTreeSet<String> = ["a'1".to_string()].into();
        assert_eq!(
            recompute("wf", "probe_run", Some(&one), 0, 60_000_000_000),
            "SELECT * INTO \"wf\".\"rollup_1m\".\"probe_run\" FROM \"wf\".\"raw\".\"probe_run\" WHERE \"host\" = 'a\\'1' AND time >= 0 AND time < 60000000000 GROUP BY *"
        );
        let two: BTreeSet<String> = ["h.1".to_string(), "h/2".to_string()].into();
        assert_eq!(hosts_condition(&two), "\"host\" =~ /^(?:h\\.1|h\\/2)$/");
        let q = recompute("wf", "temperature", None, 60, 120);
        assert!(q.starts_with("SELECT mean(\"celsius\") AS \"celsius\""), "{q}");
        assert!(q.ends_with("FROM \"wf\".\"raw\".\"temperature\" WHERE time >= 60 AND time < 120 GROUP BY time(1m), * fill(none)"), "{q}");
    }
}
