//! `[[probes]]` of the agent config: scheduled probes, validated into [`ProbeJob`]s. Every entry
//! is checked in full (cron schedule, target, size, benches, value lists and counts, power
//! recording), each problem at its own path (`probes[0].io_sizes[1]`), next to every other problem
//! of the file. A new probe setting is a field of [`RawProbe`], its check in [`probe_jobs`] (or
//! [`plan_overrides`] for a value list) and a line in `agent/agent.example.toml`.

use super::values::BASELINES;
use super::{parse_benches, parse_format, parse_size, EnergyOptions, PlanOverrides, ProbeArgs, ValuesProfile};
use crate::drives::config::DrivesConfig;
use crate::energy::recorded::parse_target;
use crate::energy::sizing::DEFAULT_BUDGET;
use crate::sensors::SensorKinds;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use wattflip_infra::duration::{Bounded, DAY};
use wattflip_infra::tomlcfg::Loader;

/// One validated `[[probes]]` entry.
#[derive(Debug, Clone)]
pub struct ProbeJob {
    pub name: String,
    pub schedule: cron::Schedule,
    pub jitter: Duration,
    pub args: ProbeArgs,
    /// Keep a local copy of each run's results under `<out>/<name>-<start>/`.
    pub keep_results: bool,
    /// Power recorded during the probe for per-run energy, like `probe` does; `None` with
    /// `power = false`.
    pub energy: Option<EnergyOptions>,
    /// `efficiency = true`: the efficiency preset (`probe --efficiency`) instead of uFLIP.
    pub efficiency: Option<super::efficiency::ScheduledEfficiency>,
}

impl PartialEq for ProbeJob {
    fn eq(&self, o: &Self) -> bool {
        self.name == o.name && self.schedule.to_string() == o.schedule.to_string() && self.jitter == o.jitter
    }
}

/// `power_states = "all"` (or `"0,2"`) or `[0, 2]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawStates {
    Word(String),
    List(Vec<u32>),
}

#[derive(Debug, Default, Deserialize)]
pub struct RawProbe {
    pub name: Option<String>,
    pub schedule: Option<String>,
    pub jitter: Option<String>,
    pub target: Option<PathBuf>,
    pub size: Option<String>,
    pub bench: Option<String>,
    pub quick: Option<bool>,
    pub repetitions: Option<u32>,
    pub format: Option<String>,
    pub seed: Option<u64>,
    pub destroy_consent: Option<Vec<String>>,
    pub keep_results: Option<bool>,
    pub out: Option<PathBuf>,
    pub read_only: Option<bool>,
    pub values: Option<String>,
    pub power: Option<bool>,
    pub power_interval: Option<String>,
    pub idle: Option<String>,
    pub settle: Option<String>,
    pub tail: Option<String>,
    pub power_zone: Option<String>,
    pub energy_target: Option<String>,
    pub energy_budget: Option<String>,
    // Value lists and counts are taken as raw TOML and checked here, so a wrong item is reported
    // at its own path (`probes[0].io_sizes[1]`) next to every other problem of the file.
    pub io_sizes: Option<toml::Value>,
    pub io_shifts: Option<toml::Value>,
    pub target_size_ios: Option<toml::Value>,
    pub partitions: Option<toml::Value>,
    pub orders: Option<toml::Value>,
    pub parallel_degrees: Option<toml::Value>,
    pub mix_ratios: Option<toml::Value>,
    pub pause_io_us: Option<toml::Value>,
    pub burst_io: Option<toml::Value>,
    pub io_count: Option<toml::Value>,
    pub ignore_io: Option<toml::Value>,
    pub efficiency: Option<bool>,
    pub efficiency_window: Option<String>,
    pub efficiency_windows: Option<usize>,
    pub efficiency_budget: Option<String>,
    pub efficiency_band: Option<f64>,
    pub efficiency_trend: Option<f64>,
    pub capacity: Option<String>,
    pub power_states: Option<RawStates>,
    pub power_states_controller: Option<String>,
}

