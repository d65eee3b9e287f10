//! One drive's throttling state: its thermal log ([`ThermalLog`]), its signals (runs and drive
//! power) in time order, and one running judgement per hot period, advanced over the signals that
//! are new since the last batch. A period is judged again from its onset only when something
//! before its onset changed (a late baseline, a late temperature) or its end moved back before
//! what was judged; otherwise a batch costs the work of its own observations.
//!
//! To add a signal, store it in `Drive` (with its eviction in `evict`) and fold it in `judge`.

use super::power::PowerLog;
use super::thermal::{temperature_limit, Inserted, Key, Period, Stream, Thermal, ThermalLog};
use super::{drop_pct, is_drop, Bounds, POWER_BASELINE_SAMPLES, POWER_DROP_PCT, THROUGHPUT_DROP_PCT};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use wattflip_proto::schema::ThrottleEvent;

/// The judgement of one hot period so far.
#[derive(Debug, Clone)]
struct Judged {
    trigger: &'static str,
    /// Signals before this time have been folded in.
    judged_to: i64,
    /// Per pattern: the throughput before the onset (None: no usable baseline).
    run_base: HashMap<Arc<str>, Option<f64>>,
    power_base: Option<f64>,
    /// The largest throughput drop: pattern, %, start of its run (the earliest names it).
    tput: Option<(Arc<str>, f64, i64)>,
    power: Option<f64>,
    last_drop: i64,
}

#[derive(Debug)]
pub struct Drive {
    pub warning_celsius: Option<f64>,
    pub critical_celsius: Option<f64>,
    thermal: ThermalLog,
    /// Newest thermal timestamp ever seen: signals up to it can be judged.
    thermal_watermark: Option<i64>,
    /// Temperature sources and run patterns seen, shared by their keys.
    names: Vec<Arc<str>>,
    /// Runs by (start, pattern) → (end, MiB/s), and the newest start of each pattern.
    runs: BTreeMap<(i64, Arc<str>), (i64, f64)>,
    last_run_of: HashMap<Arc<str>, i64>,
    /// Drive power by time, pruned behind the settle line to what the judgement can use.
    power: PowerLog,
    newest_ns: Option<i64>,
    /// Episodes as last emitted, and the judgement of each period, by onset.
    emitted: BTreeMap<i64, ThrottleEvent>,
    judged: BTreeMap<i64, Judged>,
    /// The earliest time an observation since the last update can affect (i64::MAX: none).
    dirty_from: i64,
    prev_horizon: i64,
    prev_settle_line: i64,
    /// Observations since the last update.
    pub touched: bool,
    /// Observations older than the retention (or the settled thermal log): counted, not placed.
    pub late: u64,
    /// Signals visited while judging, for the bound tests.
    pub scanned: u64,
}

impl Default for Drive {
    fn default() -> Self {
        Drive {
            warning_celsius: None,
            critical_celsius: None,
            thermal: ThermalLog::new(),
            thermal_watermark: None,
            names: Vec::new(),
            runs: BTreeMap::new(),
            last_run_of: HashMap::new(),
            power: PowerLog::default(),
            newest_ns: None,
            emitted: BTreeMap::new(),
            judged: BTreeMap::new(),
            dirty_from: i64::MAX,
            prev_horizon: i64::MIN,
            prev_settle_line: i64::MIN,
            touched: false,
            late: 0,
            scanned: 0,
        }
    }
}

/// What one drive holds, for the bound tests and the metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Retained {
    pub drives: usize,
    pub thermal: usize,
    pub runs: usize,
    pub power: usize,
    pub episodes: usize,
}

impl Drive {
    pub fn limit(&self) -> Option<(f64, &'static str)> {
        temperature_limit(self.warning_celsius, self.critical_celsius)
    }

