//! Names of the stored tiers and the InfluxQL helpers that the rollup task (which writes them,
//! `rollup`) and the plans (which read them, `plan`) share: the hourly tier's tables and coverage
//! points (docs/schema.md, *Retention and rollups*), identifiers and tag conditions. A new table
//! of the hourly tier is named here and computed in `rollup::hourly`.

use std::collections::BTreeSet;

/// One hour in nanoseconds: the hourly tier's bucket.
pub const HOUR_NS: i64 = 3_600_000_000_000;
/// The coverage points (in `rollup_1h`): tag `table`, field `since_ns`.
pub const COVERAGE: &str = "wattflip_rollup_1h";
/// Each `power` series' hours (and the minute rollups' measurement whose recomputes mark hours).
pub const SERIES: &str = "power";
/// Per host and `budget` tier: the largest minute of the sum of its tier zones.
pub const HOST_POWER: &str = "host_power";
/// The group table of `label`.
pub fn group_table(label: &str) -> String {
    format!("group_power_{label}")
}

/// The start of the hour holding `t_ns`.
pub fn hour_of(t_ns: i64) -> i64 {
    t_ns.div_euclid(HOUR_NS) * HOUR_NS
}

/// InfluxQL identifier: double-quoted, inner quotes and backslashes escaped.
pub fn ident(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// `tag` equal to one of `values`: equality for one, an anchored regex of the escaped values for
/// several.
pub fn tag_condition(tag: &str, values: &BTreeSet<String>) -> String {
    condition(tag, values, false)
}

/// `tag` equal to none of `values` (the negation of [`tag_condition`]).
pub fn not_tag_condition(tag: &str, values: &BTreeSet<String>) -> String {
    condition(tag, values, true)
}

fn condition(tag: &str, values: &BTreeSet<String>, not: bool) -> String {
    if values.len() == 1 {
        let v = values.iter().next().map(String::as_str).unwrap_or_default();
        let op = if not { "!=" } else { "=" };
        return format!("{} {op} '{}'", ident(tag), v.replace('\\', "\\\\").replace('\'', "\\'"));
    }
    let alts: Vec<String> = values.iter().map(|v| regex_escape(v)).collect();
    let op = if not { "!~" } else { "=~" };
    format!("{} {op} /^(?:{})$/", ident(tag), alts.join("|"))
}

/// RE2 metacharacters and the literal's delimiter `/` escaped.
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$/".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_escape_and_negate() {
        let one: BTreeSet<String> = ["a'1".to_string()].into();
        let two: BTreeSet<String> = ["h.1".to_string(), "h/2".to_string()].into();
        assert_eq!(tag_condition("host", &one), "\"host\" = 'a\\'1'");
        assert_eq!(not_tag_condition("host", &two), "\"host\" !~ /^(?:h\\.1|h\\/2)$/");
        assert_eq!(not_tag_condition("scope", &one), "\"scope\" != 'a\\'1'");
        assert_eq!((hour_of(-1), hour_of(HOUR_NS + 5)), (-HOUR_NS, HOUR_NS));
        assert_eq!(group_table("rack"), "group_power_rack");
    }
}
