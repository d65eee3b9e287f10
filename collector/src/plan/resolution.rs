//! Which stored resolution a plan reads (docs/schema.md, *Retention and rollups*): raw points in
//! the database's default retention policy, the 1-minute rollups and whole copies in `rollup_1m`
//! that the collector keeps when `influx.raw_retention` is set, or its hourly tier `rollup_1h`. Found from the
//! database itself (`SHOW RETENTION POLICIES`), so `plan` needs no collector config. A new
//! reader picks with [`budget_resolution`] (aggregates of `power`) or [`whole_policy`] (runs,
//! inventory, events), and prints [`Resolution::describe`].

use crate::plan::{Influx, PlanError};
use crate::sinks::influx::config::{HOURLY_RP, ROLLUP_RP};
use std::time::Duration;

/// `--resolution`: `auto` picks by range and bucket; `rollup` is the 1-minute tier, `hourly` the
/// hourly tier (with the minute tier where it does not answer exactly).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Auto,
    Raw,
    Rollup,
    Hourly,
}

impl std::str::FromStr for Choice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Choice::Auto),
            "raw" => Ok(Choice::Raw),
            "rollup" => Ok(Choice::Rollup),
            "hourly" => Ok(Choice::Hourly),
            _ => Err(format!("--resolution `{s}`: write auto, raw, rollup or hourly")),
        }
    }
}

/// The database's retention policies as far as plans care.
#[derive(Debug, Clone, PartialEq)]
pub struct Storage {
    /// The default policy (where raw points are) and how long it keeps them (None: forever).
    pub default_rp: String,
    pub raw_kept: Option<Duration>,
    /// Whether `rollup_1m` exists.
    pub rollups: bool,
    /// Whether `rollup_1h` exists.
    pub hourly: bool,
}

/// What a plan read.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    Raw(String),
    Rollup(String),
    /// The hourly tier where it answers exactly (`plan::budget_hourly`), the text of the
    /// 1-minute rollups for the rest.
    Hourly(String),
}

impl Resolution {
    /// Rollups of either tier.
    pub fn is_rollup(&self) -> bool {
        matches!(self, Resolution::Rollup(_) | Resolution::Hourly(_))
    }
    /// The output line's text.
    pub fn describe(&self) -> &str {
        match self {
            Resolution::Raw(s) | Resolution::Rollup(s) | Resolution::Hourly(s) => s,
        }
    }
}

/// An InfluxQL duration (`30d`, `90m`, `1h30m`) or a Go duration from `SHOW RETENTION POLICIES`
/// (`168h0m0s`; `0s` is forever, returned as zero).
pub fn influx_duration(s: &str) -> Option<Duration> {
    let (mut total, mut rest) = (0u128, s.trim());
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let n: u128 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let ns: u128 = match &rest[..unit_len] {
            "ns" => 1,
            "u" | "µ" | "us" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "d" => 86_400_000_000_000,
            "w" => 604_800_000_000_000,
            _ => return None,
        };
        total += n * ns;
        rest = &rest[unit_len..];
    }
    Some(Duration::from_nanos(u64::try_from(total).ok()?))
}

impl Influx {
    /// The default retention policy, its duration and whether rollups exist.
    pub async fn storage(&self) -> Result<Storage, PlanError> {
        let mut st = Storage { default_rp: "autogen".into(), raw_kept: None, rollups: false, hourly: false };
        let policies = match self.query_raw(&format!("SHOW RETENTION POLICIES ON \"{}\"", self.db.replace('"', ""))).await {
            // No database yet: no rollups; the plan's own queries say what is missing.
            Err(PlanError::Query { message, .. }) if message.contains("database not found") => Vec::new(),
            other => other?,
        };
        for s in policies {
            for i in 0..s.values.len() {
                let name = s.s(i, "name").unwrap_or_default();
                st.rollups |= name == ROLLUP_RP;
                st.hourly |= name == HOURLY_RP;
                if s.values[i].get(s.col("default").unwrap_or(usize::MAX)).and_then(|v| v.as_bool()) == Some(true) {
                    st.raw_kept = s.s(i, "duration").and_then(|d| influx_duration(&d)).filter(|d| !d.is_zero());
                    st.default_rp = name;
                }
            }
        }
        Ok(st)
    }
}