    /// New thresholds (a Hello): the logged thermal observations are judged again.
    pub fn set_limits(&mut self, warning: Option<f64>, critical: Option<f64>) {
        if (warning, critical) != (self.warning_celsius, self.critical_celsius) {
            (self.warning_celsius, self.critical_celsius) = (warning, critical);
            self.thermal.invalidate();
            self.power.invalidate();
            self.dirty_from = i64::MIN;
            self.touched = true;
        }
    }

    pub fn retained(&self) -> Retained {
        Retained { drives: 1, thermal: self.thermal.len(), runs: self.runs.len(), power: self.power.len(), episodes: self.emitted.len() }
    }

    pub fn work(&self) -> u64 {
        self.thermal.applied + self.scanned
    }

    fn name(&mut self, s: &str) -> Arc<str> {
        if let Some(n) = self.names.iter().find(|n| ***n == *s) {
            return n.clone();
        }
        let n: Arc<str> = Arc::from(s);
        self.names.push(n.clone());
        n
    }

    /// Accepts an observation at `t` unless it is older than the retention; notes what it dirties.
    fn admit(&mut self, t: i64, bounds: &Bounds) -> bool {
        if self.newest_ns.is_some_and(|n| t < n.saturating_sub(bounds.retention_ns)) {
            self.late += 1;
            self.touched = true;
            return false;
        }
        self.newest_ns = Some(self.newest_ns.map_or(t, |n| n.max(t)));
        self.dirty_from = self.dirty_from.min(t);
        self.touched = true;
        true
    }

    fn thermal(&mut self, key: Key, obs: Thermal, bounds: &Bounds) {
        if !self.admit(key.0, bounds) {
            return;
        }
        let t = key.0;
        self.power.touch(t);
        let limit = self.limit();
        match self.thermal.insert(key, obs, limit) {
            Inserted::Stored => self.thermal_watermark = Some(self.thermal_watermark.map_or(t, |w| w.max(t))),
            Inserted::Duplicate => {}
            Inserted::Late => self.late += 1,
        }
    }

    pub fn temperature(&mut self, time_ns: i64, source: &str, celsius: f64, bounds: &Bounds) {
        let s = self.name(source);
        self.thermal((time_ns, Stream::Temperature(s)), Thermal::Temperature { celsius }, bounds);
    }

    pub fn smart(&mut self, time_ns: i64, critical_warning: u32, counters: [Option<u64>; 5], composite_celsius: Option<f64>, bounds: &Bounds) {
        self.thermal((time_ns, Stream::Smart), Thermal::Smart { critical_warning, counters, composite_celsius }, bounds);
    }

    pub fn run(&mut self, start_ns: i64, end_ns: i64, pattern: &str, mib_per_s: f64, bounds: &Bounds) {
        if !self.admit(start_ns, bounds) {
            return;
        }
        let p = self.name(pattern);
        let last = self.last_run_of.entry(p.clone()).or_insert(start_ns);
        *last = (*last).max(start_ns);
        self.runs.insert((start_ns, p), (end_ns, mib_per_s));
    }

    pub fn power(&mut self, time_ns: i64, watts: f64, bounds: &Bounds) {
        if self.admit(time_ns, bounds) {
            self.power.insert(time_ns, watts);
        }
    }

    /// The newest signal timestamp that can be judged now.
    fn horizon(&self, bounds: &Bounds) -> Option<i64> {
        let late = self.newest_ns.map(|n| n.saturating_sub(bounds.lateness_ns));
        match (self.thermal_watermark, late) {
            (Some(w), Some(l)) => Some(w.max(l)),
            (w, l) => w.or(l),
        }
    }

