//! Capacity-planning queries over the fleet's measurements in InfluxDB (`wattflip-collector plan
//! …`): what a power cap would save and cost, which racks or hosts exceed a power budget, and how
//! many drives of a model fit a budget at a workload. Every InfluxQL statement is built by a
//! function here and documented in `docs/analyses.md`; the arithmetic is done in Rust so that it
//! is tested exactly. A new plan is a function returning a serialisable answer plus a table.

pub mod budget_hourly;
pub mod budget_plan;
pub mod budget_rollup;
pub mod points;
pub mod resolution;
pub mod rollup;

// The budget plan is its own file (this one was over 600 lines); re-exported where it was.
pub use budget_plan::{budget, budget_hosts_query, budget_query, budget_table, BudgetPlan, GroupBudget, HostPower, MissingHost};

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Errors that explain what is missing instead of answering zero.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("cannot query InfluxDB at {url}: {message}")]
    Http { url: String, message: String },
    #[error("InfluxDB rejected {query:?}: {message}")]
    Query { query: String, message: String },
    #[error("unknown model `{model}`: no inventory or probe data for it in the last {since}; models seen: {seen}")]
    UnknownModel { model: String, since: String, seen: String },
    #[error("no governor sweep of model `{model}` in power state {state} in the last {since}; states measured: {measured}. Run `wattflip-agent governor sweep` on one of these drives first")]
    NoSweepState { model: String, state: u32, since: String, measured: String },
    #[error("no {what} in the last {since}: {hint}")]
    NoData { what: String, since: String, hint: String },
    #[error("--mix {file}: {message}")]
    Mix { file: String, message: String },
    #[error("--workload `{0}`: write PATTERN:SIZE, e.g. RR:4KiB or SW:128KiB")]
    Workload(String),
    #[error("{0}")]
    Input(String),
}

/// A minimal InfluxDB 1.x query client (the `/query` endpoint, ns epochs).
pub struct Influx {
    pub url: String,
    pub db: String,
    client: reqwest::Client,
    /// Set: queries of runs, inventory and events read their whole copies in this retention
    /// policy (`resolution::whole_policy`), rewritten by `resolution::rewrite_whole`.
    pub whole_rp: Option<String>,
}

/// One series of an answer.
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub tags: BTreeMap<String, String>,
    pub columns: Vec<String>,
    pub values: Vec<Vec<serde_json::Value>>,
}

impl Series {
    fn col(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }
    /// Numeric column `name` of row `i`.
    pub fn f(&self, i: usize, name: &str) -> Option<f64> {
        self.values.get(i)?.get(self.col(name)?)?.as_f64()
    }
    pub fn s(&self, i: usize, name: &str) -> Option<String> {
        self.values.get(i)?.get(self.col(name)?)?.as_str().map(str::to_string)
    }
}

/// InfluxQL string literal: single quotes escaped.
pub fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

impl Influx {
    pub fn new(url: &str, db: &str) -> Self {
        Influx { url: url.trim_end_matches('/').to_string(), db: db.to_string(), client: reqwest::Client::new(), whole_rp: None }
    }

    /// Runs `q`, reading the whole copies when [`Influx::whole_rp`] is set.
    pub async fn query(&self, q: &str) -> Result<Vec<Series>, PlanError> {
        match &self.whole_rp {
            Some(rp) => self.query_raw(&resolution::rewrite_whole(q, rp)).await,
            None => self.query_raw(q).await,
        }
    }