/// Validates `[[probes]]` entries; problems are recorded with `probes[i].key` paths. `host` is where
/// the power sources are (sysfs root, enabled kinds, nvme-cli for the datasheet estimate).
pub fn probe_jobs(raw: Vec<RawProbe>, host: (&Path, &SensorKinds, &DrivesConfig), l: &mut Loader) -> Vec<ProbeJob> {
    let mut jobs = Vec::new();
    let mut names = std::collections::HashSet::new();
    for (i, mut r) in raw.into_iter().enumerate() {
        let key = |k: &str| format!("probes[{i}].{k}");
        let name = r.name.take().unwrap_or_else(|| format!("probe-{i}"));
        if !names.insert(name.clone()) {
            l.problem(key("name"), format!("`{name}` is used twice; names identify schedules"));
        }
        let schedule = cron_schedule(r.schedule.as_deref(), &key, l);
        // A schedule's jitter spreads a fleet's probes over at most a day.
        let jitter = Bounded::new(Duration::ZERO, DAY).read(&key("jitter"), r.jitter.take().as_deref(), Duration::ZERO, l);
        let Some(target) = r.target.take() else {
            l.problem(key("target"), "is required: a scratch file or a consented block device");
            continue;
        };
        let size = match parse_size(r.size.as_deref().unwrap_or("1GiB")) {
            Ok(s) => s,
            Err(e) => {
                l.problem(key("size"), e);
                0
            }
        };
        let benches = parse_benches(r.bench.as_deref().unwrap_or("all")).unwrap_or_else(|e| {
            l.problem(key("bench"), e);
            Vec::new()
        });
        let format = parse_format(r.format.as_deref().unwrap_or("none")).unwrap_or_else(|e| {
            l.problem(key("format"), e);
            None
        });
        let quick = r.quick.unwrap_or(false);
        let values = values_profile(r.values.as_deref(), quick, &key, l);
        if r.repetitions == Some(0) {
            l.problem(key("repetitions"), "must be at least 1 (uFLIP's nbRun: runs per value)");
        }
        let effective = if quick { vec![wattflip_uflip::Bench::Granularity] } else { benches.clone() };
        let overrides = plan_overrides(&r, values, &effective, &key, l);
        let energy = probe_energy(&mut r, host, &key, l);
        let efficiency = scheduled_efficiency(&r, energy.is_some(), &key, l);
        let Some(schedule) = schedule else { continue };
        jobs.push(ProbeJob {
            name,
            schedule,
            jitter,
            keep_results: r.keep_results.unwrap_or(false),
            energy,
            efficiency,
            args: ProbeArgs {
                target,
                size,
                benches,
                quick,
                values,
                overrides,
                format,
                repetitions: r.repetitions,
                out: r.out.unwrap_or_else(|| PathBuf::from("/var/lib/wattflip-agent/probes")),
                emit_fio_iolog: None,
                io_trace: None,
                destroy_consent: r.destroy_consent.unwrap_or_default(),
                // Scheduled probes never get the override: an operator passes it by hand.
                overwrite_signatures: false,
                seed: r.seed,
                read_only: r.read_only.unwrap_or(false),
                pause: super::PauseChoice::Plan,
                counts: None,
                stop: None,
            },
        });
    }
    jobs
}

