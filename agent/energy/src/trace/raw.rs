//! Raw binary shunt traces (little-endian f32 volts or i16 counts) described by a small sidecar file in
//! JSON or TOML. The sidecar is validated key by key and every problem is reported at once, naming the
//! file and the key. To add a sidecar key, add it to `KNOWN_KEYS`, read it in `Sidecar::from_map` and
//! document it in `docs/energy-method.md`.
//!
//! Sidecar keys:
//!
//! | key | required | meaning |
//! |---|---|---|
//! | `format` | yes | `"f32le"` or `"i16le"` |
//! | `sample_rate_hz` | yes | samples per second, > 0 |
//! | `shunt_ohms` | yes | shunt resistance R, > 0 |
//! | `supply_volts` | yes | supply voltage U, > 0 |
//! | `scale` | for i16le | volts per stored unit (f32le default 1.0) |
//! | `offset_volts` | no | shunt reading at zero current, subtracted (default 0) |
//! | `start_time_utc_ns` | no | UTC of the first sample, integer ns since the epoch |
//! | `header_bytes` | no | bytes to skip before the first sample (default 0) |
//! | `description` | no | free text |

use super::{FixedRateIntegrator, PowerWindow, SampleFormat, ShuntCircuit, TraceSummary};
use crate::error::{KeyProblem, TraceError};
use crate::units::{Hertz, Nanos, Ohms, UnixNanos, Volts};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

const KNOWN_KEYS: [&str; 9] =
    ["format", "sample_rate_hz", "shunt_ohms", "supply_volts", "scale", "offset_volts", "start_time_utc_ns", "header_bytes", "description"];

/// Syntax of a sidecar file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SidecarSyntax {
    Json,
    Toml,
}

/// A validated sidecar: everything needed to turn raw samples into power.
#[derive(Debug, Clone, PartialEq)]
pub struct Sidecar {
    pub format: SampleFormat,
    pub sample_rate: Hertz,
    pub circuit: ShuntCircuit,
    /// Volts per stored unit (1.0 for f32 volts).
    pub scale: Volts,
    pub start: Option<UnixNanos>,
    pub header_bytes: u64,
}

#[derive(Debug, Clone, PartialEq)]
enum Val {
    Int(i64),
    Float(f64),
    Str(String),
    Other(&'static str),
}

impl Val {
    fn number(&self) -> Option<f64> {
        match self {
            Val::Int(i) => Some(*i as f64),
            Val::Float(f) => Some(*f),
            _ => None,
        }
    }
    fn kind(&self) -> &'static str {
        match self {
            Val::Int(_) => "an integer",
            Val::Float(_) => "a float",
            Val::Str(_) => "a string",
            Val::Other(k) => k,
        }
    }
}

fn from_json(v: serde_json::Value) -> Option<BTreeMap<String, Val>> {
    let serde_json::Value::Object(m) = v else {
        return None;
    };
    Some(
        m.into_iter()
            .map(|(k, v)| {
                let v = match v {
                    serde_json::Value::Number(n) => match n.as_i64() {
                        Some(i) => Val::Int(i),
                        None => Val::Float(n.as_f64().unwrap_or(f64::NAN)),
                    },
                    serde_json::Value::String(s) => Val::Str(s),
                    serde_json::Value::Bool(_) => Val::Other("a boolean"),
                    serde_json::Value::Null => Val::Other("null"),
                    serde_json::Value::Array(_) => Val::Other("an array"),
                    serde_json::Value::Object(_) => Val::Other("a table"),
                };
                (k, v)
            })
            .collect(),
    )
}

fn from_toml(t: toml::Table) -> BTreeMap<String, Val> {
    t.into_iter()
        .map(|(k, v)| {
            let v = match v {
                toml::Value::Integer(i) => Val::Int(i),
                toml::Value::Float(f) => Val::Float(f),
                toml::Value::String(s) => Val::Str(s),
                toml::Value::Boolean(_) => Val::Other("a boolean"),
                toml::Value::Datetime(_) => Val::Other("a datetime"),
                toml::Value::Array(_) => Val::Other("an array"),
                toml::Value::Table(_) => Val::Other("a table"),
            };
            (k, v)
        })
        .collect()
}