fn kept(st: &Storage) -> String {
    match st.raw_kept {
        Some(d) => format!("kept {}", humantime::format_duration(d)),
        None => "kept without limit".into(),
    }
}

/// The resolution of `plan budget`: rollups when they exist and the bucket is a whole number of
/// minutes (1-minute means are what the budget's peak is defined on; the answer is the raw one
/// but for the newest minutes, not yet rolled up), the hourly tier first when it exists and the
/// bucket is one minute (it keeps the largest minute of each hour), raw points otherwise. A raw read beyond the
/// raw retention is refused: its answer would silently cover only the retained days.
pub fn budget_resolution(choice: Choice, st: &Storage, bucket: &str, since: &str) -> Result<Resolution, PlanError> {
    let bucket_d = influx_duration(bucket)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| PlanError::Input(format!("--bucket `{bucket}`: an InfluxQL duration such as 1m or 10s")))?;
    let whole = bucket_d.as_nanos() % 60_000_000_000 == 0;
    let since_d = influx_duration(since);
    let beyond_raw = matches!((since_d, st.raw_kept), (Some(s), Some(r)) if s > r);
    let rollup = match choice {
        Choice::Rollup if !st.rollups => {
            return Err(PlanError::Input(format!(
                "--resolution rollup: the database has no `{ROLLUP_RP}` retention policy (set influx.raw_retention on the collector)"
            )))
        }
        Choice::Rollup if !whole => return Err(PlanError::Input(format!("--resolution rollup: --bucket {bucket} is not a whole number of minutes"))),
        Choice::Hourly if !(st.hourly && bucket_d.as_secs() == 60) => {
            return Err(PlanError::Input(format!("--resolution hourly: needs the `{HOURLY_RP}` retention policy and --bucket 1m")))
        }
        Choice::Rollup | Choice::Hourly => true,
        Choice::Raw => false,
        Choice::Auto => st.rollups && whole,
    };
    let hourly = choice == Choice::Hourly || (choice == Choice::Auto && st.hourly && bucket_d.as_secs() == 60);
    if rollup && hourly {
        return Ok(Resolution::Hourly(minute_rollups(bucket)));
    }
    if rollup {
        return Ok(Resolution::Rollup(minute_rollups(bucket)));
    }
    if beyond_raw {
        let hint = if st.rollups && !whole { format!("give --bucket in whole minutes to read the {ROLLUP_RP} rollups") } else { "narrow --since".to_string() };
        return Err(PlanError::Input(format!("--since {since} reaches beyond the raw points (retention policy `{}`, {}): {hint}", st.default_rp, kept(st))));
    }
    let why = if st.rollups { "" } else { "; no rollups in this database" };
    Ok(Resolution::Raw(format!("raw points (retention policy `{}`, {}{why})", st.default_rp, kept(st))))
}

fn minute_rollups(bucket: &str) -> String {
    format!(
        "1-minute rollups (retention policy {ROLLUP_RP}, --bucket {bucket}); the newest minute or two are rolled up after the collector's rollup_settle, and a peak shorter than a minute needs raw points (--resolution raw, within the raw retention)"
    )
}

/// Where runs, inventory, Hellos and events are read: the raw policy while `--since` is within
/// its retention (it holds everything up to now), else the whole copies in `rollup_1m`.
pub fn whole_policy(st: &Storage, since: &str) -> Resolution {
    match (influx_duration(since), st.raw_kept) {
        (Some(s), Some(r)) if s > r && st.rollups => Resolution::Rollup(format!(
            "runs, inventory and events from the whole copies in {ROLLUP_RP} (--since {since} is beyond the raw retention, {})",
            kept(st)
        )),
        _ => Resolution::Raw(format!("raw points (retention policy `{}`, {})", st.default_rp, kept(st))),
    }
}

