//! What the ingest boundary refuses point by point, beyond each point's own checks
//! (`wattflip_proto::domain`): the window of timestamps around the collector's clock ([`Skew`]),
//! and the `point_rejected` events that report every refusal with the batch. A new refusal
//! reported the same way needs only its `Rule` in the domain checks.

use std::collections::BTreeMap;
use std::time::Duration;
use wattflip_proto::domain::{Rejection, Rule, TimeWindow};
use wattflip_proto::lineproto::Point;
use wattflip_proto::schema::HostTags;

/// How far a point's timestamp may be ahead of and behind the collector's clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Skew {
    pub(crate) ahead: Duration,
    pub(crate) behind: Duration,
}

impl Skew {
    /// The window around the collector's clock now.
    pub(crate) fn window(&self) -> TimeWindow {
        let ns = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(ns).unwrap_or(0);
        TimeWindow { now_ns: now, ahead_ns: ns(self.ahead), behind_ns: ns(self.behind) }
    }
}

/// One `event` of kind `point_rejected` per field and rule among a batch's rejected points, with
/// their exact `count`, the first one's field path, value and reason. Stamped with the first such
/// point's own time (else, or when its time was the problem, the collector's clock) and tagged by field and rule, so a resent batch
/// overwrites its events instead of adding to them, and two groups of one batch never collide.
pub(crate) fn rejection_events(rejected: &[Rejection], seq: u64, tags: &HostTags) -> Vec<Point> {
    let mut groups: BTreeMap<(String, Rule), Vec<&Rejection>> = BTreeMap::new();
    for r in rejected {
        groups.entry((r.field_name(), r.rule)).or_default().push(r);
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)).unwrap_or(1);
    groups
        .into_iter()
        .map(|((field, rule), rs)| {
            let first = rs[0];
            let more = if rs.len() > 1 { format!(" (and {} more in this batch)", rs.len() - 1) } else { String::new() };
            // A point refused for its timestamp is reported at the collector's time: its own
            // would put the event a year ahead, or behind the retention.
            let at = first.time_ns.filter(|_| !matches!(rule, Rule::TimeAhead | Rule::TimeBehind)).unwrap_or(now);
            let mut p = Point::new(wattflip_proto::schema::EVENT, at).tag("host", tags.host.clone());
            for (k, v) in &tags.labels {
                p = p.tag(k.clone(), v.clone());
            }
            p.tag("kind", "point_rejected")
                .tag("severity", "warning")
                .tag("field", field.clone())
                .tag("rule", rule.as_str())
                .string("message", format!("batch {seq}: {first}{more}; the point was left out, the rest of the batch stored"))
                .string("attributes", format!("field={field} rule={} value={} sequence={seq}", rule.as_str(), first.value))
                .int("count", rs.len() as i64)
        })
        .collect()
}
