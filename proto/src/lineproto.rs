//! InfluxDB line-protocol encoding, pure and allocation-light. Written here rather than taken from
//! `influxdb-line-protocol` because InfluxDB 1.x rejects that crate's unsigned `u` suffix and it
//! formats NaN/inf into lines the server refuses; here such values cannot be built at all.
//! Add a field type by adding a [`FieldValue`] variant and its arm in [`FieldValue::write`].

use std::fmt::Write as _;

/// A field value as InfluxDB 1.x understands it (no unsigned type: see `docs/conventions.md` §1).
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    Float(f64),
    Integer(i64),
    Str(String),
    Bool(bool),
}

/// Why a tag value cannot be stored exactly as given. InfluxDB 1.x refuses every escaping of a
/// value that ends in a backslash (`k=a\\` and `k=a\\\\` alike: `invalid tag format`, verified on
/// 1.6.7), and line breaks would be stored as the two characters `\n`; anything else (spaces,
/// commas, `=`, quotes, inner backslashes, any Unicode) round-trips exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TagValueProblem {
    #[error("is empty (line protocol cannot carry an empty tag value)")]
    Empty,
    #[error("ends in a backslash, which InfluxDB 1.x refuses however it is escaped; remove or replace the trailing `\\`")]
    TrailingBackslash,
    #[error("contains control characters (line breaks, tabs, ...), which cannot be stored as given")]
    Control,
}

/// Whether `v` can be stored as a tag value exactly, character for character. Pure, cheap (a byte
/// scan for ASCII): the collector checks every tag of every point with it and the agent's
/// `check-config` checks its labels and id with it, so a value is refused up front, with its key
/// named, instead of making InfluxDB refuse every point that carries it.
pub fn check_tag_value(v: &str) -> Result<(), TagValueProblem> {
    if v.is_empty() {
        return Err(TagValueProblem::Empty);
    }
    let control = if v.is_ascii() { v.bytes().any(|b| b.is_ascii_control()) } else { v.chars().any(char::is_control) };
    if control {
        return Err(TagValueProblem::Control);
    }
    if v.ends_with('\\') {
        return Err(TagValueProblem::TrailingBackslash);
    }
    Ok(())
}

/// Errors that make a point unencodable. Each names the measurement and key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LineError {
    #[error("{measurement}: field `{field}` is {value}, which InfluxDB cannot store; drop the sample or fix the sensor")]
    NotFinite { measurement: String, field: String, value: f64 },
    #[error("{measurement}: point has no fields; a point needs at least one field")]
    NoFields { measurement: String },
    #[error("{measurement}: key `{key}` is empty or reserved (`time`, names starting with `_`)")]
    BadKey { measurement: String, key: String },
    #[error("measurement name is empty")]
    NoMeasurement,
}

/// One point: measurement, tags (kept sorted by key, as InfluxDB advises), fields, ns timestamp.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub measurement: String,
    pub tags: Vec<(String, String)>,
    pub fields: Vec<(String, FieldValue)>,
    pub time_ns: i64,
}

impl Point {
    pub fn new(measurement: impl Into<String>, time_ns: i64) -> Self {
        Point { measurement: measurement.into(), tags: Vec::new(), fields: Vec::new(), time_ns }
    }

    /// Adds a tag; an empty value is skipped, since line protocol cannot carry empty tag values.
    pub fn tag(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let value = value.into();
        if !value.is_empty() {
            self.tags.push((key.into(), value));
        }
        self
    }

    pub fn field(mut self, key: impl Into<String>, value: FieldValue) -> Self {
        self.fields.push((key.into(), value));
        self
    }

    pub fn float(self, key: impl Into<String>, v: f64) -> Self {
        self.field(key, FieldValue::Float(v))
    }

    pub fn int(self, key: impl Into<String>, v: i64) -> Self {
        self.field(key, FieldValue::Integer(v))
    }

    /// Unsigned counters: InfluxDB 1.x has no unsigned type. The field stays an integer whatever
    /// the value (a float for large values would conflict with the field's type and make InfluxDB
    /// refuse the point): values above i64::MAX, which no real counter reaches, saturate.
    pub fn uint(self, key: impl Into<String>, v: u64) -> Self {
        self.field(key, FieldValue::Integer(i64::try_from(v).unwrap_or(i64::MAX)))
    }

    pub fn string(self, key: impl Into<String>, v: impl Into<String>) -> Self {
        self.field(key, FieldValue::Str(v.into()))
    }

    pub fn boolean(self, key: impl Into<String>, v: bool) -> Self {
        self.field(key, FieldValue::Bool(v))
    }

