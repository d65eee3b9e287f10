//! Bounded durations: every duration a binary reads from a config file or a command-line flag is
//! parsed here, as a humantime string (`250ms`, `5s`, `2m`, `7d`), and checked against the key's own
//! range, so no value (`500000000000y`) can reach `Instant + Duration` and overflow. Add a key by
//! giving it a [`Bounded`] (its range, and why when the reason is not obvious) and reading it with
//! [`Bounded::read`] (config, problem by dotted key) or [`Bounded::parse`] (a flag, as a clap
//! `value_parser`).

use crate::tomlcfg::Loader;
use std::time::Duration;

/// The inclusive range one duration setting may take, with the reason for it shown in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounded {
    pub min: Duration,
    pub max: Duration,
    /// Why the range is what it is; empty when it needs no words.
    pub why: &'static str,
}

/// One day, for ranges.
pub const DAY: Duration = Duration::from_secs(86_400);
/// One hour, for ranges.
pub const HOUR: Duration = Duration::from_secs(3600);
/// A century (36,525 days): the widest range any key has (InfluxDB retention).
pub const CENTURY: Duration = Duration::from_secs(36_525 * 86_400);

impl Bounded {
    pub const fn new(min: Duration, max: Duration) -> Bounded {
        Bounded { min, max, why: "" }
    }

    /// The same range, explained by `why` in errors.
    pub const fn because(self, why: &'static str) -> Bounded {
        Bounded { why, ..self }
    }

    /// `min..=max` as humantime writes it (`1ms..=1h`).
    pub fn range(&self) -> String {
        format!("{}..={}", humantime::format_duration(self.min), humantime::format_duration(self.max))
    }

    /// Parses `s` and checks the range; the error names the value and the range, not the key.
    pub fn parse(&self, s: &str) -> Result<Duration, String> {
        let d = humantime::parse_duration(s.trim()).map_err(|e| format!("`{s}` is not a duration ({e}); write e.g. `500ms`, `5s` or `2m`"))?;
        if d < self.min || d > self.max {
            let why = if self.why.is_empty() { String::new() } else { format!(" ({})", self.why) };
            return Err(format!("`{s}` is outside {}{why}", self.range()));
        }
        Ok(d)
    }

    /// The value of config key `key` (`None`: not set): `default` when unset, and also when the
    /// value is refused, after recording the problem under `key` in `l`.
    pub fn read(&self, key: &str, raw: Option<&str>, default: Duration, l: &mut Loader) -> Duration {
        match raw {
            Some(s) => self.read_set(key, s, l).unwrap_or(default),
            None => default,
        }
    }

    /// A set value of config key `key`; None (and a problem under `key`) when refused.
    pub fn read_set(&self, key: &str, s: &str, l: &mut Loader) -> Option<Duration> {
        match self.parse(s) {
            Ok(d) => Some(d),
            Err(m) => {
                l.problem(key, m);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const R: Bounded = Bounded::new(Duration::from_millis(1), HOUR);

    #[test]
    fn values_in_range_parse_and_others_name_value_and_range() {
        assert_eq!(R.parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(R.parse(" 2m "), Ok(Duration::from_secs(120)));
        assert_eq!(R.parse("1h"), Ok(HOUR));
        assert_eq!(R.parse("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(R.parse("61m"), Err("`61m` is outside 1ms..=1h".to_string()));
        assert_eq!(R.parse("500000000000y"), Err("`500000000000y` is outside 1ms..=1h".to_string()));
        assert_eq!(R.parse("0s"), Err("`0s` is outside 1ms..=1h".to_string()));
        assert_eq!(R.parse("fast"), Err("`fast` is not a duration (expected number at 0); write e.g. `500ms`, `5s` or `2m`".to_string()));
        let r = Bounded::new(Duration::ZERO, DAY).because("a day at most");
        assert_eq!(r.parse("2d"), Err("`2d` is outside 0s..=1day (a day at most)".to_string()));
    }

    #[test]
    fn config_reads_record_the_dotted_key() {
        let mut l = Loader::from_str(Path::new("b.toml"), "").unwrap();
        assert_eq!(R.read("a.b", None, Duration::from_secs(7), &mut l), Duration::from_secs(7));
        assert_eq!(R.read("a.b", Some("5s"), Duration::from_secs(7), &mut l), Duration::from_secs(5));
        assert_eq!(R.read("a.c", Some("500000000000y"), Duration::from_secs(7), &mut l), Duration::from_secs(7));
        let err = l.finish().unwrap_err();
        assert_eq!(err.problems.len(), 1);
        assert_eq!((err.problems[0].path.as_str(), err.problems[0].message.as_str()), ("a.c", "`500000000000y` is outside 1ms..=1h"));
    }
}