/// `efficiency = true` and its `efficiency_*` settings (the `probe --efficiency-*` flags' defaults),
/// `capacity`; a setting without `efficiency = true`, or the preset without power, is a problem.
fn scheduled_efficiency(r: &RawProbe, power: bool, key: &dyn Fn(&str) -> String, l: &mut Loader) -> Option<super::efficiency::ScheduledEfficiency> {
    let set: Vec<&str> = [
        ("efficiency_window", r.efficiency_window.is_some()),
        ("efficiency_windows", r.efficiency_windows.is_some()),
        ("efficiency_budget", r.efficiency_budget.is_some()),
        ("efficiency_band", r.efficiency_band.is_some()),
        ("efficiency_trend", r.efficiency_trend.is_some()),
        ("capacity", r.capacity.is_some()),
        ("power_states", r.power_states.is_some()),
        ("power_states_controller", r.power_states_controller.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, on)| on.then_some(k))
    .collect();
    if r.efficiency != Some(true) {
        for k in set {
            l.problem(key(k), "has no effect without efficiency = true");
        }
        return None;
    }
    if !power {
        l.problem(key("efficiency"), "measures power: it needs power recording (remove power = false)");
    }
    let d = super::efficiency::EfficiencyOptions::default();
    let window = EFFICIENCY_WINDOW.read(&key("efficiency_window"), r.efficiency_window.as_deref(), d.budget.window, l);
    let budget = EFFICIENCY_BUDGET.read(&key("efficiency_budget"), r.efficiency_budget.as_deref(), d.budget.budget, l);
    let capacity = match r.capacity.as_deref().map(parse_size) {
        Some(Err(e)) => {
            l.problem(key("capacity"), e);
            None
        }
        other => other.and_then(Result::ok),
    };
    let windows = r.efficiency_windows.unwrap_or(d.stability.min_windows);
    let (band, trend) = (r.efficiency_band.unwrap_or(d.stability.band * 100.0), r.efficiency_trend.unwrap_or(d.stability.max_trend * 100.0));
    match super::efficiency::EfficiencyOptions::new(window, windows, budget, band, trend) {
        Ok(options) => Some(super::efficiency::ScheduledEfficiency { options, capacity, power_states: scheduled_states(r, key, l) }),
        Err((name, e)) => {
            l.problem(key(&format!("efficiency_{name}")), e);
            None
        }
    }
}

/// `schedule`: required, a cron expression (`sec min hour day month weekday`).
/// `power_states` (and `power_states_controller`) of an efficiency entry, as `--power-states`.
fn scheduled_states(r: &RawProbe, key: &dyn Fn(&str) -> String, l: &mut Loader) -> Option<super::efficiency::states::PowerStatesArgs> {
    use super::efficiency::states::{PowerStatesArgs, StateSelection};
    let selection = match r.power_states.clone() {
        None => {
            if r.power_states_controller.is_some() {
                l.problem(key("power_states_controller"), "has no effect without power_states");
            }
            return None;
        }
        Some(RawStates::Word(w)) => w.parse::<StateSelection>(),
        Some(RawStates::List(v)) => v.iter().map(u32::to_string).collect::<Vec<_>>().join(",").parse::<StateSelection>(),
    };
    match selection {
        Ok(selection) => Some(PowerStatesArgs { selection, controller: r.power_states_controller.clone() }),
        Err(e) => {
            l.problem(key("power_states"), e);
            None
        }
    }
}

fn cron_schedule(raw: Option<&str>, key: &dyn Fn(&str) -> String, l: &mut Loader) -> Option<cron::Schedule> {
    match raw {
        None => {
            l.problem(key("schedule"), "is required: a cron expression `sec min hour day month weekday`, e.g. \"0 30 2 * * *\"");
            None
        }
        Some(s) => match s.parse::<cron::Schedule>() {
            Ok(c) => Some(c),
            Err(e) => {
                l.problem(key("schedule"), format!("`{s}` is not a cron expression ({e}); write `sec min hour day month weekday`"));
                None
            }
        },
    }
}

/// `values` (spec, small, quick), which `quick = true` implies and must not contradict.
fn values_profile(raw: Option<&str>, quick: bool, key: &dyn Fn(&str) -> String, l: &mut Loader) -> ValuesProfile {
    match raw {
        None if quick => ValuesProfile::Quick,
        None => ValuesProfile::default(),
        Some(v) => match ValuesProfile::parse(v) {
            Ok(ValuesProfile::Quick) => ValuesProfile::Quick,
            Ok(_) if quick => {
                l.problem(key("values"), format!("`{v}` contradicts quick = true (the quick plan has the quick values); remove one of them"));
                ValuesProfile::Quick
            }
            Ok(p) => p,
            Err(e) => {
                l.problem(key("values"), e);
                ValuesProfile::default()
            }
        },
    }
}

