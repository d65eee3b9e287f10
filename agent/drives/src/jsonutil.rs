//! Tolerant JSON field readers shared by the nvme-cli and smartctl parsers.
//!
//! Tool versions disagree on number vs string (nvme-cli 2.0–2.3 prints 128-bit counters as
//! strings, locale-grouped in 2.3; ≥ 2.4 prints bare numbers that may exceed u64 — hardware.md
//! §6.3), so every reader accepts both. Add a reader here rather than special-casing a parser.

use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;

/// A JSON object kept as raw text per key, so big integers are not rounded through f64.
pub(crate) type RawObject = BTreeMap<String, Box<RawValue>>;

/// Digits of an integer written as `123`, `"123"`, `"1,234"` (grouped), `"0x1f"`.
pub(crate) fn u128_from_text(text: &str) -> Option<u128> {
    let t = text.trim().trim_matches('"').trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u128::from_str_radix(hex, 16).ok();
    }
    // Thousands separators a locale may have inserted: , . ' space, NBSP, narrow NBSP.
    let digits: String = t
        .chars()
        .filter(|c| !matches!(c, ',' | '.' | '\'' | ' ' | '\u{a0}' | '\u{202f}'))
        .collect();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

pub(crate) fn raw_u128(obj: &RawObject, key: &str) -> Option<u128> {
    obj.get(key).and_then(|raw| u128_from_text(raw.get()))
}

pub(crate) fn raw_u64(obj: &RawObject, key: &str) -> Option<u64> {
    raw_u128(obj, key).and_then(|v| u64::try_from(v).ok())
}

pub(crate) fn raw_value(obj: &RawObject, key: &str) -> Option<Value> {
    obj.get(key)
        .and_then(|raw| serde_json::from_str(raw.get()).ok())
}

/// A non-negative integer from a number or a numeric string.
pub(crate) fn u64_of(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < 1.8e19)
                .map(|f| f as u64)
        }),
        Value::String(s) => u128_from_text(s).and_then(|x| u64::try_from(x).ok()),
        Value::Bool(b) => Some(u64::from(*b)),
        _ => None,
    }
}

pub(crate) fn field_u64(obj: &Value, key: &str) -> Option<u64> {
    obj.get(key).and_then(u64_of)
}

pub(crate) fn field_str(obj: &Value, key: &str) -> Option<String> {
    match obj.get(key)? {
        Value::String(s) => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

pub(crate) fn narrow<T: TryFrom<u64>>(v: Option<u64>) -> Option<T> {
    v.and_then(|x| T::try_from(x).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_in_every_spelling() {
        assert_eq!(u128_from_text("1"), Some(1));
        assert_eq!(u128_from_text("\"1,234\""), Some(1234));
        assert_eq!(u128_from_text("\"1.234.567\""), Some(1_234_567));
        assert_eq!(u128_from_text("0x410e"), Some(0x410e));
        assert_eq!(
            u128_from_text("340282366920938463463374607431768211455"),
            Some(u128::MAX)
        );
        assert_eq!(u128_from_text("-1"), None);
        assert_eq!(u128_from_text("\"\""), None);
    }
}