impl Sidecar {
    /// Read a sidecar; the syntax follows the extension (`.json`, `.toml`), else the first byte (`{`).
    pub fn load(path: impl AsRef<Path>) -> Result<Sidecar, TraceError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io { path: path.to_path_buf(), source })?;
        let syntax = match path.extension().and_then(|e| e.to_str()) {
            Some("json") => SidecarSyntax::Json,
            Some("toml") => SidecarSyntax::Toml,
            _ if text.trim_start().starts_with('{') => SidecarSyntax::Json,
            _ => SidecarSyntax::Toml,
        };
        Sidecar::parse(&text, syntax, path)
    }

    /// Parse sidecar text; `path` names errors.
    pub fn parse(text: &str, syntax: SidecarSyntax, path: &Path) -> Result<Sidecar, TraceError> {
        let syntax_err = |message: String| TraceError::SidecarSyntax { path: path.to_path_buf(), message };
        let map = match syntax {
            SidecarSyntax::Json => {
                let v: serde_json::Value = serde_json::from_str(text).map_err(|e| syntax_err(e.to_string()))?;
                from_json(v).ok_or_else(|| syntax_err("top level must be an object".into()))?
            }
            SidecarSyntax::Toml => {
                let t: toml::Table = toml::from_str(text).map_err(|e| syntax_err(e.to_string()))?;
                from_toml(t)
            }
        };
        Sidecar::from_map(&map).map_err(|problems| TraceError::Sidecar { path: path.to_path_buf(), problems })
    }

    fn from_map(map: &BTreeMap<String, Val>) -> Result<Sidecar, Vec<KeyProblem>> {
        let mut problems = Vec::new();
        let mut bad = |key: &str, message: String| problems.push(KeyProblem { key: key.to_string(), message });
        for k in map.keys() {
            if !KNOWN_KEYS.contains(&k.as_str()) {
                bad(k, format!("unknown key (known: {})", KNOWN_KEYS.join(", ")));
            }
        }
        let format = match map.get("format") {
            None => {
                bad("format", "missing (\"f32le\" or \"i16le\")".into());
                None
            }
            Some(Val::Str(s)) if s == "f32le" => Some(SampleFormat::F32le),
            Some(Val::Str(s)) if s == "i16le" => Some(SampleFormat::I16le),
            Some(v) => {
                bad("format", format!("must be \"f32le\" or \"i16le\", got {v:?}"));
                None
            }
        };
        let mut positive = |key: &str, required: bool| -> Option<f64> {
            match map.get(key) {
                None if required => {
                    bad(key, "missing".into());
                    None
                }
                None => None,
                Some(v) => match v.number() {
                    Some(x) if x.is_finite() && x > 0.0 => Some(x),
                    Some(x) => {
                        bad(key, format!("must be a finite number > 0, got {x}"));
                        None
                    }
                    None => {
                        bad(key, format!("must be a number, got {}", v.kind()));
                        None
                    }
                },
            }
        };
        let rate = positive("sample_rate_hz", true);
        let shunt = positive("shunt_ohms", true);
        let supply = positive("supply_volts", true);
        let scale = match map.get("scale") {
            None if format == Some(SampleFormat::I16le) => {
                bad("scale", "missing (volts per count, required for i16le)".into());
                None
            }
            None => Some(1.0),
            Some(v) => match v.number() {
                Some(x) if x.is_finite() && x != 0.0 => Some(x),
                _ => {
                    bad("scale", format!("must be a finite non-zero number, got {v:?}"));
                    None
                }
            },
        };
        let offset = match map.get("offset_volts") {
            None => Some(0.0),
            Some(v) => match v.number() {
                Some(x) if x.is_finite() => Some(x),
                _ => {
                    bad("offset_volts", format!("must be a finite number, got {v:?}"));
                    None
                }
            },
        };
        let mut int = |key: &str, min: i64| -> Option<Option<i64>> {
            match map.get(key) {
                None => Some(None),
                Some(Val::Int(i)) if *i >= min => Some(Some(*i)),
                Some(v) => {
                    bad(key, format!("must be an integer ≥ {min}, got {v:?}"));
                    None
                }
            }
        };
        let start = int("start_time_utc_ns", i64::MIN);
        let header = int("header_bytes", 0);
        if let Some(v) = map.get("description") {
            if !matches!(v, Val::Str(_)) {
                bad("description", format!("must be a string, got {}", v.kind()));
            }
        }
        let circuit = match (shunt, supply, offset) {
            (Some(r), Some(u), Some(o)) => {
                ShuntCircuit::new(Ohms(r), Volts(u)).and_then(|c| c.with_zero_offset(Volts(o))).map_err(|e| bad(e.key, e.message)).ok()
            }
            _ => None,
        };
        match (format, rate, circuit, scale, start, header) {
            (Some(format), Some(rate), Some(circuit), Some(scale), Some(start), Some(header)) if problems.is_empty() => Ok(Sidecar {
                format,
                sample_rate: Hertz(rate),
                circuit,
                scale: Volts(scale),
                start: start.map(UnixNanos),
                header_bytes: u64::try_from(header.unwrap_or(0)).unwrap_or(0),
            }),
            _ => Err(problems),
        }
    }

    /// Sidecar candidates for a data file, in the order tried: `<data>.json`, `<data>.toml`, then the
    /// data file's name with its extension replaced by `.json` / `.toml`.
    pub fn candidates(data: &Path) -> Vec<PathBuf> {
        let mut v = Vec::new();
        for ext in ["json", "toml"] {
            let mut s = data.as_os_str().to_owned();
            s.push(".");
            s.push(ext);
            v.push(PathBuf::from(s));
        }
        if data.extension().is_some() {
            for ext in ["json", "toml"] {
                v.push(data.with_extension(ext));
            }
        }
        v
    }

    /// Find and load the sidecar beside `data`.
    pub fn find_beside(data: impl AsRef<Path>) -> Result<Sidecar, TraceError> {
        let data = data.as_ref();
        let tried = Sidecar::candidates(data);
        match tried.iter().find(|p| p.is_file()) {
            Some(p) => Sidecar::load(p),
            None => Err(TraceError::NoSidecar { path: data.to_path_buf(), tried }),
        }
    }
}