    /// Judges the periods the observations since the last update can affect; returns the
    /// episodes that differ from their last emitted version.
    pub fn update(&mut self, device: &str, bounds: &Bounds) -> Vec<ThrottleEvent> {
        self.touched = false;
        let mut out = Vec::new();
        let limit = self.limit();
        self.thermal.refresh(limit);
        let (Some(horizon), Some(newest)) = (self.horizon(bounds), self.newest_ns) else {
            return out;
        };
        let cutoff = newest.saturating_sub(bounds.retention_ns);
        let settle_line = newest.saturating_sub(bounds.lateness_ns);
        let from = self.dirty_from.min(self.prev_horizon).min(self.prev_settle_line);
        let periods: Vec<Period> = self.thermal.periods_from(from).cloned().collect();
        for p in &periods {
            if p.onset_ns < cutoff {
                // Its signals may be gone: only its end can still change.
                self.refresh_end(p, &mut out);
                continue;
            }
            // A new onset is emitted once it is settled (the lateness bound behind the newest
            // observation): a temperature arriving out of order could still move it, and an
            // emitted onset cannot be taken back. Its later versions follow every change.
            if p.onset_ns > settle_line && !self.emitted.contains_key(&p.onset_ns) {
                continue;
            }
            if let Some(e) = self.judge(device, p, horizon) {
                if self.emitted.get(&p.onset_ns) != Some(&e) {
                    self.emitted.insert(p.onset_ns, e.clone());
                    out.push(e);
                }
            }
        }
        (self.prev_horizon, self.prev_settle_line, self.dirty_from) = (horizon, settle_line, i64::MAX);
        self.evict(cutoff, bounds);
        self.power.prune(settle_line, &self.thermal);
        out
    }

    fn refresh_end(&mut self, p: &Period, out: &mut Vec<ThrottleEvent>) {
        if let Some(old) = self.emitted.get_mut(&p.onset_ns) {
            let mut e = old.clone();
            e.ongoing = p.end_ns.is_none();
            if let Some(end) = p.end_ns {
                e.duration_s = (end - p.onset_ns) as f64 / 1e9;
            }
            if *old != e {
                *old = e.clone();
                out.push(e);
            }
        }
    }

    /// Advances the judgement of period `p` to `horizon` and returns its episode, if a drop fell.
    fn judge(&mut self, device: &str, p: &Period, horizon: i64) -> Option<ThrottleEvent> {
        let again =
            self.judged.get(&p.onset_ns).is_none_or(|j| self.dirty_from < p.onset_ns || j.trigger != p.trigger || p.end_ns.is_some_and(|e| e < j.judged_to));
        let mut j = match self.judged.remove(&p.onset_ns) {
            Some(j) if !again => j,
            _ => Judged {
                trigger: p.trigger,
                judged_to: p.onset_ns,
                run_base: HashMap::new(),
                power_base: self.power_baseline(p.onset_ns),
                tput: None,
                power: None,
                last_drop: p.onset_ns,
            },
        };
        let scan_from = p.onset_ns.max(self.dirty_from.min(j.judged_to));
        let mut scanned = 0u64;
        for ((start, pattern), (end, mib)) in self.runs.range((scan_from, Arc::<str>::from(""))..) {
            if !p.contains(*start) || *start > horizon {
                break;
            }
            scanned += 1;
            let base = *j.run_base.entry(pattern.clone()).or_insert_with(|| run_baseline(&self.runs, &self.thermal, p.onset_ns, pattern));
            let Some(base) = base else { continue };
            let d = drop_pct(base, *mib);
            if is_drop(d, THROUGHPUT_DROP_PCT) {
                if j.tput.as_ref().is_none_or(|(_, old, at)| d > *old || (d == *old && *start < *at)) {
                    j.tput = Some((pattern.clone(), d, *start));
                }
                j.last_drop = j.last_drop.max(*end);
            }
        }
        if let Some(base) = j.power_base.filter(|b| *b > 0.0) {
            for (t, w) in self.power.from(scan_from) {
                if !p.contains(*t) || *t > horizon {
                    break;
                }
                scanned += 1;
                let d = drop_pct(base, *w);
                if is_drop(d, POWER_DROP_PCT) {
                    j.power = Some(j.power.map_or(d, |old: f64| old.max(d)));
                    j.last_drop = j.last_drop.max(*t);
                }
            }
        }
        self.scanned += scanned;
        j.judged_to = p.end_ns.unwrap_or(i64::MAX).min(horizon.saturating_add(1));
        let e = episode(device, p, &j, self.warning_celsius, self.critical_celsius);
        self.judged.insert(p.onset_ns, j);
        e
    }

