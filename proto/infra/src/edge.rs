//! Hostile config values for the property tests of both binaries' config parsers (built for tests
//! and with the `test-support` feature only): every TOML type, the edges of each number type,
//! NaN-ish floats, durations past any clock, negative and malformed ones, and long strings. A
//! test sets each key of its config to each of these in turn, and to random combinations, and
//! checks that parsing never panics and every accepted duration is within a century. Add a value
//! here when a new kind of input broke a parser.

use toml::Value;

/// The values, each with a short name for failure messages.
pub fn values() -> Vec<(&'static str, Value)> {
    let s = |x: &str| Value::String(x.to_string());
    vec![
        ("huge years", s("500000000000y")),
        ("u64 seconds", s("18446744073709551615s")),
        ("past u64 ns", s("18446744073709551616ns")),
        ("i64 seconds", s("9223372036854775807s")),
        ("300 years", s("300y")),
        ("negative duration", s("-5s")),
        ("float duration", s("1e400s")),
        ("nan duration", s("NaN")),
        ("zero duration", s("0s")),
        ("one ns", s("1ns")),
        ("empty", s("")),
        ("blank", s("   ")),
        ("nul", s("\u{0}")),
        ("unicode", s("５秒")),
        ("long string", s(&"9".repeat(100_000))),
        ("long duration", s(&format!("{}s", "9".repeat(5000)))),
        ("i64 max", Value::Integer(i64::MAX)),
        ("i64 min", Value::Integer(i64::MIN)),
        ("minus one", Value::Integer(-1)),
        ("zero", Value::Integer(0)),
        ("nan", Value::Float(f64::NAN)),
        ("inf", Value::Float(f64::INFINITY)),
        ("-inf", Value::Float(f64::NEG_INFINITY)),
        ("f64 max", Value::Float(f64::MAX)),
        ("-0.0", Value::Float(-0.0)),
        ("true", Value::Boolean(true)),
        ("array", Value::Array(vec![Value::Integer(i64::MAX), s("500000000000y"), Value::Float(f64::NAN)])),
        ("empty table", Value::Table(toml::Table::new())),
    ]
}

/// Sets `value` at the dotted `key` of `doc` (`a.b.c`, creating tables on the way; `a[0].b`
/// addresses the first table of array `a`, created when missing).
pub fn set(doc: &mut toml::Table, key: &str, value: Value) {
    let mut parts = key.split('.').peekable();
    let mut table = doc;
    while let Some(part) = parts.next() {
        let (name, index) = match part.strip_suffix("[0]") {
            Some(n) => (n, true),
            None => (part, false),
        };
        if parts.peek().is_none() {
            table.insert(name.to_string(), value);
            return;
        }
        let entry = table.entry(name.to_string()).or_insert_with(|| {
            if index {
                Value::Array(vec![Value::Table(toml::Table::new())])
            } else {
                Value::Table(toml::Table::new())
            }
        });
        let next = match entry {
            Value::Array(a) => a.first_mut(),
            other => Some(other),
        };
        match next.and_then(Value::as_table_mut) {
            Some(t) => table = t,
            None => return,
        }
    }
}

pub use crate::duration::CENTURY;

/// What [`explore`] found: descriptions of failures, and how many documents were accepted.
#[derive(Debug, Default)]
pub struct Findings {
    pub failures: Vec<String>,
    pub accepted: usize,
}

/// Sets each of `keys` in `base` to each of [`values`], then `combos` random combinations of three
/// (seeded: a failure repeats), and hands each document's text to `parse`, which returns None
/// for a refused config and the accepted config's durations by key otherwise. A panic in `parse`,
/// or an accepted duration past [`CENTURY`], is a failure.
pub fn explore(keys: &[&str], base: &toml::Table, combos: usize, parse: &dyn Fn(&str) -> Option<Vec<(String, std::time::Duration)>>) -> Findings {
    use rand::{Rng, SeedableRng};
    let values = values();
    let mut found = Findings::default();
    let mut one = |doc: &toml::Table, what: String| {
        let text = match toml::to_string(doc) {
            Ok(t) => t,
            Err(e) => return found.failures.push(format!("{what}: cannot write the document: {e}")),
        };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| parse(&text))) {
            Err(_) => found.failures.push(format!("{what}: the parser panicked")),
            Ok(None) => {}
            Ok(Some(durations)) => match durations.into_iter().find(|(_, d)| *d > CENTURY) {
                Some((k, d)) => found.failures.push(format!("{what}: accepted {k} = {d:?}, past a century")),
                None => found.accepted += 1,
            },
        }
    };
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for key in keys {
        for (name, v) in &values {
            let mut doc = base.clone();
            set(&mut doc, key, v.clone());
            one(&doc, format!("{key} = {name}"));
        }
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(38);
    for _ in 0..combos {
        let mut doc = base.clone();
        let mut what = Vec::new();
        for _ in 0..3 {
            let key = keys[rng.random_range(0..keys.len())];
            let (name, v) = &values[rng.random_range(0..values.len())];
            set(&mut doc, key, v.clone());
            what.push(format!("{key} = {name}"));
        }
        one(&doc, what.join(", "));
    }
    std::panic::set_hook(hook);
    found
}
