//! InfluxDB 1.x partial writes that name no line: `partial write: points beyond retention policy
//! dropped=N` and `partial write: max-values-per-tag limit exceeded (n/max): measurement="m"
//! tag="k" value="v" dropped=N`. Both say how many lines were dropped and why; which ones follows
//! from the why: the N oldest lines (retention drops by time alone), or the lines of `m` whose
//! value of `k` InfluxDB does not hold yet (asked with one `SHOW TAG VALUES`). The writer
//! dead-letters exactly those when the count agrees with N, and writes the others again (influxd
//! 1.6 can drop a neighbour of a refused point too, so "the rest is stored" is not assumed). To
//! read another kind of partial write, add a [`Partial`] variant and how to find its lines.

use crate::sinks::influx::refusal::{split_unescaped, unescape};
use std::collections::HashSet;

/// What a partial-write answer says, when it names no line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partial {
    /// Points older than the retention policy's duration: the `dropped` oldest lines.
    Retention { dropped: usize },
    /// New values of `tag` on `measurement` past `max-values-per-tag`.
    MaxValues { measurement: String, tag: String, dropped: usize },
}

impl Partial {
    /// Reads InfluxDB's error text (`error_text` of the body); None for any other answer.
    pub fn parse(err: &str) -> Option<Partial> {
        let rest = err.strip_prefix("partial write: ")?;
        let dropped = rest.rsplit_once(" dropped=")?.1.trim().parse().ok()?;
        if rest.starts_with("points beyond retention policy") {
            return Some(Partial::Retention { dropped });
        }
        let limit = rest.strip_prefix("max-values-per-tag limit exceeded")?;
        let measurement = quoted_after(limit, "measurement=")?;
        let tag = quoted_after(limit, "tag=")?;
        Some(Partial::MaxValues { measurement, tag, dropped })
    }
}

/// The Go-quoted (`%q`) string after `key`: `measurement="temp"` → `temp`.
fn quoted_after(s: &str, key: &str) -> Option<String> {
    let rest = s.split_once(key)?.1.strip_prefix('"')?;
    let (mut out, mut chars) = (String::new(), rest.chars());
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    None
}

/// The timestamp of a line (its last space-separated part), if it has one.
fn time_of(line: &str) -> Option<i64> {
    line.trim_end_matches('\n').rsplit(' ').next()?.parse().ok()
}

/// The indices of the `n` oldest lines, when the oldest `n` are set apart from the rest by their
/// time (retention drops by time: lines of one timestamp go together); None otherwise.
pub fn oldest(lines: &[&str], n: usize) -> Option<Vec<usize>> {
    let mut timed: Vec<(i64, usize)> = lines.iter().enumerate().map(|(i, l)| time_of(l).map(|t| (t, i))).collect::<Option<_>>()?;
    if n == 0 || n > timed.len() {
        return None;
    }
    timed.sort_unstable();
    if timed.get(n).is_some_and(|&(t, _)| t == timed[n - 1].0) {
        return None;
    }
    let mut out: Vec<usize> = timed[..n].iter().map(|&(_, i)| i).collect();
    out.sort_unstable();
    Some(out)
}

/// The value of tag `key` on `line` when it is a point of `measurement`.
pub fn tag_value(line: &str, measurement: &str, key: &str) -> Option<String> {
    let series = split_unescaped(line, ' ').into_iter().next()?;
    let mut parts = split_unescaped(series, ',').into_iter();
    if unescape(parts.next()?) != measurement {
        return None;
    }
    parts.find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (unescape(k) == key).then(|| unescape(v))
    })
}

/// `SHOW TAG VALUES` of `key` on `measurement` restricted to `values`.
pub fn show_values_query(measurement: &str, key: &str, values: &HashSet<String>) -> String {
    let ident = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let lit = |s: &str| format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"));
    let mut sorted: Vec<&String> = values.iter().collect();
    sorted.sort();
    let cond: Vec<String> = sorted.iter().map(|v| format!("{} = {}", ident(key), lit(v))).collect();
    format!("SHOW TAG VALUES FROM {} WITH KEY = {} WHERE {}", ident(measurement), ident(key), cond.join(" OR "))
}

/// The values in a `SHOW TAG VALUES` answer (`{"results":[{"series":[{"values":[["k","v"]]}]}]}`).
pub fn values_in(answer: &serde_json::Value) -> HashSet<String> {
    let series = answer.pointer("/results/0/series").and_then(|s| s.as_array()).cloned().unwrap_or_default();
    series
        .iter()
        .filter_map(|s| s.get("values").and_then(|v| v.as_array()))
        .flatten()
        .filter_map(|row| row.get(1).and_then(|v| v.as_str()).map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_as_influxd_1_6_writes_them() {
        // Both texts as influxd 1.6.7 answered them (max-values-per-tag = 3; a 2 h policy).
        let e = r#"partial write: max-values-per-tag limit exceeded (5/3): measurement="temp" tag="device" value="d6" dropped=2"#;
        assert_eq!(Partial::parse(e), Some(Partial::MaxValues { measurement: "temp".into(), tag: "device".into(), dropped: 2 }));
        assert_eq!(Partial::parse("partial write: points beyond retention policy dropped=1"), Some(Partial::Retention { dropped: 1 }));
        assert_eq!(Partial::parse("partial write: unable to parse 'x': missing fields dropped=1"), None);
        assert_eq!(Partial::parse("field type conflict"), None);
        let e = r#"partial write: max-values-per-tag limit exceeded (5/3): measurement="a \"b\"" tag="c" value="v" dropped=7"#;
        assert_eq!(Partial::parse(e), Some(Partial::MaxValues { measurement: "a \"b\"".into(), tag: "c".into(), dropped: 7 }));
    }

    #[test]
    fn the_oldest_lines_are_found_only_when_their_time_sets_them_apart() {
        let lines = ["m f=1 30\n", "m f=1 10\n", "m f=1 20\n", "m f=1 10\n"];
        assert_eq!(oldest(&lines, 2), Some(vec![1, 3]));
        assert_eq!(oldest(&lines, 3), Some(vec![1, 2, 3]));
        assert_eq!(oldest(&lines, 1), None, "two lines share the oldest time");
        assert_eq!(oldest(&lines, 5), None);
        assert_eq!(oldest(&["m f=1\n"], 1), None, "a line without a time");
    }

    #[test]
    fn tag_values_are_unescaped_and_queries_escaped() {
        assert_eq!(tag_value("temperature,host=h,device=nvme\\ 1 celsius=1 5\n", "temperature", "device"), Some("nvme 1".into()));
        assert_eq!(tag_value("power,host=h,device=x w=1 5\n", "temperature", "device"), None);
        assert_eq!(tag_value("temperature,host=h w=1 5\n", "temperature", "device"), None);
        let q = show_values_query("temperature", "device", &HashSet::from(["a'b".to_string(), "c".to_string()]));
        assert_eq!(q, r#"SHOW TAG VALUES FROM "temperature" WITH KEY = "device" WHERE "device" = 'a\'b' OR "device" = 'c'"#);
        let answer =
            serde_json::json!({"results":[{"statement_id":0,"series":[{"name":"t","columns":["key","value"],"values":[["device","d1"],["device","d4"]]}]}]});
        assert_eq!(values_in(&answer), HashSet::from(["d1".to_string(), "d4".to_string()]));
        assert_eq!(values_in(&serde_json::json!({"results":[{"statement_id":0}]})), HashSet::new());
    }
}
