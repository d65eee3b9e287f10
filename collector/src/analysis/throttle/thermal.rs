//! The thermal side of one drive: the hot periods that temperatures and SMART records open and
//! close, folded incrementally in event time. Observations are kept in a log ordered by
//! (time, stream); an observation in order is applied to the running state at once (O(1)), one
//! out of order marks the state for a replay of the log from the settled state (rare: a resend or
//! a second stream), and the log holds only what can still change a period: temperature crossings
//! and state-changing SMART records, plus each stream's newest reading. What leaves the retention
//! (or the configured cap) is folded into the settled state.
//!
//! To add a trigger, add a [`Thermal`] variant and handle it in `ThermalState::apply`.

use std::collections::VecDeque;
use std::sync::Arc;

/// A temperature within this many °C below a threshold reaches it (K → °C conversions).
pub const CELSIUS_TOLERANCE: f64 = 1e-6;

/// A thermal observation as stored.
#[derive(Debug, Clone, PartialEq)]
pub enum Thermal {
    Temperature { celsius: f64 },
    Smart { critical_warning: u32, counters: [Option<u64>; 5], composite_celsius: Option<f64> },
}

/// The stream an observation came from: SMART records sort before temperatures at one instant,
/// temperature sources by name (the order of the former string keys `smart`, `temperature/…`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stream {
    Smart,
    Temperature(Arc<str>),
}

pub type Key = (i64, Stream);

/// A hot period: from the trigger firing to the same trigger clearing (`end_ns` None: still hot).
#[derive(Debug, Clone, PartialEq)]
pub struct Period {
    pub onset_ns: i64,
    pub celsius: Option<f64>,
    pub trigger: &'static str,
    pub end_ns: Option<i64>,
}

impl Period {
    pub fn contains(&self, t: i64) -> bool {
        t >= self.onset_ns && self.end_ns.is_none_or(|e| t < e)
    }
}

pub fn reaches(value: f64, limit: f64) -> bool {
    value >= limit - CELSIUS_TOLERANCE
}

/// The temperature threshold and its trigger name: the warning threshold when the drive reports
/// one (throttling starts there), else the critical one, which a drive without a WCTEMP still
/// throttles at (some report CCTEMP only).
pub fn temperature_limit(warning: Option<f64>, critical: Option<f64>) -> Option<(f64, &'static str)> {
    warning.map(|w| (w, "temperature")).or_else(|| critical.map(|c| (c, "critical_temperature")))
}

/// Thermal state after a prefix of the observations.
#[derive(Debug, Clone, Default)]
struct ThermalState {
    /// Latest reading per temperature source (a handful of sources: a vector beats a map).
    temperature: Vec<(Arc<str>, f64)>,
    last_composite: Option<f64>,
    counters: Option<[Option<u64>; 5]>,
    critical_temperature_bit: bool,
    hot: Option<Period>,
}