/// Measurements kept whole in `rollup_1m` that plans read.
const WHOLE: &[&str] = &["probe_run", "inventory", "agent", "throttle_event", "event"];

/// `q` reading the whole copies in `rp`: each `FROM "m"` of a kept-whole measurement qualified,
/// and the day count of temperatures (the throttling roll-up) read from the temperature rollups,
/// whose `count` per minute adds up to the same number.
pub fn rewrite_whole(q: &str, rp: &str) -> String {
    let mut out = q.replace("SELECT count(\"celsius\") FROM \"temperature\"", &format!("SELECT sum(\"count\") AS \"count\" FROM \"{rp}\".\"temperature\""));
    for m in WHOLE {
        out = out.replace(&format!("FROM \"{m}\""), &format!("FROM \"{rp}\".\"{m}\""));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_policies_and_choices() {
        let d = |s: &str| influx_duration(s).map(|d| d.as_secs());
        assert_eq!((d("30d"), d("168h0m0s"), d("1h30m"), d("0s"), d("10"), d("x")), (Some(2_592_000), Some(604_800), Some(5400), Some(0), None, None));
        let st = Storage { default_rp: "raw".into(), raw_kept: Some(Duration::from_secs(7 * 86_400)), rollups: true, hourly: false };
        assert!(budget_resolution(Choice::Auto, &st, "1m", "30d").unwrap().is_rollup());
        assert!(budget_resolution(Choice::Auto, &st, "5m", "1h").unwrap().is_rollup());
        assert!(!budget_resolution(Choice::Auto, &st, "10s", "1d").unwrap().is_rollup());
        let e = budget_resolution(Choice::Auto, &st, "10s", "30d").unwrap_err().to_string();
        assert!(e.contains("beyond the raw points") && e.contains("whole minutes"), "{e}");
        assert!(budget_resolution(Choice::Raw, &st, "1m", "30d").is_err());
        let none = Storage { rollups: false, raw_kept: None, default_rp: "autogen".into(), hourly: false };
        assert_eq!(
            budget_resolution(Choice::Auto, &none, "1m", "30d").unwrap(),
            Resolution::Raw("raw points (retention policy `autogen`, kept without limit; no rollups in this database)".into())
        );
        assert!(budget_resolution(Choice::Rollup, &none, "1m", "30d").is_err());
        // The hourly tier for 1-minute buckets only; `rollup` keeps to the minute tier.
        let both = Storage { hourly: true, ..st.clone() };
        assert!(matches!(budget_resolution(Choice::Auto, &both, "1m", "30d").unwrap(), Resolution::Hourly(_)));
        assert!(matches!(budget_resolution(Choice::Auto, &both, "5m", "30d").unwrap(), Resolution::Rollup(_)));
        assert!(matches!(budget_resolution(Choice::Rollup, &both, "1m", "30d").unwrap(), Resolution::Rollup(_)));
        assert!(budget_resolution(Choice::Hourly, &st, "1m", "30d").is_err() && budget_resolution(Choice::Hourly, &both, "2m", "30d").is_err());
        assert!(whole_policy(&st, "30d").is_rollup() && !whole_policy(&st, "7d").is_rollup() && !whole_policy(&none, "400d").is_rollup());
        assert_eq!(
            rewrite_whole("SELECT count(\"celsius\") FROM \"temperature\" WHERE x; SELECT a FROM \"probe_run\"", "rollup_1m"),
            "SELECT sum(\"count\") AS \"count\" FROM \"rollup_1m\".\"temperature\" WHERE x; SELECT a FROM \"rollup_1m\".\"probe_run\""
        );
    }
}
