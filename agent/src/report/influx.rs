//! Builds a [`Report`] for one host from InfluxDB (the collector's database, `docs/schema.md`):
//! its `probe_run` points (Figure 4 profiles, energy and background-work fields when present), the
//! `power` of the probe window, the agent's version and its `probe_unsupported` events. Speaks the
//! 1.x `/query` API with InfluxQL (works on 1.6 … 3.x); every query carries a time bound, because an
//! unbounded query can hang InfluxDB 1.6.

use super::http::{Http, HttpError};
use super::model::{utc, Background, DeviceRuns, PowerTrace, Report, Run};
use std::collections::BTreeMap;
use std::time::Duration;
use wattflip_proto::v1;

/// Where to read and what.
#[derive(Debug, Clone)]
pub struct Source {
    /// Base URL of InfluxDB, e.g. `http://influx:8086`.
    pub url: String,
    pub database: String,
    /// The `host` tag (agent id).
    pub host: String,
    /// How far back to look, as an InfluxQL duration (`24h`, `7d`, `90m`).
    pub since: String,
}

#[derive(Debug, thiserror::Error)]
pub enum InfluxReportError {
    #[error("--since `{0}`: not a duration; write a number and a unit among ns, u, ms, s, m, h, d, w (e.g. 24h, 7d)")]
    Since(String),
    #[error("cannot reach InfluxDB at {url} for query `{query}`: {source}; check --influx-url and that influxd is running")]
    Http { url: String, query: String, source: HttpError },
    #[error("InfluxDB at {url} answered {status} to query `{query}`: {body}")]
    Status { url: String, query: String, status: u16, body: String },
    #[error("InfluxDB at {url} refused query `{query}`: {message}{hint}")]
    Query { url: String, query: String, message: String, hint: &'static str },
    #[error("InfluxDB at {url} answered query `{query}` with something that is not its JSON: {detail}")]
    Json { url: String, query: String, detail: String },
    #[error("no probe_run for host `{host}` in database `{database}` at {url} in the last {since}: run `wattflip-agent probe --collector URL` on that host, widen --since, or check --host (the agent id)")]
    NoRuns { url: String, database: String, host: String, since: String },
}

/// One series of a query answer: its tags and its rows by column name.
struct SeriesRows {
    tags: BTreeMap<String, String>,
    rows: Vec<BTreeMap<String, serde_json::Value>>,
}

struct Client {
    http: Http,
    src: Source,
}

/// An InfluxQL string literal: single quotes, with `\` and `'` escaped.
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn valid_duration(s: &str) -> bool {
    let digits = s.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && matches!(&s[digits..], "ns" | "u" | "µ" | "ms" | "s" | "m" | "h" | "d" | "w")
}

impl Client {
    fn query(&self, q: &str) -> Result<Vec<SeriesRows>, InfluxReportError> {
        let url = format!("{}/query", self.src.url.trim_end_matches('/'));
        let http = |source| InfluxReportError::Http { url: self.src.url.clone(), query: q.to_string(), source };
        let (status, body) = self.http.get(&url, &[("db", self.src.database.as_str()), ("q", q), ("epoch", "ns")]).map_err(http)?;
        let json: serde_json::Value = match serde_json::from_str(&body) {
            Ok(v) => v,
            Err(_) if status != 200 => {
                return Err(InfluxReportError::Status { url: self.src.url.clone(), query: q.into(), status, body });
            }
            Err(e) => return Err(InfluxReportError::Json { url: self.src.url.clone(), query: q.into(), detail: e.to_string() }),
        };
        if let Some(message) = json.get("error").or_else(|| json.pointer("/results/0/error")).and_then(|e| e.as_str()) {
            let hint = if message.contains("database not found") { "; check --influx-db (the collector's database)" } else { "" };
            return Err(InfluxReportError::Query { url: self.src.url.clone(), query: q.into(), message: message.into(), hint });
        }
        if status != 200 {
            return Err(InfluxReportError::Status { url: self.src.url.clone(), query: q.into(), status, body });
        }
        let series = json.pointer("/results/0/series").and_then(|s| s.as_array()).cloned().unwrap_or_default();
        Ok(series
            .iter()
            .map(|s| {
                let tags = s
                    .get("tags")
                    .and_then(|t| t.as_object())
                    .map(|t| t.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
                    .unwrap_or_default();
                let columns: Vec<String> = s
                    .get("columns")
                    .and_then(|c| c.as_array())
                    .map(|c| c.iter().map(|x| x.as_str().unwrap_or_default().to_string()).collect())
                    .unwrap_or_default();
                let rows = s
                    .get("values")
                    .and_then(|v| v.as_array())
                    .map(|rows| {
                        rows.iter()
                            .filter_map(|r| r.as_array())
                            .map(|r| columns.iter().cloned().zip(r.iter().cloned()).filter(|(_, v)| !v.is_null()).collect())
                            .collect()
                    })
                    .unwrap_or_default();
                SeriesRows { tags, rows }
            })
            .collect())
    }
}

fn num(row: &BTreeMap<String, serde_json::Value>, key: &str) -> Option<f64> {
    row.get(key).and_then(serde_json::Value::as_f64)
}

fn text(row: &BTreeMap<String, serde_json::Value>, key: &str) -> String {
    row.get(key).and_then(|v| v.as_str()).unwrap_or_default().to_string()
}

/// A `probe_run` row (`SELECT *`: tags and fields as columns) as a run: the inverse of
/// `schema::probe_run_point` for what the report shows, plus the background-work fields.
fn run_from_row(row: &BTreeMap<String, serde_json::Value>) -> Run {
    let n = |k: &str| num(row, k).unwrap_or(0.0);
    let background = num(row, "background_s").map(|duration_s| Background {
        duration_s,
        energy_j: num(row, "background_energy_j"),
        class: row.get("background_class").and_then(|v| v.as_str()).map(str::to_string),
    });
    let probe = v1::ProbeRun {
        run_id: text(row, "run_id"),
        device: text(row, "device"),
        model: text(row, "model"),
        bench: text(row, "bench"),
        experiment: text(row, "experiment"),
        pattern: text(row, "pattern"),
        varying: text(row, "varying"),
        value: n("value"),
        repetition: n("repetition") as u32,
        // The point's time is the run's first submit.
        start_ns: n("time") as i64,
        end_ns: n("end_ns") as i64,
        io_count: n("io_count") as u64,
        io_size_bytes: n("io_size_bytes") as u64,
        mean_us: n("mean_us"),
        min_us: n("min_us"),
        max_us: n("max_us"),
        stddev_us: n("stddev_us"),
        p99_us: n("p99_us"),
        iops: n("iops"),
        mib_per_s: n("mib_per_s"),
        energy_j: num(row, "energy_j"),
        energy_above_idle_j: num(row, "energy_above_idle_j"),
        ..Default::default()
    };
    Run { probe, background }
}

/// Reads everything the report of `src.host` needs and builds it.
pub fn load(src: &Source) -> Result<Report, InfluxReportError> {
    if !valid_duration(&src.since) {
        return Err(InfluxReportError::Since(src.since.clone()));
    }
    let http = Http::new(Duration::from_secs(60)).map_err(|source| InfluxReportError::Http { url: src.url.clone(), query: String::new(), source })?;
    let c = Client { http, src: src.clone() };
    let host = literal(&src.host);
    let recent = format!("time > now() - {}", src.since);

    let q = format!("SELECT * FROM \"probe_run\" WHERE \"host\" = {host} AND {recent}");
    let mut devices: Vec<DeviceRuns> = Vec::new();
    let mut rows: Vec<BTreeMap<String, serde_json::Value>> = c.query(&q)?.into_iter().flat_map(|s| s.rows).collect();
    rows.sort_by_key(|r| num(r, "time").unwrap_or(0.0) as i64);
    for row in &rows {
        let (device, model) = (text(row, "device"), text(row, "model"));
        let run = run_from_row(row);
        match devices.iter_mut().find(|d| d.device == device) {
            Some(d) => d.runs.push(run),
            None => devices.push(DeviceRuns { device, model, runs: vec![run] }),
        }
    }
    if devices.is_empty() {
        return Err(InfluxReportError::NoRuns { url: src.url.clone(), database: src.database.clone(), host: src.host.clone(), since: src.since.clone() });
    }
    let mut report = Report { subject: format!("host {}", src.host), devices, ..Default::default() };
    let (start, end) = report.probe_window().unwrap_or_default();

    // Power around the probe window, averaged into ≈ 600 buckets so long probes stay light; one
    // series per (source, zone, scope) because scopes overlap and must never be added.
    let pad = ((end - start) / 10).max(5_000_000_000);
    let (from, to) = (start - pad, end + pad);
    let bucket_ms = ((to - from) / 600 / 1_000_000).max(1);
    let q = format!(
        "SELECT mean(\"watts\") FROM \"power\" WHERE \"host\" = {host} AND time >= {from} AND time <= {to} \
         GROUP BY time({bucket_ms}ms), \"source\", \"zone\", \"scope\" fill(none)"
    );
    for s in c.query(&q)? {
        let tag = |k: &str| s.tags.get(k).cloned().unwrap_or_default();
        let points: Vec<(i64, f64)> = s.rows.iter().filter_map(|r| Some((num(r, "time")? as i64, num(r, "mean")?))).collect();
        if !points.is_empty() {
            report.power.push(PowerTrace { label: format!("{} {} ({})", tag("source"), tag("zone"), tag("scope")), points });
        }
    }

    let q = format!("SELECT last(\"version\") AS \"version\" FROM \"agent\" WHERE \"host\" = {host} AND {recent}");
    let version = c.query(&q)?.first().and_then(|s| s.rows.first()).map(|r| text(r, "version")).unwrap_or_else(|| "—".into());
    let q = format!("SELECT \"device\", \"message\" FROM \"event\" WHERE \"host\" = {host} AND \"kind\" = 'probe_unsupported' AND {recent}");
    report.unsupported = c.query(&q)?.iter().flat_map(|s| &s.rows).map(|r| format!("{}: {}", text(r, "device"), text(r, "message"))).collect();

    let runs: usize = report.devices.iter().map(|d| d.runs.len()).sum();
    let with_energy = report.devices.iter().flat_map(|d| &d.runs).filter(|r| r.probe.energy_j.is_some()).count();
    let devices = report.devices.iter().map(|d| format!("{} ({})", d.device, d.model)).collect::<Vec<_>>().join(", ");
    report.facts = vec![
        ("host".into(), src.host.clone()),
        ("source".into(), format!("{} database {} (last {})", src.url, src.database, src.since)),
        ("agent version".into(), version),
        ("devices".into(), devices),
        ("first run".into(), utc(u64::try_from(start).unwrap_or(0))),
        ("last run ended".into(), utc(u64::try_from(end).unwrap_or(0))),
        ("runs".into(), format!("{runs} measured ({with_energy} with energy), {} unsupported", report.unsupported.len())),
        ("power channels".into(), report.power.len().to_string()),
    ];
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_durations() {
        assert_eq!(literal("a'b\\c"), "'a\\'b\\\\c'");
        for ok in ["24h", "7d", "90m", "1w", "500ms", "10s"] {
            assert!(valid_duration(ok), "{ok}");
        }
        for bad in ["", "h", "24", "24 h", "1y", "-1h", "24h; DROP"] {
            assert!(!valid_duration(bad), "{bad}");
        }
    }

    #[test]
    fn a_bad_since_is_refused_before_any_query() {
        let src = Source { url: "http://127.0.0.1:1".into(), database: "d".into(), host: "h".into(), since: "yesterday".into() };
        let e = load(&src).unwrap_err().to_string();
        assert!(e.starts_with("--since `yesterday`: not a duration"), "{e}");
    }

    #[test]
    fn an_unreachable_server_names_the_url_and_the_query() {
        let src = Source { url: "http://127.0.0.1:1".into(), database: "d".into(), host: "h".into(), since: "1h".into() };
        let e = load(&src).unwrap_err().to_string();
        assert!(
            e.starts_with("cannot reach InfluxDB at http://127.0.0.1:1 for query `SELECT * FROM \"probe_run\" WHERE \"host\" = 'h' AND time > now() - 1h`"),
            "{e}"
        );
    }
}