impl ThermalState {
    fn apply(&mut self, time_ns: i64, stream: &Stream, obs: &Thermal, limit: Option<(f64, &'static str)>, closed: &mut impl Extend<Period>) {
        match (obs, stream) {
            (Thermal::Temperature { celsius }, Stream::Temperature(source)) => {
                let celsius = *celsius;
                self.last_composite = Some(celsius);
                let before = match self.temperature.iter_mut().find(|(s, _)| s == source) {
                    Some((_, v)) => Some(std::mem::replace(v, celsius)),
                    None => {
                        self.temperature.push((source.clone(), celsius));
                        None
                    }
                };
                let Some((limit, trigger)) = limit else {
                    return;
                };
                let was_hot = before.is_some_and(|b| reaches(b, limit));
                if reaches(celsius, limit) && !was_hot {
                    self.heat(time_ns, Some(celsius), trigger);
                } else if !reaches(celsius, limit) && self.temperature.iter().all(|(_, c)| !reaches(*c, limit)) {
                    self.cool(time_ns, trigger, closed);
                }
            }
            (Thermal::Smart { critical_warning, counters, composite_celsius }, _) => {
                let celsius = composite_celsius.or(self.last_composite);
                let moved = self.counters.is_some_and(|c| moved(&c, counters));
                // A counter this record left out keeps its last known value for the next compare.
                let mut kept = *counters;
                if let Some(c) = self.counters {
                    for (k, was) in kept.iter_mut().zip(c) {
                        *k = k.or(was);
                    }
                }
                self.counters = Some(kept);
                let bit = critical_warning & 0x2 != 0;
                let newly_set = bit && !self.critical_temperature_bit;
                self.critical_temperature_bit = bit;
                if moved {
                    self.heat(time_ns, celsius, "thermal_counters");
                } else {
                    self.cool(time_ns, "thermal_counters", closed);
                }
                if newly_set {
                    self.heat(time_ns, celsius, "critical_warning");
                } else if !bit {
                    self.cool(time_ns, "critical_warning", closed);
                }
            }
            // A temperature is always stored under its source's stream.
            (Thermal::Temperature { .. }, Stream::Smart) => {}
        }
    }

    /// A thermal trigger fired; the first trigger of a hot period defines its onset.
    fn heat(&mut self, time_ns: i64, celsius: Option<f64>, trigger: &'static str) {
        if self.hot.is_none() {
            self.hot = Some(Period { onset_ns: time_ns, celsius, trigger, end_ns: None });
        }
    }

    /// The trigger `trigger` cleared: if it opened the hot period, the period ends.
    fn cool(&mut self, time_ns: i64, trigger: &str, closed: &mut impl Extend<Period>) {
        if self.hot.as_ref().is_some_and(|h| h.trigger == trigger) {
            if let Some(mut p) = self.hot.take() {
                p.end_ns = Some(time_ns);
                closed.extend(std::iter::once(p));
            }
        }
    }
}

/// Only a counter present in both records can have moved.
fn moved(was: &[Option<u64>; 5], now: &[Option<u64>; 5]) -> bool {
    now.iter().zip(was.iter()).any(|(n, w)| matches!((n, w), (Some(n), Some(w)) if n > w))
}

/// Observations in key order. They arrive in order nearly always and leave from the front, and a
/// dropped one is among the last few: a deque beats a tree here (no node per entry, appends and
/// removals near the end in O(streams)).
#[derive(Debug, Default)]
struct SortedLog(VecDeque<(Key, Thermal)>);

impl SortedLog {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn find(&self, key: &Key) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.cmp(key))
    }

    fn get(&self, key: &Key) -> Option<&Thermal> {
        self.find(key).ok().map(|i| &self.0[i].1)
    }

    /// Stores `obs` under `key`, replacing what the key held.
    fn insert(&mut self, key: Key, obs: Thermal) {
        if self.0.back().is_none_or(|(k, _)| *k < key) {
            self.0.push_back((key, obs));
            return;
        }
        match self.find(&key) {
            Ok(i) => self.0[i].1 = obs,
            Err(i) => self.0.insert(i, (key, obs)),
        }
    }

    /// Removes `key`, looked for from the back (a dropped observation is a stream's newest).
    fn remove(&mut self, key: &Key) {
        if let Some(i) = self.0.iter().rposition(|(k, _)| k == key) {
            self.0.remove(i);
        }
    }
}

/// What [`ThermalLog::insert`] did with an observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// Stored; the periods may have changed from this time on.
    Stored,
    /// The same observation was already stored (a resend): nothing changed.
    Duplicate,
    /// Older than the settled part of the log: counted, not placed.
    Late,
}

/// A stream's newest observation in the log, for compaction.
#[derive(Debug, Clone)]
struct Newest {
    stream: Stream,
    time_ns: i64,
    /// It moved the state (a crossing, a moved counter, a period opened or closed): kept.
    changed: bool,
    /// SMART records applied before it (another stream's SMART record after it pins it: the record
    /// may read its temperature as the last composite).
    smarts: u64,
}

