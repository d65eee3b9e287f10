//! What InfluxDB's refusals say: the lines a 400 answer names (`unable to parse`, field type
//! conflicts), the reason kept with each dead letter, and how much of them a log shows. To read a
//! new kind of refusal, teach [`offending_indices`] its wording (with a test in `writer_tests.rs`).

/// How many offending lines a rejection log shows, and how much of each: a conflict can hit every
/// line of a 5,000-line request, and one line can be long.
pub(crate) const SHOWN_LINES: usize = 3;
pub(crate) const SHOWN_CHARS: usize = 240;

/// The lines of a request that InfluxDB's 400 answer blames.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Offending {
    /// How many lines of the request match what the answer names.
    pub count: usize,
    /// The first [`SHOWN_LINES`] of them, each cut to [`SHOWN_CHARS`] characters.
    pub shown: Vec<String>,
}

/// Finds the lines of `lines` that InfluxDB 1.x's 400 answer `body` names: `unable to parse
/// '<line>': ...` quotes them; `field type conflict: input field "f" on measurement "m" is type t`
/// names a measurement, a field and the type sent, which the matching lines carry. Other
/// rejections (e.g. `points beyond retention policy`) name no line: `count` is then 0.
pub fn offending_lines(body: &str, lines: &[&str]) -> Offending {
    let mut out = Offending::default();
    for line in offending_indices(body, lines).into_iter().map(|i| lines[i].trim_end_matches('\n')) {
        out.count += 1;
        if out.shown.len() < SHOWN_LINES {
            out.shown.push(match line.char_indices().nth(SHOWN_CHARS) {
                Some((cut, _)) => format!("{}…", &line[..cut]),
                None => line.to_owned(),
            });
        }
    }
    out
}

/// The text of InfluxDB's answer: the 1.x body is `{"error":"..."}`, with the quotes inside
/// JSON-escaped.
pub fn error_text(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| body.to_owned())
}

/// Indices of the lines of `lines` that the 400 answer `body` names (see [`offending_lines`]).
pub fn offending_indices(body: &str, lines: &[&str]) -> Vec<usize> {
    let err = error_text(body);
    let conflict = parse_conflict(&err);
    lines
        .iter()
        .map(|l| l.trim_end_matches('\n'))
        .enumerate()
        .filter(|(_, line)| {
            err.contains(&format!("unable to parse '{line}'"))
                || conflict.as_ref().is_some_and(|(field, measurement, kind)| line_has_field_of_type(line, measurement, field, kind))
        })
        .map(|(i, _)| i)
        .collect()
}

/// What the answer says about one line it names: its own `unable to parse '<line>': why` part, or
/// the whole answer (a type conflict names the field, not the line).
pub(crate) fn reason_for(err: &str, line: &str) -> String {
    let head = format!("unable to parse '{line}'");
    match err.split('\n').find(|part| part.contains(&head)) {
        Some(part) => part.trim_start_matches("partial write: ").to_string(),
        None => err.to_string(),
    }
}

/// (field, measurement, type sent) from `input field "f" on measurement "m" is type t`.
fn parse_conflict(err: &str) -> Option<(String, String, String)> {
    let rest = err.split("input field \"").nth(1)?;
    let (field, rest) = rest.split_once("\" on measurement \"")?;
    let (measurement, rest) = rest.split_once("\" is type ")?;
    let kind = rest.split(|c: char| !c.is_ascii_alphanumeric()).next()?;
    Some((field.to_owned(), measurement.to_owned(), kind.to_owned()))
}

/// Splits `s` at unescaped `sep` outside double quotes (line protocol's escaping).
pub(crate) fn split_unescaped(s: &str, sep: char) -> Vec<&str> {
    let (mut parts, mut start, mut escaped, mut quoted) = (Vec::new(), 0, false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            c if c == sep && !quoted => {
                parts.push(&s[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// A line-protocol name or tag value with its backslash escapes removed.
pub(crate) fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// Whether `line` is a point of `measurement` whose field `field` has a value of InfluxDB type
/// `kind` (`float`, `integer`, `unsigned`, `string`, `boolean`).
fn line_has_field_of_type(line: &str, measurement: &str, field: &str, kind: &str) -> bool {
    let sections = split_unescaped(line, ' ');
    let (Some(series), Some(fields)) = (sections.first(), sections.get(1)) else { return false };
    if unescape(split_unescaped(series, ',')[0]) != measurement {
        return false;
    }
    split_unescaped(fields, ',').into_iter().any(|kv| {
        let k = split_unescaped(kv, '=')[0];
        let Some(v) = kv.get(k.len() + 1..) else { return false };
        let sent = if v.starts_with('"') {
            "string"
        } else if matches!(v, "t" | "T" | "true" | "True" | "TRUE" | "f" | "F" | "false" | "False" | "FALSE") {
            "boolean"
        } else if v.strip_suffix('i').is_some_and(|n| n.parse::<i64>().is_ok()) {
            "integer"
        } else if v.strip_suffix('u').is_some_and(|n| n.parse::<u64>().is_ok()) {
            "unsigned"
        } else {
            "float"
        };
        unescape(k) == field && sent == kind
    })
}