    /// Encodes the point as one line (with the trailing `\n`) appended to `out`.
    pub fn write_line(&self, out: &mut String) -> Result<(), LineError> {
        let m = &self.measurement;
        if m.is_empty() {
            return Err(LineError::NoMeasurement);
        }
        if self.fields.is_empty() {
            return Err(LineError::NoFields { measurement: m.clone() });
        }
        let start = out.len();
        let result = self.write_inner(out);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    fn write_inner(&self, out: &mut String) -> Result<(), LineError> {
        let m = &self.measurement;
        escape(out, m, &[',', ' ']);
        let mut tags: Vec<&(String, String)> = self.tags.iter().collect();
        tags.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        for (k, v) in tags {
            check_key(m, k)?;
            out.push(',');
            escape(out, k, &[',', '=', ' ']);
            out.push('=');
            escape(out, v, &[',', '=', ' ']);
        }
        for (i, (k, v)) in self.fields.iter().enumerate() {
            check_key(m, k)?;
            out.push(if i == 0 { ' ' } else { ',' });
            escape(out, k, &[',', '=', ' ']);
            out.push('=');
            v.write(m, k, out)?;
        }
        out.push(' ');
        push_int(out, self.time_ns);
        out.push('\n');
        Ok(())
    }
}

impl FieldValue {
    fn write(&self, measurement: &str, key: &str, out: &mut String) -> Result<(), LineError> {
        match self {
            FieldValue::Float(f) => {
                if !f.is_finite() {
                    return Err(LineError::NotFinite { measurement: measurement.into(), field: key.into(), value: *f });
                }
                // Rust prints the shortest representation that round-trips, and integral floats
                // without a dot ("3"), which InfluxDB reads as a float because there is no `i`.
                push_float(out, *f);
            }
            FieldValue::Integer(i) => {
                push_int(out, *i);
                out.push('i');
            }
            FieldValue::Str(s) => {
                out.push('"');
                escape(out, s, &['"', '\\']);
                out.push('"');
            }
            FieldValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        }
        Ok(())
    }
}

pub(crate) fn check_key(measurement: &str, key: &str) -> Result<(), LineError> {
    if key.is_empty() || key == "time" || key.starts_with('_') {
        return Err(LineError::BadKey { measurement: measurement.into(), key: key.into() });
    }
    Ok(())
}

/// Escapes `special` with a backslash. Text from drives and tools may hold line breaks, which would
/// end the line: they are written as the two characters `\n` / `\r`, so every value is encodable
/// (the text stays readable; a batch is never refused for it). In tags (`special` holds a space) a
/// trailing backslash is doubled, or it would escape the separator after it.
pub(crate) fn escape(out: &mut String, s: &str, special: &[char]) {
    // Every special character is ASCII, so a byte scan against a bit mask finds them (no char
    // decoding on the hot path).
    let mask = special.iter().filter(|c| c.is_ascii()).fold(1u128 << b'\n' | 1 << b'\r', |m, c| m | 1 << (*c as u32));
    let in_tag = special.contains(&' ');
    let plain = !s.bytes().any(|b| b < 128 && mask >> b & 1 == 1);
    if plain && !(in_tag && s.ends_with('\\')) {
        out.push_str(s);
        return;
    }
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => {
                if special.contains(&c) {
                    out.push('\\');
                }
                out.push(c);
            }
        }
    }
    if in_tag && s.ends_with('\\') && !special.contains(&'\\') {
        out.push('\\');
    }
}

/// Appends `f` as `format!("{f}")` would (shortest digits that round-trip exactly, no exponent), via
/// ryu, which is several times faster; ryu writes `3.0` for `3` and switches to an exponent outside
/// 1e-5..1e16, where Display is used instead. Where two shortest candidates exist, ryu may pick the
/// other last digit: the same f64 either way.
pub(crate) fn push_float(out: &mut String, f: f64) {
    // Integral readings (temperatures, counters) are common: print them as integers, as Display
    // does below 1e16 (-0.0 excluded: Display keeps its sign).
    if f.fract() == 0.0 && f.abs() < 1e15 && !(f == 0.0 && f.is_sign_negative()) {
        push_int(out, f as i64);
        return;
    }
    let mut buf = ryu::Buffer::new();
    let s = buf.format_finite(f);
    if s.contains('e') {
        let _ = write!(out, "{f}");
    } else {
        out.push_str(s.strip_suffix(".0").unwrap_or(s));
    }
}

/// Appends an integer (itoa: no formatter machinery).
pub(crate) fn push_int(out: &mut String, i: impl itoa::Integer) {
    out.push_str(itoa::Buffer::new().format(i));
}

/// Encodes many points into one body; points that cannot be encoded are returned with their error.
pub fn encode_all(points: &[Point]) -> (String, Vec<LineError>) {
    let mut body = String::with_capacity(points.len() * 96);
    let mut errors = Vec::new();
    for p in points {
        if let Err(e) = p.write_line(&mut body) {
            errors.push(e);
        }
    }
    (body, errors)
}

#[cfg(test)]
mod tests {

