//! Tolerant JSON field readers used by both the nvme-cli and smartctl parsers.
//!
//! Tool versions disagree on how a number is written, so every reader accepts each form seen in
//! real captures (tests/fixtures/captures/PROVENANCE.md, docs/sources-and-drives.md §6.3):
//! - bare integers, possibly > u64 (nvme-cli ≥ 2.4 prints 128-bit counters as JSON numbers);
//! - strings (nvme-cli 2.0–2.3), locale-grouped in 2.3 (`"1,234"`, `"1.234.567"`, `"1 234"`);
//! - `"%Lf"` decimal strings (`"4974.000000"`, nvme-cli 2.1–2.1.2) and floats (`310.0`);
//! - `"0x1f"` hex.
//!
//! A value that is not a whole number (`"12.5"`), is negative, or is ambiguous (`"1.234"`: a
//! decimal point or a German thousands separator?) is a [`FieldProblem`], never guessed. Readers
//! return `Result<Option<_>, FieldProblem>`: `Ok(None)` when the key is absent. Add a reader here
//! rather than special-casing a parser.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// A JSON object kept as raw text per key, so big integers are not rounded through f64.
pub(crate) type RawObject = BTreeMap<String, Box<RawValue>>;

/// A field a parser could not read: it is left out of the result, and this says why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldProblem {
    /// JSON key path as the tool printed it (`power_on_hours`, `user_capacity.bytes`).
    pub field: String,
    /// The value as printed (JSON text).
    pub raw: String,
    /// Why it was not used.
    pub reason: String,
}

impl fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "field `{}` = {} left out: {}; save the output as a fixture and extend the parser", self.field, self.raw, self.reason)
    }
}

/// Per-field problems collected while parsing one output.
#[derive(Debug, Default)]
pub(crate) struct Problems(pub Vec<FieldProblem>);

impl Problems {
    /// The value, or `None` with the problem recorded.
    pub(crate) fn take<T>(&mut self, r: Result<Option<T>, FieldProblem>) -> Option<T> {
        match r {
            Ok(v) => v,
            Err(p) => {
                self.0.push(p);
                None
            }
        }
    }
}

fn problem(field: &str, raw: &str, reason: impl Into<String>) -> FieldProblem {
    FieldProblem { field: field.to_string(), raw: raw.trim().to_string(), reason: reason.into() }
}

/// A whole non-negative number in any of the spellings above. `Err` says why not.
pub(crate) fn u128_from_text(text: &str) -> Result<u128, String> {
    let t = text.trim();
    let t = t.strip_prefix('"').and_then(|s| s.strip_suffix('"')).unwrap_or(t).trim();
    if t.is_empty() {
        return Err("empty".into());
    }
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u128::from_str_radix(hex, 16).map_err(|e| format!("not hex: {e}"));
    }
    if t.starts_with('-') {
        return Err("negative".into());
    }
    // JSON exponent forms (`4.974e3`) come from floats; take them through f64 only if exact.
    if t.contains(['e', 'E']) {
        let f: f64 = t.parse().map_err(|_| "not a number".to_string())?;
        return whole_f64(f);
    }
    // Separators a locale may have inserted: , ' space, NBSP, narrow NBSP. `.` is handled below.
    let kept: String = t.chars().filter(|c| !matches!(c, ',' | '\'' | ' ' | '\u{a0}' | '\u{202f}')).collect();
    let grouped = kept.len() != t.len();
    let dots = kept.matches('.').count();
    let digits = match dots {
        0 => kept,
        // One dot: a decimal point (`"4974.000000"`, `310.0`). Whole only if the fraction is
        // zeros; `1.234` could be a de_DE grouping of 1234 or 1.234: refuse rather than guess.
        1 if !grouped => {
            let (int, frac) = kept.split_once('.').unwrap_or((&kept, ""));
            if frac.bytes().all(|b| b == b'0') {
                int.to_string()
            } else if frac.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("not a whole number (fraction .{frac}) or an ambiguous locale grouping"));
            } else {
                return Err("not a number".into());
            }
        }
        // Several dots: only a valid grouping (`1.234.567`) is accepted.
        _ => {
            let groups: Vec<&str> = kept.split('.').collect();
            let valid = !grouped && !groups[0].is_empty() && groups[0].len() <= 3 && groups[1..].iter().all(|g| g.len() == 3);
            if !valid {
                return Err("not a number (mixed or misplaced separators)".into());
            }
            groups.concat()
        }
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("not a number".into());
    }
    digits.parse().map_err(|_| "out of range (> 2^128)".into())
}

