//! InfluxDB line-protocol encoding, pure and allocation-light. Written here rather than taken from
//! `influxdb-line-protocol` because InfluxDB 1.x rejects that crate's unsigned `u` suffix and it
//! formats NaN/inf into lines the server refuses; here such values cannot be built at all.
//! Add a field type by adding a [`FieldValue`] variant and its arm in [`FieldValue::write`].

use std::fmt::Write as _;

/// A field value as InfluxDB 1.x understands it (no unsigned type: see `influx-grafana-ansible.md` §1).
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    Float(f64),
    Integer(i64),
    Str(String),
    Bool(bool),
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
    #[error("{measurement}: `{key}` contains a newline, which line protocol cannot carry")]
    Newline { measurement: String, key: String },
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

    /// Unsigned counters: InfluxDB 1.x has no unsigned type, so values above i64::MAX become floats.
    pub fn uint(self, key: impl Into<String>, v: u64) -> Self {
        match i64::try_from(v) {
            Ok(i) => self.field(key, FieldValue::Integer(i)),
            Err(_) => self.field(key, FieldValue::Float(v as f64)),
        }
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
        check_text(m, m, m)?;
        escape(out, m, &[',', ' ']);
        let mut tags: Vec<&(String, String)> = self.tags.iter().collect();
        tags.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        for (k, v) in tags {
            check_key(m, k)?;
            check_text(m, k, v)?;
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
        let _ = write!(out, " {}", self.time_ns);
        out.push('\n');
        Ok(())
    }
}

impl FieldValue {
    fn write(&self, measurement: &str, key: &str, out: &mut String) -> Result<(), LineError> {
        match self {
            FieldValue::Float(f) => {
                if !f.is_finite() {
                    return Err(LineError::NotFinite {
                        measurement: measurement.into(),
                        field: key.into(),
                        value: *f,
                    });
                }
                // Rust prints the shortest representation that round-trips, and integral floats
                // without a dot ("3"), which InfluxDB reads as a float because there is no `i`.
                let _ = write!(out, "{f}");
            }
            FieldValue::Integer(i) => {
                let _ = write!(out, "{i}i");
            }
            FieldValue::Str(s) => {
                check_text(measurement, key, s)?;
                out.push('"');
                escape(out, s, &['"', '\\']);
                out.push('"');
            }
            FieldValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        }
        Ok(())
    }
}

fn check_key(measurement: &str, key: &str) -> Result<(), LineError> {
    if key.is_empty() || key == "time" || key.starts_with('_') {
        return Err(LineError::BadKey { measurement: measurement.into(), key: key.into() });
    }
    Ok(())
}

fn check_text(measurement: &str, key: &str, text: &str) -> Result<(), LineError> {
    if text.contains(['\n', '\r']) {
        return Err(LineError::Newline { measurement: measurement.into(), key: key.into() });
    }
    Ok(())
}

fn escape(out: &mut String, s: &str, special: &[char]) {
    for c in s.chars() {
        if special.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
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
    use super::*;

    fn line(p: &Point) -> String {
        let mut s = String::new();
        p.write_line(&mut s).unwrap();
        s
    }

    #[test]
    fn escapes_every_element_like_the_reference() {
        // The example verified on InfluxDB 1.6.7 (influx-grafana-ansible.md §2).
        let p = Point::new("esc m,x", 5)
            .tag("tag k=1", "va,l u=e")
            .string("fi=eld", "say \"hi\" \\ back");
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
        assert_eq!(
            line(&p),
            "power,host=a,zone=package-0 watts=12.5,whole=3,count=-7i,big=18446744073709552000,ok=true 1700000000123456789\n"
        );
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
        let err = Point::new("m", 1).string("s", "a\nb").write_line(&mut out).unwrap_err();
        assert!(matches!(err, LineError::Newline { .. }));
        // A refused point leaves nothing half-written behind.
        assert_eq!(out, "keep\n");
    }

    #[test]
    fn encode_all_keeps_good_points() {
        let pts = vec![
            Point::new("a", 1).float("v", 1.0),
            Point::new("b", 2).float("v", f64::NAN),
            Point::new("c", 3).int("v", 2),
        ];
        let (body, errs) = encode_all(&pts);
        assert_eq!(body, "a v=1 1\nc v=2i 3\n");
        assert_eq!(errs.len(), 1);
    }
}