    #[test]
    fn push_float_is_display_exact_and_as_short() {
        let mut specials =
            vec![0.0, -0.0, 1.0, 3.0, 0.1, 49.85, 1e-5, 1e-6, 1e15, 1e16, 1e17, 1e21, 123456789.125, f64::MIN_POSITIVE, f64::MAX, f64::MIN, 5e-324];
        // A deterministic spread over all exponents and mantissas (xorshift bit patterns).
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            specials.push(f64::from_bits(x));
            specials.push((x % 100_000) as f64 / 100.0);
        }
        let mut differ = 0;
        for f in specials.into_iter().filter(|f| f.is_finite()) {
            let mut s = String::new();
            push_float(&mut s, f);
            let display = format!("{f}");
            // The same number (exact round trip), as short as Display's, never an exponent; the
            // last digit may differ where two shortest candidates exist (ryu takes the nearer).
            assert_eq!(s.parse::<f64>().map(f64::to_bits), Ok(f.to_bits()), "{s} for bits {:#x}", f.to_bits());
            assert_eq!(s.len(), display.len(), "{s} vs {display}");
            assert!(!s.contains('e'));
            differ += usize::from(s != display);
        }
        assert!(differ < 100, "{differ} texts differ from Display");
    }
    use super::*;

    fn line(p: &Point) -> String {
        let mut s = String::new();
        p.write_line(&mut s).unwrap();
        s
    }

    #[test]
    fn escapes_every_element_like_the_reference() {
        // The example verified on InfluxDB 1.6.7 (docs/conventions.md §2).
        let p = Point::new("esc m,x", 5).tag("tag k=1", "va,l u=e").string("fi=eld", "say \"hi\" \\ back");
        assert_eq!(line(&p), "esc\\ m\\,x,tag\\ k\\=1=va\\,l\\ u\\=e fi\\=eld=\"say \\\"hi\\\" \\\\ back\" 5\n");
    }

    #[test]
    fn types_and_tag_order() {
        let p = Point::new("power", 1_700_000_000_123_456_789)
            .tag("zone", "package-0")
            .tag("host", "a")
            .tag("empty", "")
            .float("watts", 12.5)
            .float("whole", 3.0)
            .int("count", -7)
            .uint("big", u64::MAX)
            .boolean("ok", true);
        assert_eq!(line(&p), "power,host=a,zone=package-0 watts=12.5,whole=3,count=-7i,big=9223372036854775807i,ok=true 1700000000123456789\n");
    }

    #[test]
    fn line_breaks_and_a_trailing_backslash_cannot_break_the_line() {
        let mut out = String::new();
        Point::new("event", 1).tag("device", "nvme0\n").tag("serial", "S1\\").string("message", "line 1\r\nline \"2\" \\ end").write_line(&mut out).unwrap();
        assert_eq!(out, "event,device=nvme0\\n,serial=S1\\\\ message=\"line 1\\r\\nline \\\"2\\\" \\\\ end\" 1\n");
        assert_eq!(out.matches('\n').count(), 1);
    }

    #[test]
    fn refuses_nan_inf_and_reserved_keys() {
        let mut out = String::from("keep\n");
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let err = Point::new("power", 1).float("watts", v).write_line(&mut out).unwrap_err();
            assert!(matches!(err, LineError::NotFinite { .. }), "{err}");
        }
        let err = Point::new("m", 1).float("time", 1.0).write_line(&mut out).unwrap_err();
        assert_eq!(err, LineError::BadKey { measurement: "m".into(), key: "time".into() });
        let err = Point::new("m", 1).tag("_x", "1").float("v", 1.0).write_line(&mut out).unwrap_err();
        assert!(matches!(err, LineError::BadKey { .. }));
        let err = Point::new("m", 1).write_line(&mut out).unwrap_err();
        assert_eq!(err, LineError::NoFields { measurement: "m".into() });
        // A refused point leaves nothing half-written behind.
        assert_eq!(out, "keep\n");
    }

    #[test]
    fn tag_values_are_storable_exactly_or_refused() {
        // Values written to InfluxDB 1.6.7 with this module's escaping and read back unchanged.
        for ok in ["a\\,b", "a\\ b", "a\\=b", "a\\\\b", "a\\b", "\\a", "é ü", "a\"b", "a'b", "x\\\\\\,y"] {
            assert_eq!(check_tag_value(ok), Ok(()), "{ok}");
        }
        assert_eq!(check_tag_value("end\\"), Err(TagValueProblem::TrailingBackslash));
        assert_eq!(check_tag_value("\\"), Err(TagValueProblem::TrailingBackslash));
        assert_eq!(check_tag_value("a\\\\"), Err(TagValueProblem::TrailingBackslash));
        assert_eq!(check_tag_value(""), Err(TagValueProblem::Empty));
        assert_eq!(check_tag_value("a\nb"), Err(TagValueProblem::Control));
        assert_eq!(check_tag_value("a\u{85}b"), Err(TagValueProblem::Control));
    }

    #[test]
    fn encode_all_keeps_good_points() {
        let pts = vec![Point::new("a", 1).float("v", 1.0), Point::new("b", 2).float("v", f64::NAN), Point::new("c", 3).int("v", 2)];
        let (body, errs) = encode_all(&pts);
        assert_eq!(body, "a v=1 1\nc v=2i 3\n");
        assert_eq!(errs.len(), 1);
    }
}