    /// Mean of the last [`POWER_BASELINE_SAMPLES`] drive power samples before `onset` outside any
    /// hot period.
    fn power_baseline(&self, onset: i64) -> Option<f64> {
        let before: Vec<f64> = self.power.before(onset).rev().filter(|(t, _)| !self.thermal.is_hot(*t)).take(POWER_BASELINE_SAMPLES).map(|(_, w)| *w).collect();
        (!before.is_empty()).then(|| before.iter().sum::<f64>() / before.len() as f64)
    }

    /// Drops what is older than the retention and what exceeds the caps; keeps the last run of
    /// each pattern and the last power samples (a later period's baselines).
    fn evict(&mut self, cutoff: i64, bounds: &Bounds) {
        self.thermal.settle(cutoff, bounds.max_thermal, self.limit());
        let oldest_kept = self.thermal.periods().find(|p| p.end_ns.is_none_or(|e| e >= cutoff)).map(|p| p.onset_ns).unwrap_or(i64::MAX);
        while self.emitted.first_key_value().is_some_and(|(t, _)| *t < oldest_kept) {
            self.emitted.pop_first();
        }
        while self.judged.first_key_value().is_some_and(|(t, _)| *t < oldest_kept) {
            self.judged.pop_first();
        }
        let mut drop = Vec::new();
        let excess = self.runs.len().saturating_sub(bounds.max_runs);
        for (i, (k, _)) in self.runs.iter().enumerate() {
            if k.0 >= cutoff && i >= excess {
                break;
            }
            if self.last_run_of.get(&k.1) != Some(&k.0) {
                drop.push(k.clone());
            }
        }
        for k in drop {
            self.runs.remove(&k);
        }
        self.power.evict(cutoff, bounds.max_power);
    }

    pub fn emitted(&self) -> &BTreeMap<i64, ThrottleEvent> {
        &self.emitted
    }
}

/// The throughput of the last run of `pattern` started before `onset` outside any hot period.
fn run_baseline(runs: &BTreeMap<(i64, Arc<str>), (i64, f64)>, thermal: &ThermalLog, onset: i64, pattern: &Arc<str>) -> Option<f64> {
    let base = runs.range(..(onset, Arc::<str>::from(""))).rev().find(|((s, pat), _)| pat == pattern && !thermal.is_hot(*s)).map(|(_, v)| v.1);
    base.filter(|b| *b > 0.0)
}

fn episode(device: &str, p: &Period, j: &Judged, warning: Option<f64>, critical: Option<f64>) -> Option<ThrottleEvent> {
    if j.tput.is_none() && j.power.is_none() {
        return None;
    }
    let duration_ns = match p.end_ns {
        Some(e) => e - p.onset_ns,
        None => j.last_drop - p.onset_ns,
    };
    let throughput_drop_pct = j.tput.as_ref().map(|t| t.1);
    let signal = match (throughput_drop_pct.is_some(), j.power.is_some()) {
        (true, true) => "throughput+power",
        (true, false) => "throughput",
        _ => "power",
    };
    Some(ThrottleEvent {
        time_ns: p.onset_ns,
        device: device.to_string(),
        trigger: p.trigger.into(),
        signal: signal.into(),
        pattern: j.tput.as_ref().map(|t| t.0.to_string()).unwrap_or_default(),
        onset_celsius: p.celsius,
        warning_celsius: warning,
        critical_celsius: critical,
        throughput_drop_pct,
        power_drop_pct: j.power,
        duration_s: duration_ns.max(0) as f64 / 1e9,
        ongoing: p.end_ns.is_none(),
    })
}