// The fast sampler's 1 kHz is RAPL's update rate; the idle window is the baseline's sample. The
// same ranges hold for the `probe` command's flags.
/// `power_interval` of a probe (`--power-interval`).
pub const POWER_INTERVAL: Bounded = Bounded::new(Duration::from_millis(1), Duration::from_secs(1));
/// `idle` of a probe (`--idle`).
pub const IDLE: Bounded = Bounded::new(Duration::from_millis(10), Duration::from_secs(600));
/// `tail` of a probe (`--tail`).
pub const TAIL: Bounded = Bounded::new(Duration::ZERO, Duration::from_secs(600));
/// `efficiency_window`: one window of an efficiency phase's stability test.
pub const EFFICIENCY_WINDOW: Bounded = Bounded::new(Duration::from_millis(100), Duration::from_secs(600));
/// `efficiency_budget`: the longest an efficiency phase may run to become stable.
pub const EFFICIENCY_BUDGET: Bounded = Bounded::new(Duration::from_secs(1), DAY);
/// `--energy-budget`: the run time lengthened runs may add, none up to a day.
pub const ENERGY_BUDGET: Bounded = Bounded::new(Duration::ZERO, DAY);
/// `settle` of a probe (`--settle`): the wait between preparing the target and the idle window.
pub const SETTLE: Bounded = Bounded::new(Duration::ZERO, Duration::from_secs(600));

/// Power recording of a `[[probes]]` entry: on unless `power = false`, with the `probe` command's
/// defaults (5 ms between reads, 1 s idle before the first run and 1 s tail after the last, no
/// `energy_target`, a 10 min `energy_budget`). A key that has no effect is a problem: any of them
/// with `power = false`, `energy_budget` without a target, either sizing key with the efficiency
/// preset.
fn probe_energy(r: &mut RawProbe, host: (&Path, &SensorKinds, &DrivesConfig), key: &dyn Fn(&str) -> String, l: &mut Loader) -> Option<EnergyOptions> {
    let set: Vec<&str> = [
        ("power_interval", r.power_interval.is_some()),
        ("idle", r.idle.is_some()),
        ("settle", r.settle.is_some()),
        ("tail", r.tail.is_some()),
        ("power_zone", r.power_zone.is_some()),
        ("energy_target", r.energy_target.is_some()),
        ("energy_budget", r.energy_budget.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, on)| on.then_some(k))
    .collect();
    let period = POWER_INTERVAL.read(&key("power_interval"), r.power_interval.take().as_deref(), Duration::from_millis(5), l);
    let idle = IDLE.read(&key("idle"), r.idle.take().as_deref(), Duration::from_secs(1), l);
    let settle = SETTLE.read(&key("settle"), r.settle.take().as_deref(), Duration::from_secs(1), l);
    let tail = TAIL.read(&key("tail"), r.tail.take().as_deref(), Duration::from_secs(1), l);
    // A budget is pointless without a target; a target that is refused is its own problem.
    let target_off = r.energy_target.as_deref().is_none_or(|t| parse_target(t) == Ok(None));
    let (energy_target, energy_budget) = energy_sizing(r, key, l);
    if r.power == Some(false) {
        for k in set {
            l.problem(key(k), "has no effect with power = false; remove it or turn power recording on");
        }
        return None;
    }
    if r.efficiency == Some(true) {
        for k in set.iter().filter(|k| k.starts_with("energy_")) {
            l.problem(
                key(k),
                "has no effect with efficiency = true: the efficiency preset sizes its phases by their stability (efficiency_window, efficiency_budget)",
            );
        }
    } else if target_off && set.contains(&"energy_budget") {
        l.problem(key("energy_budget"), "has no effect without energy_target: it bounds the time that sizing runs to the target adds");
    }
    Some(EnergyOptions {
        sysfs_root: host.0.to_owned(),
        kinds: host.1.clone(),
        period,
        idle,
        settle,
        tail,
        zone: r.power_zone.take(),
        drives: host.2.clone(),
        energy_target,
        energy_budget,
    })
}