/// The thermal observations of one drive and the periods they make.
#[derive(Debug, Default)]
pub struct ThermalLog {
    /// State after every observation folded out of the log, and the periods it closed.
    settled: ThermalState,
    settled_closed: VecDeque<Period>,
    /// Observations at or after `settled_until`, compacted (see [`ThermalLog::insert`]).
    log: SortedLog,
    settled_until: i64,
    /// `settled` + every logged observation up to `tail_at`, and the periods that closed there.
    tail: ThermalState,
    tail_closed: VecDeque<Period>,
    tail_at: Option<Key>,
    /// The tail must be rebuilt from the settled state (an observation arrived out of order).
    dirty: bool,
    newest: Vec<Newest>,
    smarts: u64,
    /// Observations applied to a state (the work the log does), for the bound tests.
    pub applied: u64,
}

impl ThermalLog {
    pub fn new() -> Self {
        ThermalLog { settled_until: i64::MIN, ..Default::default() }
    }

    pub fn len(&self) -> usize {
        self.log.len()
    }

    /// Stores one observation. One after everything logged is applied to the running state at
    /// once; one before marks the state for a replay ([`ThermalLog::refresh`]). A stream's
    /// previous observation that changed nothing (a temperature on the same side of the limit as
    /// the one before it, a SMART record equal to the state) is dropped when the next one of that
    /// stream arrives and no SMART record lies between them: every crossing and every state change
    /// keeps its time, and the log holds the changes within the retention plus each stream's newest.
    pub fn insert(&mut self, key: Key, obs: Thermal, limit: Option<(f64, &'static str)>) -> Inserted {
        if key.0 < self.settled_until {
            return Inserted::Late;
        }
        let in_order = !self.dirty && self.tail_at.as_ref().is_none_or(|t| key > *t);
        // In order, nothing at or after the key is logged: no duplicate to look for.
        if !in_order && self.log.get(&key) == Some(&obs) {
            return Inserted::Duplicate;
        }
        if in_order {
            if let Some(prev) = self.step(&key, &obs, limit) {
                self.log.remove(&prev);
            }
            self.tail_at = Some(key.clone());
        } else {
            self.dirty = true;
        }
        self.log.insert(key, obs);
        Inserted::Stored
    }

    /// Applies one observation to the tail; returns the key of its stream's previous observation
    /// when compaction drops it.
    fn step(&mut self, key: &Key, obs: &Thermal, limit: Option<(f64, &'static str)>) -> Option<Key> {
        let moves = self.moves(&key.1, obs, limit);
        let hot_before = self.tail.hot.clone();
        self.tail.apply(key.0, &key.1, obs, limit, &mut self.tail_closed);
        self.applied += 1;
        let changed = moves || self.tail.hot != hot_before;
        let smart = key.1 == Stream::Smart;
        let before = self.smarts;
        self.smarts += u64::from(smart);
        let now = Newest { stream: key.1.clone(), time_ns: key.0, changed, smarts: self.smarts };
        match self.newest.iter_mut().find(|n| n.stream == key.1) {
            Some(n) => {
                let drop = !n.changed && (smart || n.smarts == before);
                let prev = (n.time_ns, key.1.clone());
                *n = now;
                drop.then_some(prev)
            }
            None => {
                self.newest.push(now);
                None
            }
        }
    }

    /// Whether `obs` moves what a later observation is compared with: a temperature on the other
    /// side of the limit than its source's previous one (or its source's first), a SMART record
    /// whose counters or critical-temperature bit differ from the state's.
    fn moves(&self, stream: &Stream, obs: &Thermal, limit: Option<(f64, &'static str)>) -> bool {
        match (obs, stream) {
            (Thermal::Temperature { celsius }, Stream::Temperature(source)) => {
                let before = self.tail.temperature.iter().find(|(s, _)| s == source).map(|(_, c)| *c);
                match (before, limit) {
                    (None, _) => true,
                    (Some(_), None) => false,
                    (Some(b), Some((l, _))) => reaches(b, l) != reaches(*celsius, l),
                }
            }
            (Thermal::Smart { critical_warning, counters, .. }, _) => {
                let bit = critical_warning & 0x2 != 0;
                self.tail.counters != Some(*counters) || bit != self.tail.critical_temperature_bit
            }
            (Thermal::Temperature { .. }, Stream::Smart) => false,
        }
    }

    /// Folds what is older than `cutoff`, and the oldest beyond `cap` entries, into the settled
    /// state; a later observation older than what was folded is then [`Inserted::Late`].
    pub fn settle(&mut self, cutoff: i64, cap: usize, limit: Option<(f64, &'static str)>) {
        let mut folded = 0usize;
        loop {
            let over = self.log.len() > cap;
            let Some((first, _)) = self.log.0.front() else { break };
            if first.0 >= cutoff && !over {
                break;
            }
            let Some((key, obs)) = self.log.0.pop_front() else { break };
            let before = self.settled_closed.len();
            self.settled.apply(key.0, &key.1, &obs, limit, &mut self.settled_closed);
            self.applied += 1;
            folded += self.settled_closed.len() - before;
            self.settled_until = self.settled_until.max(key.0);
        }
        self.settled_until = self.settled_until.max(cutoff);
        if !self.dirty {
            // The tail replayed the same observations in the same order: the periods they closed
            // are the first ones it closed.
            self.tail_closed.drain(..folded.min(self.tail_closed.len()));
        }
        while self.settled_closed.front().is_some_and(|p| p.end_ns.is_some_and(|e| e < cutoff)) {
            self.settled_closed.pop_front();
        }
    }

    /// Replays the log onto the settled state when an observation arrived out of order or the
    /// limit changed, compacting it as [`ThermalLog::insert`] does.
    pub fn refresh(&mut self, limit: Option<(f64, &'static str)>) {
        if !self.dirty {
            return;
        }
        self.tail = self.settled.clone();
        self.tail_closed.clear();
        self.newest.clear();
        let log = std::mem::take(&mut self.log);
        let mut dropped = Vec::new();
        for (key, obs) in &log.0 {
            dropped.extend(self.step(key, obs, limit));
        }
        self.log = log;
        // Dropped keys come in log order: one pass removes them all.
        let mut next = dropped.iter().peekable();
        self.log.0.retain(|(k, _)| {
            let gone = next.peek().is_some_and(|d| *d == k);
            if gone {
                next.next();
            }
            !gone
        });
        self.tail_at = self.log.0.back().map(|(k, _)| k.clone());
        self.dirty = false;
    }

    /// The limit changed: every logged observation is judged again.
    pub fn invalidate(&mut self) {
        self.dirty = true;
    }

    /// Every known period in onset order (closed ones, then the open one). Call `refresh` first.
    pub fn periods(&self) -> impl Iterator<Item = &Period> {
        self.settled_closed.iter().chain(self.tail_closed.iter()).chain(self.tail.hot.iter())
    }

    /// The periods whose end is at or after `t`, or still open, in onset order.
    pub fn periods_from(&self, t: i64) -> impl Iterator<Item = &Period> {
        let ends = |q: &VecDeque<Period>| q.partition_point(|p| p.end_ns.is_some_and(|e| e < t));
        let (a, b) = (ends(&self.settled_closed), ends(&self.tail_closed));
        self.settled_closed.range(a..).chain(self.tail_closed.range(b..)).chain(self.tail.hot.iter())
    }

    /// Whether `t` lies in a known hot period.
    pub fn is_hot(&self, t: i64) -> bool {
        self.periods_from(t).take_while(|p| p.onset_ns <= t).any(|p| p.contains(t))
    }
}