/// Read size for raw traces: 1 MiB measured faster than 64 KiB and 256 KiB (fewer syscalls; the
/// kernel's window loop still works on cache-sized slices).
const CHUNK: usize = 1024 * 1024;

/// Integrate a raw trace, handing each finished window to `sink` (constant memory); the returned
/// summary's `windows` is empty.
pub fn integrate_raw_streaming(
    data: impl AsRef<Path>,
    sidecar: &Sidecar,
    window: Nanos,
    mut sink: impl FnMut(PowerWindow),
) -> Result<TraceSummary, TraceError> {
    let path = data.as_ref();
    let io = |source| TraceError::Io { path: path.to_path_buf(), source };
    let mut integ = FixedRateIntegrator::new(sidecar.circuit, sidecar.format, sidecar.scale, sidecar.sample_rate, window)
        .map_err(|source| TraceError::Config { path: path.to_path_buf(), source })?;
    let mut f = File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    let payload = len.saturating_sub(sidecar.header_bytes);
    let sb = sidecar.format.bytes();
    if payload % sb as u64 != 0 {
        return Err(TraceError::TruncatedSample { path: path.to_path_buf(), bytes: payload, sample_bytes: sb });
    }
    if payload == 0 {
        return Err(TraceError::Empty { path: path.to_path_buf() });
    }
    if sidecar.header_bytes > 0 {
        f.seek(SeekFrom::Start(sidecar.header_bytes)).map_err(io)?;
    }
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        integ.push_bytes(&buf[..n]);
        for w in integ.drain_windows() {
            sink(w);
        }
    }
    let mut summary = integ.finish(sidecar.start);
    for w in summary.windows.drain(..) {
        sink(w);
    }
    Ok(summary)
}

/// The samples (UTC time, watts; NaN for gaps) whose times lie in each of `ranges`, read with one
/// seek per range (the second pass of a trace import, for run edges refined to the sample). Needs
/// the sidecar's `start_time_utc_ns`; without it no range matches.
pub fn read_raw_samples(data: impl AsRef<Path>, sidecar: &Sidecar, ranges: &[(UnixNanos, UnixNanos)]) -> Result<Vec<Vec<(UnixNanos, f64)>>, TraceError> {
    let path = data.as_ref();
    let io = |source| TraceError::Io { path: path.to_path_buf(), source };
    let Some(start) = sidecar.start else {
        return Ok(vec![Vec::new(); ranges.len()]);
    };
    let mut f = File::open(path).map_err(io)?;
    let sb = sidecar.format.bytes() as u64;
    let total = f.metadata().map_err(io)?.len().saturating_sub(sidecar.header_bytes) / sb;
    let period = sidecar.sample_rate.period_ns();
    let index = |t: UnixNanos| -> u64 {
        let k = ((t.0 - start.0) as f64 / period).ceil();
        if k <= 0.0 {
            0
        } else {
            (k as u64).min(total)
        }
    };
    let (k_scale, circuit) = (sidecar.scale.0, sidecar.circuit);
    let mut out = Vec::with_capacity(ranges.len());
    let mut buf = Vec::new();
    for (from, to) in ranges {
        let (k0, k1) = (index(*from), index(*to));
        let mut v = Vec::new();
        if k1 > k0 {
            f.seek(SeekFrom::Start(sidecar.header_bytes + k0 * sb)).map_err(io)?;
            buf.resize(((k1 - k0) * sb) as usize, 0);
            f.read_exact(&mut buf).map_err(io)?;
            for (j, c) in buf.chunks_exact(sb as usize).enumerate() {
                let x = match sidecar.format {
                    SampleFormat::F32le => f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
                    SampleFormat::I16le => i16::from_le_bytes([c[0], c[1]]) as f64,
                };
                let k = k0 + j as u64;
                let t = UnixNanos(start.0 + (k as f64 * period).round() as i64);
                v.push((t, circuit.power(Volts(k_scale * x)).0));
            }
        }
        out.push(v);
    }
    Ok(out)
}

/// Integrate a raw trace and keep every window in the summary.
pub fn integrate_raw(data: impl AsRef<Path>, sidecar: &Sidecar, window: Nanos) -> Result<TraceSummary, TraceError> {
    let mut windows = Vec::new();
    let mut s = integrate_raw_streaming(data, sidecar, window, |w| windows.push(w))?;
    s.windows = windows;
    Ok(s)
}