/// `energy_target` (a percentage or `off`, as `--energy-target`) and `energy_budget` (as
/// `--energy-budget`): runs sized to the power source ([`super::sized`]); off and
/// [`DEFAULT_BUDGET`] when unset.
fn energy_sizing(r: &mut RawProbe, key: &dyn Fn(&str) -> String, l: &mut Loader) -> (Option<f64>, Duration) {
    let target = match r.energy_target.take().as_deref().map(parse_target) {
        Some(Err(e)) => {
            l.problem(key("energy_target"), e);
            None
        }
        other => other.and_then(Result::ok).flatten(),
    };
    (target, ENERGY_BUDGET.read(&key("energy_budget"), r.energy_budget.take().as_deref(), DEFAULT_BUDGET, l))
}

/// Checks a `[[probes]]` entry's value lists and counts. Every item is checked, so one entry can
/// report several problems, each at its own dotted path.
pub fn plan_overrides(r: &RawProbe, profile: ValuesProfile, benches: &[wattflip_uflip::Bench], key: &dyn Fn(&str) -> String, l: &mut Loader) -> PlanOverrides {
    let sizes = |name: &'static str, zero_ok: bool| {
        move |v: &toml::Value| -> Result<u64, String> {
            let b = match v {
                toml::Value::Integer(n) => u64::try_from(*n).map_err(|_| format!("{n} is negative; {name} are sizes in bytes"))?,
                toml::Value::String(s) => parse_size(s)?,
                other => return Err(format!("{other} is not a size; write e.g. \"4KiB\" or a number of bytes")),
            };
            if b == 0 && !zero_ok {
                return Err("0 bytes: an IO needs at least one 512-byte sector".into());
            }
            if b % 512 != 0 {
                return Err(format!("{b} bytes is not a multiple of 512 (a sector); O_DIRECT IO needs sector-aligned {name}"));
            }
            Ok(b)
        }
    };
    let int = |min: i64, max: i64, what: &'static str| {
        move |v: &toml::Value| -> Result<i64, String> {
            match v {
                toml::Value::Integer(n) if (min..=max).contains(n) => Ok(*n),
                toml::Value::Integer(n) => Err(format!("{n} is outside {min}..={max} ({what})")),
                other => Err(format!("{other} is not an integer ({what})")),
            }
        }
    };
    let unsigned = |v: Option<Vec<i64>>| v.map(|v| v.into_iter().map(|x| x as u64).collect::<Vec<u64>>());
    let max_par = i64::from(wattflip_uflip::pattern::MAX_PARALLEL);
    let o = PlanOverrides {
        io_sizes: value_list(l, &key("io_sizes"), &r.io_sizes, sizes("IO sizes", false)),
        io_shifts: value_list(l, &key("io_shifts"), &r.io_shifts, sizes("IO shifts", true)),
        target_size_ios: unsigned(value_list(l, &key("target_size_ios"), &r.target_size_ios, int(1, 1 << 40, "TargetSize in IOs"))),
        partitions: unsigned(value_list(l, &key("partitions"), &r.partitions, int(1, 1 << 20, "number of partitions"))),
        orders: value_list(l, &key("orders"), &r.orders, int(-(1 << 20), 1 << 20, "increment: -1 reverse, 0 in place, k strided")),
        parallel_degrees: value_list(l, &key("parallel_degrees"), &r.parallel_degrees, int(1, max_par, "threads"))
            .map(|v| v.into_iter().map(|x| x as u32).collect()),
        mix_ratios: value_list(l, &key("mix_ratios"), &r.mix_ratios, int(-(1 << 20), 1 << 20, "IOs of one pattern per IO of the other; negative swaps them")),
        pause_io_us: unsigned(value_list(l, &key("pause_io_us"), &r.pause_io_us, int(0, 60_000_000, "microseconds after every IO"))),
        burst_io: unsigned(value_list(l, &key("burst_io"), &r.burst_io, int(1, 1 << 30, "IOs per burst"))),
        io_count: baseline_counts(l, &key("io_count"), &r.io_count, 1),
        ignore_io: baseline_counts(l, &key("ignore_io"), &r.ignore_io, 0),
    };
    for (k, bench) in o.overridden_lists() {
        if !benches.contains(&bench) {
            l.problem(key(k), format!("has no effect: it is the value list of {bench}, which this probe does not run (add it to bench)"));
        }
    }
    // IgnoreIO is the start-up phase, IOCount the whole run: a run must have a running phase.
    let table = profile.options(0).counts;
    for (i, (_, name)) in BASELINES.iter().enumerate() {
        if o.io_count[i].is_none() && o.ignore_io[i].is_none() {
            continue;
        }
        let (count, ignore) = (o.io_count[i].unwrap_or(table.io_count[i]), o.ignore_io[i].unwrap_or(table.ignore_io[i]));
        if ignore >= count {
            let at = if o.ignore_io[i].is_some() { key(&format!("ignore_io.{name}")) } else { key(&format!("io_count.{name}")) };
            l.problem(at, format!("IgnoreIO {ignore} is not below IOCount {count} for {name} (counts not set here are the {} profile's); raise io_count.{name} or lower ignore_io.{name}", profile.as_str()));
        }
    }
    o
}

