//! CSV shunt traces: a time column and a shunt-voltage column, read in large blocks and hand-parsed
//! from bytes (no per-line allocation). Tolerated: an optional header line, `#` comment lines, blank
//! lines, CRLF, `,` `;` or tab separators (detected on the first non-comment line), quoted cells, and a
//! decimal comma when the separator is `;` or tab. Errors name file, line and column. To accept another
//! dialect, extend [`CsvOptions`] and `split_fields`; keep the per-line path allocation-free.

use super::integrator::TimeBackwards;
use super::{RangeCollector, ShuntCircuit, TimedIntegrator, TraceSummary, DEFAULT_WINDOW};
use crate::error::TraceError;
use crate::units::{Nanos, UnixNanos, Volts, Watts};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Unit of the time column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeUnit {
    #[default]
    Seconds,
    Millis,
    Micros,
    Nanos,
}

impl TimeUnit {
    fn exp10(self) -> i32 {
        match self {
            TimeUnit::Seconds => 9,
            TimeUnit::Millis => 6,
            TimeUnit::Micros => 3,
            TimeUnit::Nanos => 0,
        }
    }
}

/// How to read a CSV trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CsvOptions {
    /// Unit of the time column (default seconds). Times may be negative (trigger-relative).
    pub time_unit: TimeUnit,
    /// 0-based index of the time column (default 0).
    pub time_column: usize,
    /// 0-based index of the shunt-voltage column, in volts (default 1).
    pub shunt_column: usize,
    /// UTC instant of `time = 0` in the file (e.g. the trigger), when known.
    pub time_origin: Option<UnixNanos>,
    /// Decimation window (default 1 ms).
    pub window: Nanos,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions { time_unit: TimeUnit::Seconds, time_column: 0, shunt_column: 1, time_origin: None, window: DEFAULT_WINDOW }
    }
}

/// A decimal number as parsed: `(-1)^neg · mant · 10^exp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Decimal {
    neg: bool,
    mant: u64,
    exp: i32,
}

/// Parse `[+-]digits[.digits][(e|E)[+-]digits]`, with `,` as the decimal point when `decimal_comma`.
/// Digits beyond 19 significant ones are dropped (the exponent is adjusted). `None` if malformed.
#[inline]
fn parse_decimal(s: &[u8], decimal_comma: bool) -> Option<Decimal> {
    let mut i = 0;
    let n = s.len();
    let mut neg = false;
    if i < n && (s[i] == b'-' || s[i] == b'+') {
        neg = s[i] == b'-';
        i += 1;
    }
    let mut mant: u64 = 0;
    let mut exp: i32 = 0;
    let mut digits = 0usize;
    let mut sig = 0usize;
    while i < n && s[i].is_ascii_digit() {
        if sig < 19 {
            mant = mant * 10 + u64::from(s[i] - b'0');
            if mant > 0 {
                sig += 1;
            }
        } else {
            exp += 1;
        }
        digits += 1;
        i += 1;
    }
    if i < n && (s[i] == b'.' || (decimal_comma && s[i] == b',')) {
        i += 1;
        while i < n && s[i].is_ascii_digit() {
            if sig < 19 {
                mant = mant * 10 + u64::from(s[i] - b'0');
                if mant > 0 {
                    sig += 1;
                }
                exp -= 1;
            }
            digits += 1;
            i += 1;
        }
    }
    if digits == 0 {
        return None;
    }
    if i < n && (s[i] == b'e' || s[i] == b'E') {
        i += 1;
        let mut eneg = false;
        if i < n && (s[i] == b'-' || s[i] == b'+') {
            eneg = s[i] == b'-';
            i += 1;
        }
        let start = i;
        let mut e: i32 = 0;
        while i < n && s[i].is_ascii_digit() {
            e = e.saturating_mul(10).saturating_add(i32::from(s[i] - b'0'));
            i += 1;
        }
        if i == start {
            return None;
        }
        exp = exp.saturating_add(if eneg { -e } else { e });
    }
    (i == n).then_some(Decimal { neg, mant, exp })
}