fn whole_f64(f: f64) -> Result<u128, String> {
    if !f.is_finite() || f < 0.0 {
        return Err("not a non-negative number".into());
    }
    if f.fract() != 0.0 {
        return Err(format!("not a whole number ({f})"));
    }
    // Above 2^53 a double cannot say which integer it was.
    if f > 9_007_199_254_740_992.0 {
        return Err("float above 2^53: digits lost".into());
    }
    Ok(f as u128)
}

/// A whole number from a raw JSON value; `null` counts as absent.
fn raw_number(field: &str, raw: &str) -> Result<Option<u128>, FieldProblem> {
    if raw.trim() == "null" {
        return Ok(None);
    }
    u128_from_text(raw).map(Some).map_err(|why| problem(field, raw, why))
}

/// Narrows a whole number to `T`, or a problem naming the range.
fn fit<T: TryFrom<u128>>(field: &str, raw: &str, v: u128) -> Result<T, FieldProblem> {
    T::try_from(v).map_err(|_| problem(field, raw, format!("out of range for {}", std::any::type_name::<T>())))
}

/// `key` of a raw object as a whole number of type `T`.
pub(crate) fn raw_num<T: TryFrom<u128>>(obj: &RawObject, key: &str) -> Result<Option<T>, FieldProblem> {
    let Some(raw) = obj.get(key) else {
        return Ok(None);
    };
    match raw_number(key, raw.get())? {
        Some(v) => fit(key, raw.get(), v).map(Some),
        None => Ok(None),
    }
}

pub(crate) fn raw_value(obj: &RawObject, key: &str) -> Option<Value> {
    obj.get(key).and_then(|raw| serde_json::from_str(raw.get()).ok())
}

/// A whole number from a parsed value (number or numeric string), named `field` in problems.
pub(crate) fn num_of<T: TryFrom<u128>>(field: &str, v: &Value) -> Result<Option<T>, FieldProblem> {
    let raw = v.to_string();
    let n = match v {
        Value::Null => return Ok(None),
        Value::Number(n) => match n.as_u64() {
            Some(u) => u128::from(u),
            None => match n.as_f64() {
                Some(f) => whole_f64(f).map_err(|why| problem(field, &raw, why))?,
                None => return Err(problem(field, &raw, "not a number")),
            },
        },
        Value::String(s) => u128_from_text(s).map_err(|why| problem(field, &raw, why))?,
        Value::Bool(b) => u128::from(*b),
        _ => return Err(problem(field, &raw, "not a number")),
    };
    fit(field, &raw, n).map(Some)
}

/// `obj.key` as a whole number; `path` names the object in problems (`""` for the root).
pub(crate) fn field_num<T: TryFrom<u128>>(obj: &Value, path: &str, key: &str) -> Result<Option<T>, FieldProblem> {
    match obj.get(key) {
        None => Ok(None),
        Some(v) => num_of(&join(path, key), v),
    }
}

