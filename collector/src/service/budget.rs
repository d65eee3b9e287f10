//! Each host's power tier, written as the `budget` tag of its `power` points (docs/schema.md,
//! `power`) so that a dashboard can add up hosts whose best scope differs. Decided by the
//! collector with the precedence `plan budget` uses ([`points::budget_scopes`]) from the scopes of
//! the enabled power sources in the agent's latest `run` Hello plus the scopes of the power points
//! the agent sent since that Hello (a source rediscovered after start-up is in no Hello: the agent
//! sends its Hello once per connection). Before any `run` Hello (since the collector started),
//! the points' scopes alone decide. One-off `probe`/`governor` Hellos list no sources and change
//! nothing. A scope silent for [`SILENT_NS`] of the host's own point time while its other scopes
//! keep sending (a BMC that stopped answering) stops deciding until its next point, so a host is
//! never left without tagged points while it sends power. Kept in memory per agent id like the
//! guards (`guard.rs`); to change what decides a tier, change [`Tiers::hello`] and
//! [`Tiers::tag_for`] and the rule in docs/schema.md.

use crate::plan::points;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use wattflip_proto::domain::Hello;
use wattflip_proto::encoder::BudgetTag;

/// Agents remembered at most; beyond this the map is cleared (a fleet this large runs several
/// collectors): each agent's tier comes back with its next Hello or batch.
const MAX_AGENTS: usize = 100_000;

/// How long a deciding scope may send nothing, in the host's point time (the newest point of any
/// of its scopes), before it gives way to the next tier: five minutes, longer than any report or
/// per-source power interval in use (a BMC read every minute still decides), short enough that a
/// dead meter costs a dashboard minutes, not the rest of the run.
pub const SILENT_NS: i64 = 5 * 60 * 1_000_000_000;

/// The session of the Hello whose inventory is the host's (`agent run`).
pub const RUN_SESSION: &str = "run";

/// Where a host's tier comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The enabled power sources of its latest `run` Hello (and the scopes its points showed
    /// since).
    RunHello,
    /// No `run` Hello yet since the collector started: the scopes of its power points so far.
    Points,
}

#[derive(Debug, Default)]
struct Host {
    /// Scopes of the enabled sources of the latest `run` Hello; None before the first one.
    declared: Option<BTreeSet<String>>,
    /// Scopes of the power points seen since that Hello (since the collector started before it).
    seen: BTreeSet<String>,
    /// Newest point time per scope since that Hello, the newest of any scope, and the first.
    last: HashMap<String, i64>,
    newest: Option<i64>,
    since: Option<i64>,
    /// The scopes the current tag was decided from (declared or seen, and not silent).
    live: BTreeSet<String>,
    tag: Option<Arc<BudgetTag>>,
}

impl Host {
    /// Recomputes the tag from the scopes that decide it; logs a change.
    fn decide(&mut self, agent: &str) {
        let basis = if self.declared.is_some() { Basis::RunHello } else { Basis::Points };
        let scopes = self.live_scopes();
        let silent: Vec<&str> = self.declared.iter().flatten().chain(&self.seen).filter(|s| !scopes.contains(s)).map(String::as_str).collect();
        let tag = points::budget_scopes(scopes.iter().map(|s| s.as_str()))
            .map(|(tier, s)| Arc::new(BudgetTag { value: tier.tag.to_string(), scopes: s.iter().map(|x| x.to_string()).collect() }));
        if tag != self.tag {
            let scopes: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
            let tier = tag.as_ref().map(|t| t.value.as_str()).unwrap_or("none (no host-level scope)");
            tracing::info!(agent, tier, ?basis, ?scopes, ?silent, "power budget tier");
        }
        self.live = scopes.into_iter().cloned().collect();
        self.tag = tag;
    }

    /// Declared and seen scopes, less those silent for [`SILENT_NS`] while another scope sent
    /// (all of them when every one is silent: no point says which is alive).
    fn live_scopes(&self) -> BTreeSet<&String> {
        let all: BTreeSet<&String> = self.declared.iter().flatten().chain(&self.seen).collect();
        let Some(newest) = self.newest else { return all };
        let since = self.since.unwrap_or(newest);
        let live: BTreeSet<&String> = all.iter().copied().filter(|s| newest.saturating_sub(self.last.get(*s).copied().unwrap_or(since)) <= SILENT_NS).collect();
        if live.is_empty() {
            all
        } else {
            live
        }
    }

    /// Forgets the points' times (a new `run` Hello starts over).
    fn restart(&mut self) {
        self.seen.clear();
        self.last.clear();
        self.newest = None;
        self.since = None;
    }
}

/// The tiers of every agent this collector has heard from; shared by all streams.
#[derive(Debug, Default)]
pub struct Tiers {
    hosts: Mutex<HashMap<String, Host>>,
}