const POW10: [f64; 23] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22];

impl Decimal {
    /// Correctly rounded when `mant < 2^53` and `|exp| ≤ 22` (both operands exact); otherwise `None`.
    #[inline]
    fn to_f64_fast(self) -> Option<f64> {
        if self.mant >= (1u64 << 53) || self.exp.unsigned_abs() > 22 {
            return None;
        }
        let m = self.mant as f64;
        let e = POW10[self.exp.unsigned_abs() as usize];
        let v = if self.exp >= 0 { m * e } else { m / e };
        Some(if self.neg { -v } else { v })
    }

    /// Integer nanoseconds for a time in a unit `unit_exp` powers of ten above ns, rounded half away
    /// from zero; `None` on overflow.
    fn to_nanos(self, unit_exp: i32) -> Option<i64> {
        let e = self.exp.checked_add(unit_exp)?;
        let m = i128::from(self.mant);
        let v: i128 = if e >= 0 {
            m.checked_mul(10i128.checked_pow(u32::try_from(e).ok()?)?)?
        } else if e < -38 {
            0
        } else {
            let d = 10i128.pow(e.unsigned_abs());
            (m + d / 2) / d
        };
        let v = i64::try_from(v).ok()?;
        Some(if self.neg { -v } else { v })
    }
}

/// Parse a voltage cell: fast path, else the standard library (long mantissas, `NaN`, `inf`).
fn parse_volts(cell: &[u8], decimal_comma: bool) -> Option<f64> {
    if let Some(v) = parse_decimal(cell, decimal_comma).and_then(Decimal::to_f64_fast) {
        return Some(v);
    }
    let s = std::str::from_utf8(cell).ok()?;
    if decimal_comma && s.contains(',') {
        s.replace(',', ".").parse().ok()
    } else {
        s.parse().ok()
    }
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t' | b'\r', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t' | b'\r'] = s {
        s = rest;
    }
    if let [b'"', inner @ .., b'"'] = s {
        s = inner;
    }
    s
}

fn show(cell: &[u8]) -> String {
    let s = String::from_utf8_lossy(cell);
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s.into_owned()
    }
}

/// Where parsed samples go: the integrator, or the collector of sample ranges (second pass).
trait Sink {
    fn push(&mut self, t: UnixNanos, p: Watts) -> Result<(), TimeBackwards>;
    /// Nothing more is wanted: stop reading.
    fn done(&self) -> bool {
        false
    }
}

impl Sink for TimedIntegrator {
    #[inline]
    fn push(&mut self, t: UnixNanos, p: Watts) -> Result<(), TimeBackwards> {
        TimedIntegrator::push(self, t, p)
    }
}

impl Sink for RangeCollector {
    #[inline]
    fn push(&mut self, t: UnixNanos, p: Watts) -> Result<(), TimeBackwards> {
        RangeCollector::push(self, t, p);
        Ok(())
    }
    fn done(&self) -> bool {
        RangeCollector::done(self)
    }
}

struct Parser<'a, K> {
    path: &'a Path,
    opts: CsvOptions,
    circuit: ShuntCircuit,
    integ: K,
    sep: Option<u8>,
    decimal_comma: bool,
    seen_data: bool,
    line: u64,
    prev_t: Option<i64>,
    /// The sample of the latest time, not yet handed on: a peak-detect export repeats each time
    /// (its min and its max), and the samples of one time are one sample, their mean.
    pending: Option<(i64, f64, u32)>,
    origin: i64,
    need: usize,
}