    /// Runs `q` as written.
    pub async fn query_raw(&self, q: &str) -> Result<Vec<Series>, PlanError> {
        let started = std::time::Instant::now();
        let resp = self
            .client
            .get(format!("{}/query", self.url))
            .query(&[("db", self.db.as_str()), ("q", q), ("epoch", "ns")])
            .send()
            .await
            .map_err(|e| PlanError::Http { url: self.url.clone(), message: e.without_url().to_string() })?;
        let body = resp.text().await.map_err(|e| PlanError::Http { url: self.url.clone(), message: e.without_url().to_string() })?;
        let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| PlanError::Http {
            url: self.url.clone(),
            message: format!("not a JSON answer ({e}): {}", body.chars().take(200).collect::<String>()),
        })?;
        let err = v.pointer("/results/0/error").or_else(|| v.get("error"));
        if let Some(e) = err {
            return Err(PlanError::Query { query: q.to_string(), message: e.as_str().unwrap_or_default().to_string() });
        }
        let series = v.pointer("/results/0/series").and_then(|s| s.as_array()).cloned().unwrap_or_default();
        // Which query a slow plan waits for (RUST_LOG=debug).
        tracing::debug!(
            ms = started.elapsed().as_millis() as u64,
            series = series.len(),
            bytes = body.len(),
            "plan query: {}",
            q.chars().take(240).collect::<String>()
        );
        Ok(series
            .into_iter()
            .map(|s| Series {
                tags: s
                    .get("tags")
                    .and_then(|t| t.as_object())
                    .map(|o| o.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
                    .unwrap_or_default(),
                columns: s
                    .get("columns")
                    .and_then(|c| c.as_array())
                    .map(|c| c.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
                    .unwrap_or_default(),
                values: s.get("values").and_then(|v| v.as_array()).map(|rows| rows.iter().filter_map(|r| r.as_array().cloned()).collect()).unwrap_or_default(),
            })
            .collect())
    }

    /// Models with inventory or probe data in the window, sorted, or `none`. Counted from the
    /// points themselves: `SHOW TAG VALUES … WHERE time` only filters by shard in 1.x, so it
    /// would name models that have no data in a short window.
    async fn models(&self, since: &str) -> String {
        let mut seen = std::collections::BTreeSet::new();
        for q in models_queries(since) {
            for s in self.query(&q).await.unwrap_or_default() {
                if let Some(m) = s.tags.get("model").filter(|m| !m.is_empty()) {
                    seen.insert(m.clone());
                }
            }
        }
        if seen.is_empty() {
            "none".into()
        } else {
            seen.into_iter().collect::<Vec<_>>().join(", ")
        }
    }

    /// The error for a model without data: an empty window when nothing at all was measured in
    /// it, else an unknown model with the models that were.
    pub async fn unknown_model(&self, model: &str, since: &str) -> PlanError {
        let seen = self.models(since).await;
        if seen == "none" {
            return empty_window(since);
        }
        PlanError::UnknownModel { model: model.into(), since: since.into(), seen }
    }

    /// Number of distinct drives of `model` in the inventory: (host, serial), or (host, device)
    /// for a device without a serial. The inventory lists namespaces (`nvme0n1`, `nvme0n2`), and
    /// the namespaces of one controller share its serial and its power.
    pub async fn drive_count(&self, model: &str, since: &str) -> Result<usize, PlanError> {
        let q = format!(
            "SELECT last(\"capacity_bytes\") FROM \"inventory\" WHERE \"model\" = {} AND time > now() - {since} GROUP BY \"host\", \"serial\", \"device\"",
            lit(model)
        );
        Ok(count_drives(&self.query(&q).await?))
    }
}

/// The queries behind "models seen": inventory and probe-run points per model in the window.
pub fn models_queries(since: &str) -> [String; 2] {
    [
        format!("SELECT count(\"capacity_bytes\") FROM \"inventory\" WHERE time > now() - {since} GROUP BY \"model\""),
        format!("SELECT count(\"duration_s\") FROM \"probe_run\" WHERE time > now() - {since} GROUP BY \"model\""),
    ]
}

pub fn empty_window(since: &str) -> PlanError {
    PlanError::NoData {
        what: "inventory or probe data at all".into(),
        since: since.into(),
        hint: "the time range is empty: widen --since (or check --influx-db)".into(),
    }
}

/// Distinct drives among inventory series tagged host, serial and device.
fn count_drives(series: &[Series]) -> usize {
    let tag = |s: &Series, k: &str| s.tags.get(k).cloned().unwrap_or_default();
    let drives: std::collections::BTreeSet<(String, String)> = series
        .iter()
        .map(|s| {
            let serial = tag(s, "serial");
            (tag(s, "host"), if serial.is_empty() { format!("device:{}", tag(s, "device")) } else { serial })
        })
        .collect();
    drives.len()
}

/// Mean power of a run: the measured mean over its IO window (`power_w`, written by governor
/// sweeps) when present, else its energy over its duration. `power_w` comes first because a run's
/// `energy_j` lasts until power is back to idle, so energy / IO duration overstates the power of
/// a run with background work.
fn run_watts(s: &Series, i: usize) -> Option<f64> {
    if let Some(w) = s.f(i, "power_w") {
        return Some(w);
    }
    let (e, d) = (s.f(i, "energy_j")?, s.f(i, "duration_s")?);
    (d > 0.0).then(|| e / d)
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

// ---------------------------------------------------------------- power cap

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PatternCap {
    pub pattern: String,
    pub weight: f64,
    pub base_state: u32,
    pub base_w: f64,
    pub capped_w: f64,
    pub saved_w_per_drive: f64,
    pub base_mib_per_s: f64,
    pub capped_mib_per_s: f64,
    pub throughput_lost_pct: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PowerCapPlan {
    pub model: String,
    pub state: u32,
    pub drives: usize,
    pub patterns: Vec<PatternCap>,
    /// Σ weight × saved per drive × drives.
    pub fleet_saved_w: f64,
    /// Σ weight × throughput lost.
    pub throughput_lost_pct: f64,
}

/// `[mix]` weights by sweep pattern (`"SW:128KiB" = 0.5`), normalised to sum 1.
pub fn parse_mix(file: &str, text: &str) -> Result<BTreeMap<String, f64>, PlanError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Mix {
        mix: BTreeMap<String, f64>,
    }
    let m: Mix = toml::from_str(text).map_err(|e| PlanError::Mix { file: file.into(), message: e.to_string() })?;
    let total: f64 = m.mix.values().sum();
    if m.mix.is_empty() || total <= 0.0 || m.mix.values().any(|w| *w < 0.0 || !w.is_finite()) {
        return Err(PlanError::Mix { file: file.into(), message: "[mix] needs non-negative weights with a positive sum".into() });
    }
    Ok(m.mix.into_iter().map(|(k, w)| (k, w / total)).collect())
}

pub fn power_cap_query(model: &str, since: &str) -> String {
    format!(
        "SELECT \"value\", \"mib_per_s\", \"power_w\", \"energy_j\", \"duration_s\", \"experiment\" FROM \"probe_run\" \
         WHERE \"bench\" = 'governor_sweep' AND \"model\" = {} AND time > now() - {since}",
        lit(model)
    )
}

pub async fn power_cap(db: &Influx, model: &str, state: u32, mix: Option<BTreeMap<String, f64>>, since: &str) -> Result<PowerCapPlan, PlanError> {
    let rows = db.query(&power_cap_query(model, since)).await?;
    let drives = db.drive_count(model, since).await?;
    let s = rows.into_iter().next().unwrap_or_default();
    if s.values.is_empty() && drives == 0 {
        return Err(db.unknown_model(model, since).await);
    }
    // (pattern, state) → (watts, MiB/s) samples
    let mut by: BTreeMap<(String, u32), (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for i in 0..s.values.len() {
        let (Some(exp), Some(st), Some(tp)) = (s.s(i, "experiment"), s.f(i, "value"), s.f(i, "mib_per_s")) else {
            continue;
        };
        let pattern = exp.trim_start_matches("governor_sweep/").to_string();
        let e = by.entry((pattern, st as u32)).or_default();
        if let Some(w) = run_watts(&s, i) {
            e.0.push(w);
        }
        e.1.push(tp);
    }
    let states: std::collections::BTreeSet<u32> = by.keys().map(|k| k.1).collect();
    if !states.contains(&state) {
        let measured = if states.is_empty() { "none".into() } else { states.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ") };
        return Err(PlanError::NoSweepState { model: model.into(), state, since: since.into(), measured });
    }
    // The uncapped reference is the lowest-numbered (highest-power) state measured.
    let base_state = *states.iter().next().unwrap_or(&0);
    let patterns: Vec<String> = {
        let mut p: Vec<String> = by.keys().filter(|k| k.1 == state).map(|k| k.0.clone()).collect();
        p.dedup();
        p
    };
    let weights: BTreeMap<String, f64> = match mix {
        Some(m) => m,
        None => patterns.iter().map(|p| (p.clone(), 1.0 / patterns.len() as f64)).collect(),
    };
    let mut out = Vec::new();
    for (pattern, weight) in &weights {
        let (Some(base), Some(capped)) = (by.get(&(pattern.clone(), base_state)), by.get(&(pattern.clone(), state))) else {
            return Err(PlanError::NoData {
                what: format!("governor sweep of `{pattern}` for model {model} in states {base_state} and {state}"),
                since: since.into(),
                hint: format!("the mix names a pattern the sweeps did not measure; measured: {}", patterns.join(", ")),
            });
        };
        let (Some(bw), Some(cw)) = (mean(&base.0), mean(&capped.0)) else {
            return Err(PlanError::NoData {
                what: format!("energy for the `{pattern}` sweep runs of model {model}"),
                since: since.into(),
                hint: "run the sweep with a power source recorded (RAPL, hwmon, a drive rail monitor)".into(),
            });
        };
        let (bt, ct) = (mean(&base.1).unwrap_or(0.0), mean(&capped.1).unwrap_or(0.0));
        out.push(PatternCap {
            pattern: pattern.clone(),
            weight: *weight,
            base_state,
            base_w: bw,
            capped_w: cw,
            saved_w_per_drive: bw - cw,
            base_mib_per_s: bt,
            capped_mib_per_s: ct,
            throughput_lost_pct: if bt > 0.0 { 100.0 * (bt - ct) / bt } else { 0.0 },
        });
    }
    if drives == 0 {
        // Sweep data but no inventory: the fleet size is unknown, and 0 drives would answer 0 W.
        return Err(PlanError::NoData {
            what: format!("inventory of model {model}"),
            since: since.into(),
            hint: "the fleet size comes from the agents' inventory: run `wattflip-agent run` on the hosts with these drives".into(),
        });
    }
    let fleet_saved_w = drives as f64 * out.iter().map(|p| p.weight * p.saved_w_per_drive).sum::<f64>();
    let throughput_lost_pct = out.iter().map(|p| p.weight * p.throughput_lost_pct).sum();
    Ok(PowerCapPlan { model: model.into(), state, drives, patterns: out, fleet_saved_w, throughput_lost_pct })
}

pub fn power_cap_table(p: &PowerCapPlan) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Power cap: {} drives of model {} in power state {}", p.drives, p.model, p.state);
    let _ = writeln!(
        s,
        "{:<14} {:>7} {:>9} {:>9} {:>10} {:>11} {:>11} {:>8}",
        "pattern", "weight", "base W", "capped W", "saved W", "base MiB/s", "capped MiB/s", "lost %"
    );
    for r in &p.patterns {
        let _ = writeln!(
            s,
            "{:<14} {:>7.3} {:>9.3} {:>9.3} {:>10.3} {:>11.1} {:>11.1} {:>8.2}",
            r.pattern, r.weight, r.base_w, r.capped_w, r.saved_w_per_drive, r.base_mib_per_s, r.capped_mib_per_s, r.throughput_lost_pct
        );
    }
    let _ = writeln!(s, "Fleet power saved: {:.3} W; throughput lost for this mix: {:.2} %", p.fleet_saved_w, p.throughput_lost_pct);
    s
}

/// A budget must be a positive, finite number of watts.
pub fn check_budget(budget_w: f64) -> Result<(), PlanError> {
    if budget_w.is_finite() && budget_w > 0.0 {
        Ok(())
    } else {
        Err(PlanError::Input(format!("--budget-w {budget_w}: the budget must be a positive, finite number of watts")))
    }
}

// ---------------------------------------------------------------- capacity

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CapacityPlan {
    pub model: String,
    pub workload: String,
    pub budget_w: f64,
    pub watts_per_drive: f64,
    pub drives: u64,
    pub mib_per_s_per_drive: f64,
    pub iops_per_drive: f64,
    pub total_mib_per_s: f64,
    pub total_iops: f64,
}

/// `RR:4KiB` → ("RR", 4096).
pub fn parse_workload(w: &str) -> Result<(String, u64), PlanError> {
    let (p, size) = w.split_once(':').ok_or_else(|| PlanError::Workload(w.into()))?;
    let p = p.to_ascii_uppercase();
    if !["SR", "RR", "SW", "RW"].contains(&p.as_str()) {
        return Err(PlanError::Workload(w.into()));
    }
    let size = size.trim();
    let (num, mult) = if let Some(n) = size.strip_suffix("KiB") {
        (n, 1024)
    } else if let Some(n) = size.strip_suffix("MiB") {
        (n, 1 << 20)
    } else {
        (size, 1)
    };
    let n: u64 = num.parse().map_err(|_| PlanError::Workload(w.into()))?;
    Ok((p, n * mult))
}

pub fn capacity_query(model: &str, pattern: &str, since: &str) -> String {
    format!(
        "SELECT \"value\", \"energy_j\", \"duration_s\", \"mib_per_s\", \"iops\" FROM \"probe_run\" \
         WHERE \"model\" = {} AND \"experiment\" = {} AND time > now() - {since}",
        lit(model),
        lit(&format!("granularity/{pattern}"))
    )
}

pub async fn capacity(db: &Influx, model: &str, budget_w: f64, workload: &str, since: &str) -> Result<CapacityPlan, PlanError> {
    check_budget(budget_w)?;
    let (pattern, size) = parse_workload(workload)?;
    let series = db.query(&capacity_query(model, &pattern, since)).await?;
    let s = series.into_iter().next().unwrap_or_default();
    let rows: Vec<usize> = (0..s.values.len()).filter(|&i| s.f(i, "value") == Some(size as f64)).collect();
    if rows.is_empty() {
        if db.drive_count(model, since).await? == 0 && s.values.is_empty() {
            return Err(db.unknown_model(model, since).await);
        }
        return Err(PlanError::NoData {
            what: format!("Granularity probe of model {model} at {workload}"),
            since: since.into(),
            hint: "run `wattflip-agent probe --bench granularity` on a drive of this model".into(),
        });
    }
    let watts: Vec<f64> = rows.iter().filter_map(|&i| run_watts(&s, i)).collect();
    let Some(w) = mean(&watts).filter(|w| *w > 0.0) else {
        return Err(PlanError::NoData {
            what: format!("energy for model {model} at {workload}"),
            since: since.into(),
            hint: "the probes ran without a power source; record one (hwmon/PMBus drive rail, RAPL) or import a shunt trace".into(),
        });
    };
    let tp = mean(&rows.iter().filter_map(|&i| s.f(i, "mib_per_s")).collect::<Vec<_>>()).unwrap_or(0.0);
    let iops = mean(&rows.iter().filter_map(|&i| s.f(i, "iops")).collect::<Vec<_>>()).unwrap_or(0.0);
    let drives = drives_within(budget_w, w);
    Ok(CapacityPlan {
        model: model.into(),
        workload: workload.into(),
        budget_w,
        watts_per_drive: w,
        drives,
        mib_per_s_per_drive: tp,
        iops_per_drive: iops,
        total_mib_per_s: drives as f64 * tp,
        total_iops: drives as f64 * iops,
    })
}

/// ⌊budget / watts per drive⌋, counted so that float noise never loses a drive: a quotient within
/// 1e-9 (relative) below an integer is that integer (30 W / (2.1 J / 0.7 s) computes as
/// 9.999999999999998, and is 10 drives).
pub fn drives_within(budget_w: f64, watts_per_drive: f64) -> u64 {
    let q = budget_w / watts_per_drive;
    let nearest = q.round();
    let n = if (q - nearest).abs() <= 1e-9 * nearest.abs().max(1.0) { nearest } else { q.floor() };
    n.max(0.0) as u64
}

pub fn capacity_table(p: &CapacityPlan) -> String {
    format!(
        "Capacity: model {} at {} within {:.1} W\n  {:.3} W per drive → {} drives\n  {:.1} MiB/s and {:.0} IOPS per drive → {:.1} MiB/s and {:.0} IOPS in total\n",
        p.model, p.workload, p.budget_w, p.watts_per_drive, p.drives, p.mib_per_s_per_drive, p.iops_per_drive, p.total_mib_per_s, p.total_iops
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_mixes_and_workloads() {
        assert_eq!(lit("it's"), "'it\\'s'");
        let m = parse_mix("m.toml", "[mix]\n\"SW:128KiB\" = 3\n\"RR:4KiB\" = 1\n").unwrap();
        assert_eq!(m.get("SW:128KiB"), Some(&0.75));
        assert!(parse_mix("m.toml", "[mix]\n").is_err());
        assert!(parse_mix("m.toml", "[mixx]\na = 1\n").is_err());
        assert_eq!(parse_workload("rr:4KiB").unwrap(), ("RR".to_string(), 4096));
        assert_eq!(parse_workload("SW:1MiB").unwrap(), ("SW".to_string(), 1 << 20));
        assert!(parse_workload("XX:4KiB").is_err());
        assert!(parse_workload("RR").is_err());
    }

    #[test]
    fn run_power_prefers_the_measured_mean_over_energy_per_duration() {
        use serde_json::{json, Value};
        let s = Series {
            columns: ["time", "power_w", "energy_j", "duration_s"].map(String::from).to_vec(),
            values: vec![
                vec![json!(1), json!(5.25), json!(6.0), json!(1.0)],
                vec![json!(2), Value::Null, json!(6.0), json!(2.0)],
                vec![json!(3), Value::Null, Value::Null, json!(1.0)],
            ],
            ..Default::default()
        };
        assert_eq!((run_watts(&s, 0), run_watts(&s, 1), run_watts(&s, 2)), (Some(5.25), Some(3.0), None));
    }

    #[test]
    fn drive_counts_are_floors_without_float_drift() {
        let (budget, watts) = (std::hint::black_box(30.0), std::hint::black_box(2.1 / 0.7));
        assert!(budget / watts < 10.0, "the drift this guards against");
        assert_eq!(drives_within(30.0, 2.1 / 0.7), 10);
        assert_eq!(drives_within(29.9, 3.0), 9);
        assert_eq!(drives_within(100.0, 4.4), 22);
        assert_eq!(drives_within(1.0, 3.0), 0);
        for bad in [f64::NAN, f64::INFINITY, 0.0, -5.0] {
            let e = check_budget(bad).unwrap_err().to_string();
            assert!(e.contains("positive, finite number of watts"), "{e}");
        }
        assert!(check_budget(0.5).is_ok());
    }

    #[test]
    fn namespaces_of_one_controller_are_one_drive() {
        let inv = |host: &str, serial: &str, device: &str| Series {
            tags: [("host", host), ("serial", serial), ("device", device)].map(|(k, v)| (k.to_string(), v.to_string())).into(),
            ..Default::default()
        };
        let series = [inv("h1", "S1", "nvme0n1"), inv("h1", "S1", "nvme0n2"), inv("h2", "S1", "nvme0n1"), inv("h1", "", "sda"), inv("h1", "", "sdb")];
        assert_eq!(count_drives(&series), 4);
    }
}