/// A signed whole number (temperatures in °C may be negative); floats must be whole.
pub(crate) fn field_i64(obj: &Value, path: &str, key: &str) -> Result<Option<i64>, FieldProblem> {
    let Some(v) = obj.get(key) else {
        return Ok(None);
    };
    let field = join(path, key);
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15).map(|f| f as i64))
            .map(Some)
            .ok_or_else(|| problem(&field, &v.to_string(), "not a whole number")),
        Value::String(s) => {
            let (neg, body) = match s.trim().strip_prefix('-') {
                Some(b) => (true, b),
                None => (false, s.trim()),
            };
            let n = u128_from_text(body).map_err(|why| problem(&field, &v.to_string(), why))?;
            let n = i64::try_from(n).map_err(|_| problem(&field, &v.to_string(), "out of range for i64"))?;
            Ok(Some(if neg { -n } else { n }))
        }
        _ => Err(problem(&field, &v.to_string(), "not a number")),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

pub(crate) fn field_str(obj: &Value, key: &str) -> Option<String> {
    match obj.get(key)? {
        Value::String(s) => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_in_every_spelling() {
        assert_eq!(u128_from_text("1"), Ok(1));
        assert_eq!(u128_from_text("\"1,234\""), Ok(1234));
        assert_eq!(u128_from_text("\"1.234.567\""), Ok(1_234_567));
        assert_eq!(u128_from_text("\"1 234 567\""), Ok(1_234_567));
        assert_eq!(u128_from_text("\"1\u{202f}234\""), Ok(1234));
        assert_eq!(u128_from_text("0x410e"), Ok(0x410e));
        assert_eq!(u128_from_text("340282366920938463463374607431768211455"), Ok(u128::MAX));
    }

    #[test]
    fn a_decimal_point_is_not_a_thousands_separator() {
        // nvme-cli 2.1.x "%Lf" strings and float JSON numbers (issue 17).
        assert_eq!(u128_from_text("\"4974.000000\""), Ok(4974));
        assert_eq!(u128_from_text("310.0"), Ok(310));
        assert_eq!(u128_from_text("\"9898518.000000\""), Ok(9_898_518));
        assert_eq!(u128_from_text("4.974e3"), Ok(4974));
        assert_eq!(u128_from_text("\"0.000000\""), Ok(0));
    }

    #[test]
    fn unreadable_numbers_are_errors_not_guesses() {
        assert!(u128_from_text("-1").is_err());
        assert!(u128_from_text("\"\"").is_err());
        assert!(u128_from_text("\"12.5\"").is_err());
        assert!(u128_from_text("\"1.234\"").is_err()); // de_DE 1234 or C 1.234: ambiguous
        assert!(u128_from_text("\"1,234.000000\"").is_err());
        assert!(u128_from_text("\"1.23.4\"").is_err());
        assert!(u128_from_text("1e40").is_err()); // above 2^53 as a float
        assert!(u128_from_text("\"n/a\"").is_err());
        assert!(u128_from_text("340282366920938463463374607431768211456").is_err());
    }

    #[test]
    fn problems_name_the_field_and_the_raw_text() {
        let obj: RawObject = serde_json::from_str(r#"{"a": "12.5", "b": 300, "c": null}"#).unwrap_or_default();
        let e = raw_num::<u64>(&obj, "a").err();
        assert_eq!(e.map(|p| (p.field, p.raw)), Some(("a".to_string(), "\"12.5\"".to_string())));
        let e = raw_num::<u8>(&obj, "b").err().map(|p| p.reason);
        assert_eq!(e.as_deref(), Some("out of range for u8"));
        assert_eq!(raw_num::<u8>(&obj, "c"), Ok(None));
        assert_eq!(raw_num::<u8>(&obj, "missing"), Ok(None));
        let v: Value = serde_json::from_str(r#"{"t": -5, "f": 310.0, "s": "-7"}"#).unwrap_or(Value::Null);
        assert_eq!(field_i64(&v, "", "t"), Ok(Some(-5)));
        assert_eq!(field_i64(&v, "", "f"), Ok(Some(310)));
        assert_eq!(field_i64(&v, "", "s"), Ok(Some(-7)));
        assert_eq!(field_num::<u16>(&v, "x", "f"), Ok(Some(310)));
    }
}