impl<K: Sink> Parser<'_, K> {
    fn parse_err(&self, column: usize, name: &'static str, message: String) -> TraceError {
        TraceError::Parse { path: self.path.to_path_buf(), line: self.line, column: column + 1, column_name: name, message }
    }

    /// The separator, decided on the first data or header line: `;` or `,` if present, else tab.
    #[inline]
    fn separator(&mut self, l: &[u8]) -> u8 {
        if let Some(s) = self.sep {
            return s;
        }
        let s = if l.contains(&b';') {
            b';'
        } else if l.contains(&b',') {
            b','
        } else {
            b'\t'
        };
        self.sep = Some(s);
        self.decimal_comma = s != b',';
        s
    }

    /// The time and shunt cells of a line, picked without allocating.
    #[inline]
    fn cells<'l>(&self, l: &'l [u8], sep: u8) -> Result<(&'l [u8], &'l [u8]), TraceError> {
        let (tc, vc) = (self.opts.time_column, self.opts.shunt_column);
        let mut tcell: Option<&[u8]> = None;
        let mut vcell: Option<&[u8]> = None;
        let mut found = 0usize;
        for (i, cell) in l.split(|b| *b == sep).enumerate() {
            found = i + 1;
            if i == tc {
                tcell = Some(cell);
            }
            if i == vc {
                vcell = Some(cell);
            }
            if found >= self.need {
                break;
            }
        }
        match (tcell, vcell) {
            (Some(t), Some(v)) => Ok((t, v)),
            _ => Err(TraceError::MissingColumn { path: self.path.to_path_buf(), line: self.line, needed: self.need, found }),
        }
    }

    #[inline]
    fn line(&mut self, raw: &[u8]) -> Result<(), TraceError> {
        self.line += 1;
        let l = trim(raw);
        if l.is_empty() || l[0] == b'#' {
            return Ok(());
        }
        let sep = self.separator(l);
        let (tc, vc) = (self.opts.time_column, self.opts.shunt_column);
        let (tcell, vcell) = self.cells(l, sep)?;
        let (tcell, vcell) = (trim(tcell), trim(vcell));
        let td = parse_decimal(tcell, self.decimal_comma);
        let looks_numeric = matches!(tcell.first(), Some(b'0'..=b'9' | b'+' | b'-' | b'.'));
        if td.is_none() && !self.seen_data && !looks_numeric {
            // First non-comment line whose time cell is a word: the header.
            self.seen_data = true;
            return Ok(());
        }
        self.seen_data = true;
        let t = td
            .and_then(|d| d.to_nanos(self.opts.time_unit.exp10()))
            .ok_or_else(|| self.parse_err(tc, "time", format!("not a time in {:?}: \"{}\"", self.opts.time_unit, show(tcell))))?;
        let v = parse_volts(vcell, self.decimal_comma).ok_or_else(|| self.parse_err(vc, "V_shunt", format!("not a number: \"{}\"", show(vcell))))?;
        // Beyond i64 ns (year 2262) with the origin: an error on this line, never a saturated time
        // that the next line's check would blame on the next line.
        let t = t.checked_add(self.origin).ok_or_else(|| {
            self.parse_err(
                tc,
                "time",
                format!(
                    "\"{}\" {:?} after the time origin {} ns is past the largest time (i64 ns, year 2262); check --time-unit and the time origin",
                    show(tcell),
                    self.opts.time_unit,
                    self.origin
                ),
            )
        })?;
        if let Some(p) = self.prev_t {
            if t < p {
                return Err(TraceError::TimeBackwards { path: self.path.to_path_buf(), line: self.line, time_ns: t, previous_ns: p });
            }
        }
        self.prev_t = Some(t);
        let p = self.circuit.power(Volts(v)).0;
        match &mut self.pending {
            Some((pt, sum, n)) if *pt == t => {
                *sum += p;
                *n += 1;
                Ok(())
            }
            _ => {
                let out = self.flush();
                self.pending = Some((t, p, 1));
                out
            }
        }
    }

    /// Hands the pending sample on (the mean of the samples of its time).
    fn flush(&mut self) -> Result<(), TraceError> {
        let Some((t, sum, n)) = self.pending.take() else {
            return Ok(());
        };
        // Order was checked as the lines came, so this cannot fail; map defensively anyway.
        self.integ.push(UnixNanos(t), Watts(sum / f64::from(n))).map_err(|e| TraceError::TimeBackwards {
            path: self.path.to_path_buf(),
            line: self.line,
            time_ns: e.time.0,
            previous_ns: e.previous.0,
        })
    }
}