/// One value list: a non-empty TOML array whose items `item` accepts, without repeats. `None`
/// (and a problem) when anything is wrong, so the profile's list stands in while checking goes on.
fn value_list<T: PartialEq + std::fmt::Display>(
    l: &mut Loader,
    key: &str,
    raw: &Option<toml::Value>,
    item: impl Fn(&toml::Value) -> Result<T, String>,
) -> Option<Vec<T>> {
    let raw = raw.as_ref()?;
    let Some(items) = raw.as_array() else {
        l.problem(key, format!("{raw} is not a list; write e.g. [1, 4, 16]"));
        return None;
    };
    if items.is_empty() {
        l.problem(key, "is empty: list at least one value, or leave the key out to keep the profile's list");
        return None;
    }
    let mut out: Vec<T> = Vec::new();
    let mut ok = true;
    for (j, v) in items.iter().enumerate() {
        match item(v) {
            Ok(x) if out.contains(&x) => {
                l.problem(format!("{key}[{j}]"), format!("{x} is listed twice; each value is one point of the experiment"));
                ok = false;
            }
            Ok(x) => out.push(x),
            Err(e) => {
                l.problem(format!("{key}[{j}]"), e);
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// A per-baseline table such as `io_count = { SR = 128, RW = 512 }` (keys SR, RR, SW, RW).
fn baseline_counts(l: &mut Loader, key: &str, raw: &Option<toml::Value>, min: i64) -> [Option<u64>; 4] {
    let mut out = [None; 4];
    let Some(raw) = raw else { return out };
    let Some(table) = raw.as_table() else {
        l.problem(key, format!("{raw} is not a table; write e.g. {{ SR = 128, RR = 256, SW = 128, RW = 512 }}"));
        return out;
    };
    for (k, v) in table {
        let at = format!("{key}.{k}");
        let Some(i) = BASELINES.iter().position(|(_, n)| n == k) else {
            l.problem(at, "unknown baseline; use SR, RR, SW or RW");
            continue;
        };
        match v {
            toml::Value::Integer(n) if *n >= min => out[i] = Some(*n as u64),
            toml::Value::Integer(n) => l.problem(at, format!("{n} is below {min}")),
            other => l.problem(at, format!("{other} is not a number of IOs")),
        }
    }
    out
}