impl Tiers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Host>> {
        // A panic elsewhere must not stop ingestion: a poisoned map is used as is.
        let mut m = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= MAX_AGENTS {
            m.clear();
        }
        m
    }

    /// A stream's Hello: a `run` Hello sets the host's declared scopes (its enabled power
    /// sources); any other session leaves the tier as it is.
    pub fn hello(&self, hello: &Hello) {
        if hello.session != RUN_SESSION {
            return;
        }
        let declared: BTreeSet<String> = hello.inventory.power_sources.iter().filter(|s| s.enabled && !s.scope.is_empty()).map(|s| s.scope.clone()).collect();
        let mut m = self.lock();
        let host = m.entry(hello.agent_id.clone()).or_default();
        host.declared = Some(declared);
        host.restart();
        host.decide(&hello.agent_id);
    }

    /// The tag for a batch of `agent`'s power points, given their scopes and times (ns): a scope
    /// not seen before (a rediscovered source, or any before the first `run` Hello) joins the
    /// deciding ones first; a scope silent for [`SILENT_NS`] leaves them, and comes back with its
    /// next point.
    pub fn tag_for<'a>(&self, agent: &str, points: impl IntoIterator<Item = (&'a str, i64)>) -> Option<Arc<BudgetTag>> {
        let mut m = self.lock();
        if !m.contains_key(agent) {
            m.insert(agent.to_string(), Host::default());
        }
        let host = m.get_mut(agent)?;
        let mut grew = false;
        for (s, t) in points.into_iter().filter(|(s, _)| !s.is_empty()) {
            let known = host.seen.contains(s) || host.declared.as_ref().is_some_and(|d| d.contains(s));
            if !known {
                grew |= host.seen.insert(s.to_string());
            }
            match host.last.get_mut(s) {
                Some(last) => *last = (*last).max(t),
                None => {
                    host.last.insert(s.to_string(), t);
                }
            }
            host.newest = Some(host.newest.map_or(t, |n| n.max(t)));
            host.since = Some(host.since.map_or(t, |n| n.min(t)));
        }
        let live_changed = !host.live_scopes().into_iter().eq(host.live.iter());
        if grew || live_changed {
            host.decide(agent);
        }
        host.tag.clone()
    }

    /// The host's tier tag and what it was decided from; None for an agent not heard from.
    pub fn current(&self, agent: &str) -> Option<(Option<String>, Basis)> {
        let m = self.lock();
        let h = m.get(agent)?;
        let basis = if h.declared.is_some() { Basis::RunHello } else { Basis::Points };
        Some((h.tag.as_ref().map(|t| t.value.clone()), basis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattflip_proto::v1;

    fn source(scope: &str, enabled: bool) -> v1::PowerSource {
        v1::PowerSource { source: "x".into(), zone: format!("z-{scope}"), scope: scope.into(), enabled, ..Default::default() }
    }

    fn hello(agent: &str, session: &str, sources: Vec<v1::PowerSource>) -> Hello {
        let h = v1::Hello {
            agent_id: agent.into(),
            hostname: agent.into(),
            agent_version: "0".into(),
            protocol_version: wattflip_proto::PROTOCOL_VERSION,
            inventory: Some(v1::Inventory { power_sources: sources, ..Default::default() }),
            time_ns: 1,
            session: session.into(),
            ..Default::default()
        };
        Hello::try_from(h).unwrap()
    }

    fn tag(t: &Tiers, agent: &str, scopes: &[&str]) -> Option<(String, Vec<String>)> {
        tag_at(t, agent, scopes, 0)
    }

    fn tag_at(t: &Tiers, agent: &str, scopes: &[&str], time_ns: i64) -> Option<(String, Vec<String>)> {
        t.tag_for(agent, scopes.iter().map(|s| (*s, time_ns))).map(|t| (t.value.clone(), t.scopes.clone()))
    }

    fn want(value: &str, scopes: &[&str]) -> Option<(String, Vec<String>)> {
        Some((value.to_string(), scopes.iter().map(|s| s.to_string()).collect()))
    }

    #[test]
    fn the_run_hello_decides_from_its_enabled_sources_only() {
        let t = Tiers::default();
        // A disabled wall meter (IPMI without DCMI) does not make the host a wall-meter host.
        t.hello(&hello("h1", "run", vec![source("wall", false), source("package", true), source("psys", true), source("rail", true)]));
        assert_eq!(t.current("h1"), Some((Some("rails".to_string()), Basis::RunHello)));
        // Points of the declared scopes, or lower ones, change nothing.
        assert_eq!(tag(&t, "h1", &["rail", "package", "psys", "drive"]), want("rails", &["rail"]));
        t.hello(&hello("h2", "run", vec![source("package", true), source("psys", true), source("dram", true), source("core", true)]));
        assert_eq!(tag(&t, "h2", &["psys", "package"]), want("rapl_nvme", &["psys", "drive"]));
        // A source the Hello did not list (rediscovered after start-up: the agent sends no new
        // Hello) raises the tier from its first batch on, as plan budget would count it.
        assert_eq!(tag(&t, "h1", &["rail", "psu_in"]), want("psu_in", &["psu_in"]));
        assert_eq!(tag(&t, "h1", &["rail"]), want("psu_in", &["psu_in"]));
        assert_eq!(t.current("h1"), Some((Some("psu_in".to_string()), Basis::RunHello)));
        // The next run Hello starts over from its own inventory.
        t.hello(&hello("h1", "run", vec![source("rail", true)]));
        assert_eq!(tag(&t, "h1", &["rail"]), want("rails", &["rail"]));
        t.hello(&hello("h3", "run", vec![source("core", true)]));
        assert_eq!(tag(&t, "h3", &["core"]), None);
        assert_eq!(t.current("h3"), Some((None, Basis::RunHello)));
        assert_eq!(t.current("nobody"), None);
    }

    #[test]
    fn one_off_hellos_never_change_the_tier() {
        let t = Tiers::default();
        t.hello(&hello("h1", "run", vec![source("wall", true), source("package", true)]));
        for session in ["probe", "governor", "trace", ""] {
            t.hello(&hello("h1", session, Vec::new()));
            assert_eq!(tag(&t, "h1", &["package"]), want("wall", &["wall", "host"]), "after a `{session}` Hello");
        }
        // A one-off Hello before any run Hello does not count as one: points still decide.
        t.hello(&hello("h2", "probe", Vec::new()));
        assert_eq!(tag(&t, "h2", &["psu_in"]), want("psu_in", &["psu_in"]));
        assert_eq!(t.current("h2"), Some((Some("psu_in".to_string()), Basis::Points)));
    }

    #[test]
    fn without_a_run_hello_the_points_seen_decide_and_a_later_hello_overrides() {
        let t = Tiers::default();
        assert_eq!(tag(&t, "h1", &["package", "dram", "core"]), want("rapl_nvme", &["package", "dram", "drive"]));
        assert_eq!(tag(&t, "h1", &["drive"]), want("rapl_nvme", &["package", "dram", "drive"]));
        // psys arrives: it contains package and DRAM, which lose the tag.
        assert_eq!(tag(&t, "h1", &["psys"]), want("rapl_nvme", &["psys", "drive"]));
        // A higher tier seen later wins from then on (the transient docs/schema.md describes).
        assert_eq!(tag(&t, "h1", &["rail"]), want("rails", &["rail"]));
        assert_eq!(tag(&t, "h1", &["package"]), want("rails", &["rail"]));
        // The run Hello replaces what the points said, both ways.
        t.hello(&hello("h1", "run", vec![source("psys", true)]));
        assert_eq!(tag(&t, "h1", &["psys", "drive"]), want("rapl_nvme", &["psys", "drive"]));
        t.hello(&hello("h1", "run", vec![source("psu_in", true), source("psys", true)]));
        assert_eq!(tag(&t, "h1", &[]), want("psu_in", &["psu_in"]));
        // Agents are independent.
        assert_eq!(tag(&t, "h2", &[]), None);
    }

    #[test]
    fn a_declared_scope_that_stops_sending_gives_way_and_comes_back() {
        let t = Tiers::default();
        let s = 1_000_000_000i64;
        t.hello(&hello("h1", "run", vec![source("wall", true), source("psys", true)]));
        assert_eq!(tag_at(&t, "h1", &["wall", "psys"], 0), want("wall", &["wall", "host"]));
        // The BMC stops answering: RAPL alone for five minutes keeps the host meter's tier...
        assert_eq!(tag_at(&t, "h1", &["psys"], 300 * s), want("wall", &["wall", "host"]));
        // ...one second more and the host is counted at its next tier, not left out.
        assert_eq!(tag_at(&t, "h1", &["psys"], 301 * s), want("rapl_nvme", &["psys", "drive"]));
        assert_eq!(t.current("h1"), Some((Some("rapl_nvme".to_string()), Basis::RunHello)));
        // Its next reading brings the tier back.
        assert_eq!(tag_at(&t, "h1", &["wall", "psys"], 302 * s), want("wall", &["wall", "host"]));
        // A declared meter never heard from is silent from the host's first point on.
        t.hello(&hello("h2", "run", vec![source("psu_in", true), source("rail", true)]));
        assert_eq!(tag_at(&t, "h2", &["rail"], 10 * s), want("psu_in", &["psu_in"]));
        assert_eq!(tag_at(&t, "h2", &["rail"], 310 * s), want("psu_in", &["psu_in"]));
        assert_eq!(tag_at(&t, "h2", &["rail"], 311 * s), want("rails", &["rail"]));
        // A late point (a spool replayed) moves no clock back: still rails.
        assert_eq!(tag_at(&t, "h2", &["rail"], 5 * s), want("rails", &["rail"]));
        // A new run Hello starts the clocks over.
        t.hello(&hello("h2", "run", vec![source("psu_in", true), source("rail", true)]));
        assert_eq!(tag_at(&t, "h2", &["rail"], 400 * s), want("psu_in", &["psu_in"]));
    }
}