/// Integrate a CSV trace from any reader; `path` is only used to name errors.
pub fn integrate_csv_reader(reader: impl Read, path: &Path, circuit: ShuntCircuit, opts: &CsvOptions) -> Result<TraceSummary, TraceError> {
    let integ = TimedIntegrator::new(opts.window).map_err(|source| TraceError::Config { path: path.to_path_buf(), source })?;
    let integ = parse(reader, path, circuit, opts, integ)?;
    let summary = integ.finish(opts.time_origin.is_some());
    if summary.samples + summary.gap_samples == 0 {
        return Err(TraceError::Empty { path: path.to_path_buf() });
    }
    Ok(summary)
}

/// The samples (UTC time, watts; NaN for gaps) whose times lie in each of `ranges`, read in one pass
/// (the second pass of a trace import, for run edges refined to the sample).
pub fn read_csv_samples(
    path: impl AsRef<Path>,
    circuit: ShuntCircuit,
    opts: &CsvOptions,
    ranges: &[(UnixNanos, UnixNanos)],
) -> Result<Vec<Vec<(UnixNanos, f64)>>, TraceError> {
    let path = path.as_ref();
    let f = File::open(path).map_err(|source| TraceError::Io { path: path.to_path_buf(), source })?;
    Ok(parse(f, path, circuit, opts, RangeCollector::new(ranges))?.finish())
}

fn parse<K: Sink>(mut reader: impl Read, path: &Path, circuit: ShuntCircuit, opts: &CsvOptions, integ: K) -> Result<K, TraceError> {
    let mut p = Parser {
        path,
        opts: *opts,
        circuit,
        integ,
        sep: None,
        decimal_comma: false,
        seen_data: false,
        line: 0,
        prev_t: None,
        pending: None,
        origin: opts.time_origin.map_or(0, |o| o.0),
        need: opts.time_column.max(opts.shunt_column) + 1,
    };
    let io = |source| TraceError::Io { path: path.to_path_buf(), source };
    let mut buf = vec![0u8; 1 << 20];
    let mut filled = 0usize;
    loop {
        if filled == buf.len() {
            // A line longer than the buffer: grow.
            buf.resize(buf.len() * 2, 0);
        }
        let got = match reader.read(&mut buf[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        let eof = got == 0;
        filled += got;
        let upto = if eof {
            filled
        } else {
            match buf[..filled].iter().rposition(|b| *b == b'\n') {
                Some(i) => i + 1,
                None => continue,
            }
        };
        let mut rest = &buf[..upto];
        while !rest.is_empty() {
            let (line, tail) = match rest.iter().position(|b| *b == b'\n') {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &rest[rest.len()..]),
            };
            p.line(line)?;
            rest = tail;
        }
        buf.copy_within(upto..filled, 0);
        filled -= upto;
        if eof || p.integ.done() {
            break;
        }
    }
    p.flush()?;
    Ok(p.integ)
}

/// Integrate a CSV trace file with the paper's formula.
pub fn integrate_csv(path: impl AsRef<Path>, circuit: ShuntCircuit, opts: &CsvOptions) -> Result<TraceSummary, TraceError> {
    let path: PathBuf = path.as_ref().to_path_buf();
    let f = File::open(&path).map_err(|source| TraceError::Io { path: path.clone(), source })?;
    integrate_csv_reader(f, &path, circuit, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Option<Decimal> {
        parse_decimal(s.as_bytes(), false)
    }

    #[test]
    fn decimals() {
        assert_eq!(d("1.5"), Some(Decimal { neg: false, mant: 15, exp: -1 }));
        assert_eq!(d("-2e3"), Some(Decimal { neg: true, mant: 2, exp: 3 }));
        assert_eq!(d(".5E-2"), Some(Decimal { neg: false, mant: 5, exp: -3 }));
        assert_eq!(d("3."), Some(Decimal { neg: false, mant: 3, exp: 0 }));
        for bad in ["", "-", ".", "1e", "1.2.3", "1x", "e5", "1,5"] {
            assert_eq!(d(bad), None, "{bad}");
        }
        assert_eq!(parse_decimal(b"1,5", true), Some(Decimal { neg: false, mant: 15, exp: -1 }));
    }

    #[test]
    fn times_are_exact_nanoseconds() {
        let ns = |s: &str, u: TimeUnit| d(s).and_then(|x| x.to_nanos(u.exp10()));
        assert_eq!(ns("0.001", TimeUnit::Seconds), Some(1_000_000));
        assert_eq!(ns("1.5e-3", TimeUnit::Seconds), Some(1_500_000));
        assert_eq!(ns("-0.5", TimeUnit::Seconds), Some(-500_000_000));
        assert_eq!(ns("2.5", TimeUnit::Micros), Some(2_500));
        assert_eq!(ns("0.0000000015", TimeUnit::Seconds), Some(2));
        assert_eq!(ns("12345678901234.567", TimeUnit::Seconds), None);
        assert_eq!(ns("1e400", TimeUnit::Seconds), None);
    }

    /// Issue 27: 9e9 s after a 2023 origin is past i64 ns; it saturated and the error named the
    /// next line (time going backwards). The error is on its own line and says why.
    #[test]
    fn a_time_past_the_largest_names_its_own_line() {
        let csv = "t,v\n0,0.01\n0.001,0.01\n9e9,0.01\n9e9,0.01\n";
        let opts = CsvOptions { time_origin: Some(UnixNanos(1_700_000_000_000_000_000)), ..CsvOptions::default() };
        let circuit = ShuntCircuit::new(crate::units::Ohms(0.1), crate::units::Volts(5.0));
        let err = integrate_csv_reader(csv.as_bytes(), std::path::Path::new("/data/t.csv"), circuit.expect("circuit"), &opts).expect_err("out of range");
        let text = err.to_string();
        assert!(
            text.starts_with("/data/t.csv:4: column 1 (time): \"9e9\" Seconds after the time origin 1700000000000000000 ns is past the largest time"),
            "{text}"
        );
    }

    /// Issue 27: a peak-detect export gives each time twice, its min and its max; the first of the
    /// pair got zero weight, so only the max counted (+12–14 % energy). The pair is one sample, the
    /// mean of their powers: P(v) = v/R·(U − v), R = 0.1 Ω, U = 5 V: P(0.01) = 0.499 W,
    /// P(0.03) = 1.491 W, mean 0.995 W, for 4 instants of 1 ms each: 3.980 mJ.
    #[test]
    fn peak_detect_pairs_are_one_sample_their_mean() {
        let csv = "t,v\n0,0.01\n0,0.03\n0.001,0.03\n0.001,0.01\n0.002,0.01\n0.002,0.03\n0.003,0.03\n0.003,0.01\n";
        let circuit = ShuntCircuit::new(crate::units::Ohms(0.1), crate::units::Volts(5.0)).expect("circuit");
        let s = integrate_csv_reader(csv.as_bytes(), std::path::Path::new("/data/pd.csv"), circuit, &CsvOptions::default()).expect("import");
        assert_eq!(s.samples, 4);
        assert!((s.energy.0 - 3.980e-3).abs() < 1e-12, "{}", s.energy.0);
        assert!((s.mean_power.0 - 0.995).abs() < 1e-12, "{}", s.mean_power.0);
    }

    #[test]
    fn volts_fast_and_fallback() {
        assert_eq!(parse_volts(b"0.1", false), Some(0.1));
        assert_eq!(parse_volts(b"1.2345678901234567890123", false), Some(1.2345678901234568));
        assert_eq!(parse_volts(b"1e-30", false), Some(1e-30));
        assert!(parse_volts(b"NaN", false).is_some_and(f64::is_nan));
        assert_eq!(parse_volts(b"abc", false), None);
    }
}
