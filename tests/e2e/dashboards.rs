//! The Grafana dashboards proven without Grafana (`docs/conventions.md` §8.4): structural
//! checks of every dashboard and of the provisioning YAML, then every variable, panel and
//! annotation query run against a real `influxd` filled by a real fleet run (`harness/fleet.rs`),
//! after the substitution Grafana does. Each must succeed and return at least one series, every
//! column it returns must hold at least one value (a misspelled field in a multi-field SELECT is an
//! all-null column, not an error), and every field a panel's options name must be returned.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use wattflip_e2e::fleet::{
    seed_bucket, Fleet, COUNTER_PERIOD, HOSTS, RAPL_WATTS, SEED_CONTROLLER, SEED_EVENTS, SEED_NAMESPACE, SEED_PATTERNS, SEED_SIZES_KIB, SEED_TEMPERATURES,
    SEED_TEMP_DEVICE, SEED_TEMP_SENSOR, STALE_AGE_NS, STALE_HOST,
};

/// Every dashboard file, its uid and its panel titles in order: exactly these are checked.
const EXPECTED: &[(&str, &str, &[&str])] = &[
    (
        "device-efficiency.json",
        "wattflip-device-efficiency",
        &[
            "Efficiency by drive and profile",
            "IOPS/W per model and firmware",
            "MiB/s/W per model and firmware",
            "Ready-idle W/TB per model and firmware",
            "Phases without a stable interval",
            "IOPS/W per host and drive",
        ],
    ),
    (
        "device-energy-profile.json",
        "wattflip-device-energy",
        &[
            "Mean response time vs IO size (Figure 4)",
            "Energy per IO vs IO size",
            "J/MB vs IO size",
            "Background-work tail vs IO size",
            "Background work per experiment",
            "Runs",
            "Drive power mode",
        ],
    ),
    (
        "energy-proportionality.json",
        "wattflip-energy-proportionality",
        &["Normalised power vs load", "Proportionality gap per load level", "EP and dynamic range per model", "Efficiency per model", "EP per host"],
    ),
    (
        "fleet-overview.json",
        "wattflip-fleet",
        &[
            "Agents online",
            "Last seen per host",
            "Agents",
            "Power per host and source",
            "Temperatures",
            "Latest temperature per sensor",
            "Probe runs",
            "Energy in the range per zone",
            "Events",
            "Source agreement per host",
        ],
    ),
    (
        "power-budget.json",
        "wattflip-power-budget",
        &[
            "Power per $group_by",
            "Headroom per $group_by",
            "Measured peak vs budget",
            "Peak per host and zone",
            "Peak per host",
            "Hosts counted per $group_by and tier",
        ],
    ),
    (
        "throttling.json",
        "wattflip-throttling",
        &[
            "Temperature, throughput and power",
            "NVMe thermal management",
            "Throttle events",
            "Governor sweep: throughput vs power state",
            "Governor sweep: throughput vs power cap",
            "Power-state changes",
        ],
    ),
];

/// Panels with more than one target, and how many (every other panel has exactly one).
const MULTI_TARGET: &[(&str, &str, usize)] = &[("throttling.json", "Temperature, throughput and power", 3)];

/// Override matchers the checks understand: `byName` must name a column the panel's queries
/// return (checked against InfluxDB), `byFrameRefID` a refId of the panel.
const MATCHERS: &[&str] = &["byName", "byFrameRefID"];

/// Annotation names per dashboard (the others have none).
const ANNOTATIONS: &[(&str, &[&str])] = &[("throttling.json", &["Throttle events", "Power-state changes"])];

const PANEL_TYPES: &[&str] = &["timeseries", "table", "stat", "xychart", "bargauge"];

/// Names Grafana defines itself.
const BUILTINS: &[&str] = &["timeFilter", "__interval", "__interval_ms", "interval", "__from", "__to"];

fn dashboards_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards")
}

/// Every `*.json` in `dashboards/`, sorted by name, parsed.
pub(crate) fn load() -> Vec<(String, Value)> {
    let dir = dashboards_dir();
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(dir.join(&f)).unwrap_or_else(|e| panic!("cannot read dashboards/{f}: {e}"));
            let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("dashboards/{f} is not JSON: {e}"));
            (f, v)
        })
        .collect()
}

/// `key: value` of the YAML lines with that key (the provisioning files are ours and flat enough
/// that a line scan is exact; a second value for a key is an error the caller sees).
fn yaml_values(file: &str, key: &str) -> Vec<String> {
    let path = dashboards_dir().join("provisioning").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.trim_start().trim_start_matches("- ").strip_prefix(&format!("{key}:")).map(|v| v.trim().to_string()))
        .collect()
}

fn panels(d: &Value) -> &Vec<Value> {
    d["panels"].as_array().expect("panels array")
}

fn variables(d: &Value) -> &Vec<Value> {
    d["templating"]["list"].as_array().expect("templating.list array")
}

fn annotations(d: &Value) -> Vec<&Value> {
    d["annotations"]["list"].as_array().map(|a| a.iter().collect()).unwrap_or_default()
}

pub(crate) fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// Every `$name` / `${name}` a query uses.
fn used_variables(q: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = q.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' {
            let braced = b.get(i + 1) == Some(&b'{');
            let start = i + 1 + usize::from(braced);
            let end = start + b[start..].iter().take_while(|c| c.is_ascii_alphanumeric() || **c == b'_').count();
            if end > start {
                out.insert(q[start..end].to_string());
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// Every place a dashboard queries InfluxDB: (where, query), panels then annotations.
fn data_queries(file: &str, d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in panels(d) {
        for t in p["targets"].as_array().expect("targets") {
            out.push((format!("{file} panel {} `{}` refId {}", p["id"], s(&p["title"]), s(&t["refId"])), s(&t["query"]).to_string()));
        }
    }
    for a in annotations(d) {
        out.push((format!("{file} annotation `{}`", s(&a["name"])), s(&a["query"]).to_string()));
    }
    out
}

/// Every `datasource` anywhere in the JSON, and any numeric-id form.
fn datasource_refs<'a>(v: &'a Value, path: String, out: &mut Vec<(String, &'a Value)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{path}.{k}");
                if k == "datasource" || k == "datasourceId" {
                    out.push((p.clone(), x));
                }
                datasource_refs(x, p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                datasource_refs(x, format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn dashboards_and_provisioning_are_well_formed() {
    // Provisioning: one InfluxDB datasource whose uid every dashboard uses.
    let uids = yaml_values("datasources/wattflip.yaml", "uid");
    assert_eq!(uids, vec!["wattflip-influx"], "dashboards/provisioning/datasources/wattflip.yaml: exactly one datasource uid");
    let uid = uids[0].as_str();
    assert_eq!(yaml_values("datasources/wattflip.yaml", "apiVersion"), vec!["1"]);
    assert_eq!(yaml_values("datasources/wattflip.yaml", "type"), vec!["influxdb"]);
    assert_eq!(yaml_values("datasources/wattflip.yaml", "dbName"), vec!["wattflip"]);
    assert_eq!(yaml_values("dashboards/wattflip.yaml", "apiVersion"), vec!["1"]);
    assert_eq!(yaml_values("dashboards/wattflip.yaml", "type"), vec!["file"]);
    assert_eq!(yaml_values("dashboards/wattflip.yaml", "path"), vec!["/var/lib/grafana/dashboards/wattflip"]);

    // One definition of the provisioning: the Ansible role (deploy/ansible/roles/grafana) installs
    // these files with only the deployment's url, database, interval, credentials, folder and path
    // replaced, so its templates hold no setting of their own (tests/ansible/run.sh compares what
    // it installs with these files).
    let role = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/ansible/roles/grafana");
    for (template, source) in [("datasource.yaml.j2", "datasources/wattflip.yaml"), ("dashboards.yaml.j2", "dashboards/wattflip.yaml")] {
        let path = role.join("templates").join(template);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let own: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("{{")).collect();
        assert!(own.is_empty(), "{}: settings of its own {own:?}; set them in dashboards/provisioning/{source}", path.display());
        let tasks = std::fs::read_to_string(role.join("tasks/main.yml")).expect("grafana role tasks");
        assert!(tasks.contains(&format!("grafana_provisioning_src ~ '/{source}'")), "the grafana role does not read dashboards/provisioning/{source}");
    }
    let defaults = std::fs::read_to_string(role.join("defaults/main.yml")).expect("grafana role defaults");
    assert!(defaults.contains("grafana_provisioning_src: \"{{ playbook_dir }}/../../dashboards/provisioning\""), "grafana_provisioning_src");

    let all = load();
    let files: Vec<&str> = all.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(files, EXPECTED.iter().map(|e| e.0).collect::<Vec<_>>(), "dashboards/*.json");
    let mut problems: Vec<String> = Vec::new();
    let mut dashboard_uids = BTreeSet::new();
    for ((file, d), (_, want_uid, want_titles)) in all.iter().zip(EXPECTED) {
        let mut bad = |m: String| problems.push(format!("dashboards/{file}: {m}"));
        if s(&d["uid"]) != *want_uid || want_uid.len() > 40 || !dashboard_uids.insert(want_uid) {
            bad(format!("uid {} (want {want_uid}, ≤ 40 characters, unique)", d["uid"]));
        }
        if !(39..=41).contains(&d["schemaVersion"].as_i64().unwrap_or(0)) {
            bad(format!("schemaVersion {} is outside 39–41", d["schemaVersion"]));
        }
        let titles: Vec<&str> = panels(d).iter().map(|p| s(&p["title"])).collect();
        if titles != *want_titles {
            bad(format!("panel titles {titles:?}, expected {want_titles:?}"));
        }
        let want_annotations = ANNOTATIONS.iter().find(|a| a.0 == file).map(|a| a.1.to_vec()).unwrap_or_default();
        let names: Vec<&str> = annotations(d).iter().map(|a| s(&a["name"])).collect();
        if names != want_annotations {
            bad(format!("annotations {names:?}, expected {want_annotations:?}"));
        }

        // Datasources by the provisioned uid only, never a numeric id or a bare name.
        let mut refs = Vec::new();
        datasource_refs(d, String::new(), &mut refs);
        for (path, v) in refs {
            if v.get("uid").and_then(Value::as_str) != Some(uid) || v.get("type").and_then(Value::as_str) != Some("influxdb") {
                bad(format!("{path} = {v}: must be {{\"type\": \"influxdb\", \"uid\": \"{uid}\"}}"));
            }
        }

        // Panels: known types, unique ids, unique refIds, raw InfluxQL, and a grid without overlaps.
        let mut ids = BTreeSet::new();
        let mut cells: BTreeMap<(i64, i64), i64> = BTreeMap::new();
        for p in panels(d) {
            let id = p["id"].as_i64().unwrap_or(-1);
            if !ids.insert(id) {
                bad(format!("panel id {id} is used twice"));
            }
            if !PANEL_TYPES.contains(&s(&p["type"])) {
                bad(format!("panel {id}: type {} is not one of {PANEL_TYPES:?}", p["type"]));
            }
            let mut refs = BTreeSet::new();
            for t in p["targets"].as_array().map(Vec::as_slice).unwrap_or_default() {
                if !refs.insert(s(&t["refId"])) {
                    bad(format!("panel {id}: refId {} twice", t["refId"]));
                }
                if t["rawQuery"] != Value::Bool(true) || s(&t["query"]).is_empty() {
                    bad(format!("panel {id} refId {}: needs rawQuery: true and an InfluxQL query", t["refId"]));
                }
            }
            let want_targets = MULTI_TARGET.iter().find(|m| m.0 == file && m.1 == s(&p["title"])).map_or(1, |m| m.2);
            if refs.len() != want_targets {
                bad(format!("panel {id} has {} target(s), expected {want_targets}", refs.len()));
            }
            for o in p["fieldConfig"]["overrides"].as_array().map(Vec::as_slice).unwrap_or_default() {
                let (kind, name) = (s(&o["matcher"]["id"]), s(&o["matcher"]["options"]));
                if !MATCHERS.contains(&kind) {
                    bad(format!("panel {id}: override matcher {kind} is not checked by this test; use one of {MATCHERS:?} or add its check"));
                }
                if kind == "byFrameRefID" && !refs.contains(name) {
                    bad(format!("panel {id}: override for refId {name}, which is not one of its targets {refs:?}"));
                }
            }
            let g = &p["gridPos"];
            let (x, y, w, h) = (g["x"].as_i64().unwrap_or(-1), g["y"].as_i64().unwrap_or(-1), g["w"].as_i64().unwrap_or(0), g["h"].as_i64().unwrap_or(0));
            if x < 0 || y < 0 || w <= 0 || h <= 0 || x + w > 24 {
                bad(format!("panel {id}: gridPos {g} is outside the 24-column grid"));
            }
            for cx in x..x + w {
                for cy in y..y + h {
                    if let Some(other) = cells.insert((cx, cy), id) {
                        bad(format!("panel {id} overlaps panel {other} at column {cx}, row {cy}"));
                    }
                }
            }
        }

        // Variables: unique, and a variable query refers only to variables defined before it.
        let mut defined: BTreeSet<String> = BUILTINS.iter().map(|b| b.to_string()).collect();
        for v in variables(d) {
            let name = s(&v["name"]).to_string();
            for used in used_variables(s(&v["query"])) {
                if !defined.contains(&used) {
                    bad(format!("variable `{name}` uses ${used}, which is not defined before it"));
                }
            }
            if !defined.insert(name.clone()) {
                bad(format!("variable `{name}` is defined twice"));
            }
        }
        // Queries: every variable defined, every SELECT (subqueries too) bounded by $timeFilter,
        // time buckets only by $__interval; and every variable used by some panel or annotation
        // (a selector that filters nothing misleads).
        let mut unused: BTreeSet<String> = variables(d).iter().map(|v| s(&v["name"]).to_string()).collect();
        for (place, q) in data_queries(file, d) {
            for used in used_variables(&q) {
                unused.remove(&used);
                if !defined.contains(&used) {
                    bad(format!("{place}: ${used} is not a template variable"));
                }
            }
            let selects = q.matches("SELECT").count();
            let bounds = q.matches("$timeFilter").count();
            if selects == 0 || bounds != selects {
                bad(format!("{place}: {selects} SELECT(s) but {bounds} $timeFilter: bound every level: {q}"));
            }
            if q.matches("GROUP BY time(").count() != q.matches("GROUP BY time($__interval)").count() {
                bad(format!("{place}: GROUP BY time() must use $__interval: {q}"));
            }
        }
        if !unused.is_empty() {
            bad(format!("variables {unused:?} are defined but no panel or annotation query uses them"));
        }
    }
    assert!(problems.is_empty(), "{} problem(s):\n{}", problems.len(), problems.join("\n"));
}

/// Grafana's regex escaping of a variable value (`escapeRegex` in `@grafana/data`).
pub(crate) fn escape_regex(v: &str) -> String {
    let mut out = String::new();
    for c in v.chars() {
        if "\\^$*+?.()|[]{}/".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// What Grafana sends to InfluxDB for a query: the time range, the interval, then each variable.
pub(crate) fn substitute(q: &str, vars: &BTreeMap<String, String>, from_ms: i64, to_ms: i64) -> String {
    let q = q
        .replace("$timeFilter", &format!("time >= {from_ms}ms and time <= {to_ms}ms"))
        .replace("${__from}", &from_ms.to_string())
        .replace("${__to}", &to_ms.to_string())
        .replace("$__interval_ms", "10000")
        .replace("$__interval", "10s")
        .replace("$interval", "10s");
    let mut out = String::new();
    let mut rest = q.as_str();
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let braced = after.starts_with('{');
        let body = if braced { &after[1..] } else { after };
        let n = body.bytes().take_while(|c| c.is_ascii_alphanumeric() || *c == b'_').count();
        let name = &body[..n];
        match vars.get(name) {
            Some(v) if n > 0 && (!braced || body[n..].starts_with('}')) => {
                out.push_str(v);
                rest = &body[n + usize::from(braced)..];
            }
            // Not a variable (e.g. the `$/` ending a regex), or unknown: left as is, so InfluxDB
            // answers "missing parameter" and the test names the query.
            _ => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Runs a query; the number of series, or the error to report.
pub(crate) fn run(influx_url: &str, db: &str, q: &str) -> Result<Vec<Value>, String> {
    let resp = reqwest::blocking::Client::new()
        .get(format!("{influx_url}/query"))
        .query(&[("db", db), ("q", q), ("epoch", "ms")])
        .send()
        .map_err(|e| format!("HTTP: {e}"))?;
    let v: Value = resp.json().map_err(|e| format!("not JSON: {e}"))?;
    if let Some(e) = v.get("error").or_else(|| v.pointer("/results/0/error")) {
        return Err(format!("InfluxDB error: {e}"));
    }
    Ok(v.pointer("/results/0/series").and_then(Value::as_array).cloned().unwrap_or_default())
}

/// Columns other than `time` without a single value in any series of a result: a field
/// misspelled inside a multi-field SELECT comes back as such a column, not as an error.
fn empty_columns(series: &[Value]) -> Vec<String> {
    let mut filled: BTreeMap<String, bool> = BTreeMap::new();
    for x in series {
        let columns: Vec<&str> = x["columns"].as_array().map(|c| c.iter().map(s).collect()).unwrap_or_default();
        let rows = x["values"].as_array().map(Vec::as_slice).unwrap_or_default();
        for (i, c) in columns.iter().enumerate().filter(|(_, c)| **c != "time") {
            let any = rows.iter().any(|r| r.get(i).is_some_and(|v| !v.is_null()));
            *filled.entry(c.to_string()).or_default() |= any;
        }
    }
    filled.into_iter().filter(|(_, any)| !any).map(|(c, _)| c).collect()
}

/// Every column name of a result.
fn columns(series: &[Value]) -> BTreeSet<String> {
    series.iter().flat_map(|x| x["columns"].as_array().cloned().unwrap_or_default()).map(|c| s(&c).to_string()).collect()
}

/// The fields a panel's options name: the xychart's x field and excluded fields (`dims`), its
/// manual series' x and y, and every `byName` override. Each must be a column the panel's
/// queries return, or Grafana silently plots nothing (or the wrong axis).
fn field_refs(p: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let dims = &p["options"]["dims"];
    if let Some(x) = dims["x"].as_str() {
        out.push(("options.dims.x".to_string(), x.to_string()));
    }
    for e in dims["exclude"].as_array().map(Vec::as_slice).unwrap_or_default() {
        out.push(("options.dims.exclude".to_string(), s(e).to_string()));
    }
    for (i, ser) in p["options"]["series"].as_array().map(Vec::as_slice).unwrap_or_default().iter().enumerate() {
        for axis in ["x", "y"] {
            // Older xychart: a field name; newer: {"matcher": {"id": "byName", "options": name}}.
            let name = ser[axis].as_str().or_else(|| ser[axis]["matcher"]["options"].as_str());
            if let Some(n) = name {
                out.push((format!("options.series[{i}].{axis}"), n.to_string()));
            }
        }
    }
    for o in p["fieldConfig"]["overrides"].as_array().map(Vec::as_slice).unwrap_or_default() {
        if s(&o["matcher"]["id"]) == "byName" {
            out.push(("fieldConfig.overrides byName".to_string(), s(&o["matcher"]["options"]).to_string()));
        }
    }
    out
}

/// The dashboard's variables as Grafana sets them on load: each query variable run (after the
/// ones before it) and set to "All", custom and textbox variables to their current value.
fn resolve_variables(
    file: &str,
    d: &Value,
    fleet: &Fleet,
    range: (i64, i64),
    failures: &mut Vec<String>,
    checked: &mut Vec<String>,
) -> BTreeMap<String, String> {
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    for v in variables(d) {
        let name = s(&v["name"]).to_string();
        let place = format!("{file} variable `{name}`");
        let value = match s(&v["type"]) {
            "query" => {
                let q = substitute(s(&v["query"]), &vars, range.0, range.1);
                let mut values: Vec<String> = match run(&fleet.influx.url, &fleet.db, &q) {
                    Ok(series) => series
                        .iter()
                        .flat_map(|x| x["values"].as_array().cloned().unwrap_or_default())
                        .filter_map(|row| row.get(1).and_then(Value::as_str).map(str::to_string))
                        .collect(),
                    Err(e) => {
                        failures.push(format!("{place}: {e}\n  query: {q}"));
                        Vec::new()
                    }
                };
                // A query over several measurements returns a value once per measurement;
                // Grafana keeps each value once.
                let mut seen = BTreeSet::new();
                values.retain(|x| seen.insert(x.clone()));
                if values.is_empty() {
                    failures.push(format!("{place}: no values\n  query: {q}"));
                }
                checked.push(place);
                // "All" of a multi-value variable is a regex alternation of escaped values;
                // a single-value variable takes its first option.
                if v["multi"] == Value::Bool(true) || v["includeAll"] == Value::Bool(true) {
                    let esc: Vec<String> = values.iter().map(|x| escape_regex(x)).collect();
                    if esc.len() == 1 {
                        esc[0].clone()
                    } else {
                        format!("({})", esc.join("|"))
                    }
                } else {
                    values.first().cloned().unwrap_or_default()
                }
            }
            "custom" | "textbox" => {
                let current = s(&v["current"]["value"]).to_string();
                let options: Vec<&str> = v["options"].as_array().map(|o| o.iter().map(|x| s(&x["value"])).collect()).unwrap_or_default();
                assert!(options.contains(&current.as_str()), "{place}: current value `{current}` is not among its options {options:?}");
                current
            }
            other => panic!("{place}: variable type `{other}` is not handled by this test; add its Grafana substitution"),
        };
        vars.insert(name, value);
    }
    vars
}

/// The resolution variables (`rp`, `peak_celsius`, `peak_watts`, `power_rp`) as Grafana sets them for
/// `range`: each one's query run against the collector's markers (docs/schema.md, *Dashboards:
/// resolution by range*). A marker missing is a failure: the panels would read no policy.
pub(crate) fn resolution_vars(influx_url: &str, db: &str, d: &Value, range: (i64, i64)) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for v in variables(d).iter().filter(|v| ["rp", "peak_celsius", "peak_watts", "power_rp"].contains(&s(&v["name"]))) {
        let q = substitute(s(&v["query"]), &BTreeMap::new(), range.0, range.1);
        let series = run(influx_url, db, &q)?;
        let value = series.first().and_then(|x| x["values"][0][1].as_str()).ok_or_else(|| format!("variable `{}`: no value\n  query: {q}", s(&v["name"])))?;
        out.insert(s(&v["name"]).to_string(), value.to_string());
    }
    Ok(out)
}

/// A panel by title.
pub(crate) fn panel<'a>(d: &'a Value, title: &str) -> &'a Value {
    panels(d).iter().find(|p| s(&p["title"]) == title).unwrap_or_else(|| panic!("no panel `{title}`"))
}

/// One target of a panel run with `vars`: its series.
fn run_target(fleet: &Fleet, p: &Value, ref_id: &str, vars: &BTreeMap<String, String>, range: (i64, i64)) -> Vec<Value> {
    let t = p["targets"].as_array().expect("targets").iter().find(|t| s(&t["refId"]) == ref_id).expect("refId");
    let q = substitute(s(&t["query"]), vars, range.0, range.1);
    run(&fleet.influx.url, &fleet.db, &q).unwrap_or_else(|e| panic!("{e}\n  query: {q}"))
}

/// (tags, non-null values of column 1) of each series.
fn tagged_values(series: &[Value]) -> Vec<(Value, Vec<Value>)> {
    series
        .iter()
        .map(|x| {
            let vals = x["values"].as_array().map(|r| r.iter().filter_map(|row| row.get(1).filter(|v| !v.is_null()).cloned()).collect());
            (x["tags"].clone(), vals.unwrap_or_default())
        })
        .collect()
}

/// (time ms, value) of each row of a series whose column `col` holds a number.
fn points(x: &Value, col: usize) -> Vec<(i64, f64)> {
    x["values"].as_array().map(Vec::as_slice).unwrap_or_default().iter().filter_map(|r| Some((r[0].as_i64()?, r[col].as_f64()?))).collect()
}

/// Every row of a series without its time, as numbers (NaN where a cell is not one).
fn numeric_rows(x: &Value) -> Vec<Vec<f64>> {
    let rows = x["values"].as_array().map(Vec::as_slice).unwrap_or_default();
    rows.iter().map(|r| r.as_array().map(Vec::as_slice).unwrap_or_default().iter().skip(1).map(|v| v.as_f64().unwrap_or(f64::NAN)).collect()).collect()
}

/// The 10 s bucket (the test's `$__interval`) holding `ns`, in ms as InfluxDB returns it.
fn bucket_ms(ns: i64) -> i64 {
    ns.div_euclid(10_000_000_000) * 10_000
}

/// Relative closeness for computed floats (InfluxDB and the test may add in another order).
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

/// The seeded drive's probe runs (harness/fleet.rs `seed`), by hand: (experiment, ns after the
/// seed's t0, MiB/s). Granularity: pattern p, size s at (3p + s) s, MiB/s = IOPS · KiB / 1024
/// with IOPS = 10⁶ / mean µs and mean µs = (20 sequential, 90 random) + 2 · KiB (+ 15 writes).
/// Governor sweep: state k's SW 128 KiB run at 20 + 2k s (2000, 1250, 600 MiB/s) and its RR
/// 4 KiB run 1 s later (410, 405, 398). Load ladders at 1.6 · u MiB/s, u = 0.1 … 1: the rail RR
/// at 0 … 9 s, the rail SW at 12 … 21 s, the psys RR at 24 … 33 s.
fn seeded_drive_runs() -> Vec<(String, i64, f64)> {
    let s = 1_000_000_000i64;
    let mut out = Vec::new();
    for (p, pattern) in SEED_PATTERNS.iter().enumerate() {
        for (k, kib) in SEED_SIZES_KIB.iter().enumerate() {
            let kib = *kib as f64;
            let mean_us = if pattern.starts_with('S') { 20.0 } else { 90.0 } + 2.0 * kib + if pattern.ends_with('W') { 15.0 } else { 0.0 };
            out.push((format!("granularity/{pattern}"), (3 * p + k) as i64 * s, 1e6 / mean_us * kib / 1024.0));
        }
    }
    for (state, (seq, rand)) in [(2000.0, 410.0), (1250.0, 405.0), (600.0, 398.0)].into_iter().enumerate() {
        out.push(("governor_sweep/SW:128KiB".to_string(), (20 + 2 * state as i64) * s, seq));
        out.push(("governor_sweep/RR:4KiB".to_string(), (21 + 2 * state as i64) * s, rand));
    }
    for (experiment, first) in [("load_ladder/RR", 0), ("load_ladder/SW", 12), ("load_ladder/RR", 24)] {
        for i in 0..10 {
            out.push((experiment.to_string(), (first + i) * s, 1.6 * (i + 1) as f64 / 10.0));
        }
    }
    out
}

/// Runs one panel or annotation query after Grafana's substitution: it must succeed, return
/// series, and fill every column it returns. Its series, or none after a failure.
fn check_query(fleet: &Fleet, vars: &BTreeMap<String, String>, range: (i64, i64), place: String, q: &str, failures: &mut Vec<String>) -> Vec<Value> {
    let sent = substitute(q, vars, range.0, range.1);
    match run(&fleet.influx.url, &fleet.db, &sent) {
        Ok(series) if series.is_empty() => {
            failures.push(format!("{place}: no series\n  query: {sent}"));
            series
        }
        Ok(series) => {
            let empty = empty_columns(&series);
            if !empty.is_empty() {
                failures.push(format!("{place}: column(s) {empty:?} hold no value in any series (a misspelled field?)\n  query: {sent}"));
            }
            series
        }
        Err(e) => {
            failures.push(format!("{place}: {e}\n  query: {sent}"));
            Vec::new()
        }
    }
}

#[test]
fn every_dashboard_query_returns_series_after_a_real_fleet_run() {
    let fleet = Fleet::start("wf_dash");
    // The dashboard's time range, in ms like Grafana: the whole run with a minute on each side,
    // reaching back far enough to include the stale agent's only samples.
    let range = ((fleet.started_ns - STALE_AGE_NS) / 1_000_000 - 60_000, fleet.ended_ns / 1_000_000 + 60_000);
    let mut failures: Vec<String> = Vec::new();
    let mut checked: Vec<String> = Vec::new();
    let mut dashboards: BTreeMap<String, (Value, BTreeMap<String, String>)> = BTreeMap::new();
    for (file, d) in load() {
        let vars = resolve_variables(&file, &d, &fleet, range, &mut failures, &mut checked);
        let mut check = |place: String, q: &str, failures: &mut Vec<String>| {
            checked.push(place.clone());
            check_query(&fleet, &vars, range, place, q, failures)
        };
        for p in panels(&d) {
            let mut returned = BTreeSet::new();
            for t in p["targets"].as_array().expect("targets") {
                let place = format!("{file} panel {} `{}` refId {}", p["id"], s(&p["title"]), s(&t["refId"]));
                returned.extend(columns(&check(place, s(&t["query"]), &mut failures)));
            }
            for (option, name) in field_refs(p) {
                if !returned.contains(&name) {
                    failures.push(format!("{file} panel {} `{}`: {option} names `{name}`, but its queries return only {returned:?}", p["id"], s(&p["title"])));
                }
            }
        }
        for a in annotations(&d) {
            check(format!("{file} annotation `{}`", s(&a["name"])), s(&a["query"]), &mut failures);
        }
        dashboards.insert(file, (d, vars));
    }
    assert!(failures.is_empty(), "{} of {} queries failed:\n{}", failures.len(), checked.len(), failures.join("\n"));
    // Exactly every variable, panel target and annotation of the expected dashboards.
    // Query variables: rp in each (power_rp in the power budget), peak_celsius (fleet, throttling), peak_watts (power budget);
    // host, model, device (device profile and energy proportionality), host, model, device, scope
    // (fleet; online_window is a literal), host (power budget; group_by and budget_w are
    // literals), host, model, device (throttling), host, model, firmware, device (device efficiency).
    let query_variables = checked.iter().filter(|c| c.contains(" variable ")).count();
    assert_eq!(query_variables, 6 + 2 + 1 + 3 + 3 + 4 + 1 + 3 + 4, "query variables run: {checked:#?}");
    let panels_n: usize = EXPECTED.iter().map(|e| e.2.len()).sum();
    let extra_targets: usize = MULTI_TARGET.iter().map(|m| m.2 - 1).sum();
    let annotations_n: usize = ANNOTATIONS.iter().map(|a| a.1.len()).sum();
    assert_eq!(checked.len() - query_variables, panels_n + extra_targets + annotations_n, "panel and annotation queries run: {checked:#?}");

    // The numbers, against the fleet's known truth (harness/fleet.rs): host 1 (rack r7) has the
    // two-sockets RAPL tree at RAPL_WATTS[0] and the hwmon tree (temperatures), host 2 (r8) is
    // RAPL-only at RAPL_WATTS[1], the stale host reported temperatures 20 minutes before the run.
    let (fleet_d, fleet_vars) = &dashboards["fleet-overview.json"];
    assert_eq!(fleet_vars["online_window"], "5m");
    // "Agents online" and "Last seen per host": one series per (measurement, host), which the
    // panels' transformations merge and group by host (Time: max, x: count); the stat counts the
    // rows. The transformations are checked as written, then applied here as Grafana does.
    let group_by = serde_json::json!([
        {"id": "merge", "options": {}},
        {"id": "groupBy", "options": {"fields": {"host": {"operation": "groupby"}, "Time": {"operation": "aggregate", "aggregations": ["max"]}, "x": {"operation": "aggregate", "aggregations": ["count"]}}}}
    ]);
    let last_seen = |title: &str| -> BTreeMap<String, i64> {
        let p = panel(fleet_d, title);
        assert_eq!(p["transformations"], group_by, "{title}: transformations");
        let mut hosts: BTreeMap<String, i64> = BTreeMap::new();
        for x in run_target(&fleet, p, "A", fleet_vars, range) {
            let t = x["values"][0][0].as_i64().unwrap_or(0);
            let e = hosts.entry(s(&x["tags"]["host"]).to_string()).or_insert(t);
            *e = (*e).max(t);
        }
        hosts
    };
    let online_panel = panel(fleet_d, "Agents online");
    assert_eq!(online_panel["options"]["reduceOptions"], serde_json::json!({"calcs": ["count"], "fields": "/^x \\(count\\)$/", "values": false}));
    let online = last_seen("Agents online");
    assert_eq!(
        online.keys().map(String::as_str).collect::<Vec<_>>(),
        vec![HOSTS[0].0, HOSTS[1].0],
        "Agents online: the RAPL-only host counts, the stale one does not"
    );
    let seen = last_seen("Last seen per host");
    assert_eq!(seen.keys().map(String::as_str).collect::<Vec<_>>(), vec![HOSTS[0].0, HOSTS[1].0, STALE_HOST.0], "Last seen per host");
    let stale_last_ms = (fleet.started_ns - STALE_AGE_NS + 2_000_000_000) / 1_000_000;
    assert_eq!(seen[STALE_HOST.0], stale_last_ms, "the stale agent was last seen at its last sample");
    for (host, _) in HOSTS {
        let ms = seen[host];
        assert!((fleet.started_ns / 1_000_000..=fleet.ended_ns / 1_000_000).contains(&ms), "{host} last seen at {ms} ms, outside the run");
    }

    // Agents: the inventory of each host's `run` Hello, not of the probe's or the seeds' later
    // one-off connections (which list no sources): host 1 has the fixture's NVMe namespace (its
    // partition is no device), the seven RAPL zones and the ACPI power meter, and five hwmon
    // temperature inputs (acpitz's unreadable one included); host 2 only the seven RAPL zones;
    // the stale host's Hello listed nothing.
    let agents = run_target(&fleet, panel(fleet_d, "Agents"), "A", fleet_vars, range);
    let inv: Vec<(String, Vec<Value>)> =
        agents.iter().map(|x| (s(&x["tags"]["host"]).to_string(), x["values"][0].as_array().expect("row")[1..].to_vec())).collect();
    let version = Value::from(env!("CARGO_PKG_VERSION"));
    let row = |host: &str, counts: [i64; 3]| (host.to_string(), [vec![version.clone()], counts.map(Value::from).to_vec()].concat());
    assert_eq!(inv, vec![row(HOSTS[0].0, [1, 8, 5]), row(HOSTS[1].0, [0, 7, 0]), row(STALE_HOST.0, [0, 0, 0])], "Agents panel");

    // Power per host and source: every RAPL zone's buckets at its constant power (within the
    // counters' steps), the ACPI power meter at its fixture reading, 125 W, exactly.
    let per_point = 1.0 + 2.0 * COUNTER_PERIOD.as_secs_f64() / 0.25 + 0.1; // 250 ms windows, slack for stalls
    let power = run_target(&fleet, panel(fleet_d, "Power per host and source"), "A", fleet_vars, range);
    let mut checked_zones = 0;
    for x in &power {
        let (host, zone, source) = (s(&x["tags"]["host"]), s(&x["tags"]["zone"]), s(&x["tags"]["source"]));
        let vals: Vec<f64> = x["values"].as_array().expect("rows").iter().filter_map(|r| r[1].as_f64()).collect();
        let truth = match source {
            "rapl" => HOSTS.iter().position(|h| h.0 == host).and_then(|i| RAPL_WATTS[i].iter().find(|z| z.1 == zone)).map(|z| z.2 as f64),
            "hwmon" => Some(125.0),
            _ => None,
        };
        let Some(w) = truth else { continue };
        checked_zones += 1;
        // A bucket at either end of the run may hold a single 250 ms point, off by up to two 10 ms
        // counter steps (8 %); a constant reading is exact.
        let tolerance = if source == "rapl" { w * (per_point - 1.0) } else { 1e-9 };
        assert!(!vals.is_empty() && vals.iter().all(|v| (v - w).abs() <= tolerance), "{host} {zone}: buckets {vals:?} for {w} W");
    }
    assert_eq!(checked_zones, 7 + 1 + 7, "RAPL zones of both hosts and host 1's power meter: {power:?}");

    // Latest temperature per sensor: the hwmon fixture's values (m°C / 1000), each sensor its own;
    // acpitz reads `garbage` and has none; the seeded nvme1's last reading (34.5 °C at 15 s, after
    // a larger one); the stale host's drive at 41 °C.
    let latest = run_target(&fleet, panel(fleet_d, "Latest temperature per sensor"), "A", fleet_vars, range);
    let got: Vec<(String, String, String, f64)> = latest
        .iter()
        .map(|x| (s(&x["tags"]["host"]).into(), s(&x["tags"]["device"]).into(), s(&x["tags"]["sensor"]).into(), x["values"][0][1].as_f64().unwrap_or(f64::NAN)))
        .collect();
    let want: Vec<(String, String, String, f64)> = [
        (HOSTS[0].0, "coretemp.0", "Core 0", 43.5),
        (HOSTS[0].0, "coretemp.0", "Package id 0", 45.0),
        (HOSTS[0].0, "coretemp.0", "temp3", 41.0),
        (HOSTS[0].0, SEED_CONTROLLER, "Composite", 49.85),
        (STALE_HOST.0, SEED_CONTROLLER, "Composite", 41.0),
        (HOSTS[0].0, SEED_TEMP_DEVICE, SEED_TEMP_SENSOR, 34.5),
    ]
    .into_iter()
    .map(|(h, d, n, c)| (h.to_string(), d.to_string(), n.to_string(), c))
    .collect();
    assert_eq!(got, want, "latest temperature per sensor");

    // Temperatures (here and in the throttling dashboard's combined panel, the same query): the
    // max °C per 10 s bucket of every (host, device, sensor). The live sensors read a constant
    // (the fixture's m°C / 1000), so every bucket with a reading holds that value, and the agent
    // sampled for 20 s, so at least two buckets, all inside the run. The seeded nvme1
    // (SEED_TEMPERATURES, from seed_bucket(t0)): max(36, 38.5, 35, 37) = 38.5 in the first bucket
    // (a mean would be 36.625, the last 37), max(33, 34.5) = 34.5 in the next. The stale host's
    // three 41 °C readings at stale_t, +1 s, +2 s fall in the buckets of those times.
    let t0 = fleet.seed_t0;
    let seeded_temps = vec![(seed_bucket(t0) / 1_000_000, 38.5), (seed_bucket(t0) / 1_000_000 + 10_000, 34.5)];
    assert_eq!(
        SEED_TEMPERATURES.iter().map(|t| t.0).collect::<Vec<_>>(),
        vec![1_000, 3_000, 5_000, 7_000, 12_000, 15_000],
        "the seed the buckets above assume"
    );
    let stale_t = fleet.started_ns - STALE_AGE_NS;
    let stale_buckets: BTreeSet<i64> = (0..3).map(|i| bucket_ms(stale_t + i * 1_000_000_000)).collect();
    let check_temperatures = |what: &str, series: &[Value]| {
        let got: Vec<(String, String, String)> =
            series.iter().map(|x| (s(&x["tags"]["host"]).into(), s(&x["tags"]["device"]).into(), s(&x["tags"]["sensor"]).into())).collect();
        let key = |h: &str, d: &str, n: &str| (h.to_string(), d.to_string(), n.to_string());
        let live = [("coretemp.0", "Core 0", 43.5), ("coretemp.0", "Package id 0", 45.0), ("coretemp.0", "temp3", 41.0), (SEED_CONTROLLER, "Composite", 49.85)];
        let mut want: Vec<(String, String, String)> = live.iter().map(|(d, n, _)| key(HOSTS[0].0, d, n)).collect();
        // InfluxDB orders series by their tags' values in key order: device, host, sensor.
        want.push(key(STALE_HOST.0, SEED_CONTROLLER, "Composite"));
        want.push(key(HOSTS[0].0, SEED_TEMP_DEVICE, SEED_TEMP_SENSOR));
        assert_eq!(got, want, "{what}: series");
        for (x, (device, sensor, celsius)) in series.iter().zip(live) {
            let pts = points(x, 1);
            let run_ms = bucket_ms(fleet.started_ns)..=fleet.ended_ns / 1_000_000;
            assert!(
                pts.len() >= 2 && pts.iter().all(|(t, c)| *c == celsius && run_ms.contains(t)),
                "{what}: {device} {sensor} buckets {pts:?}, want {celsius} °C in at least two buckets of the run {run_ms:?}"
            );
        }
        let stale: Vec<(i64, f64)> = stale_buckets.iter().map(|t| (*t, 41.0)).collect();
        assert_eq!(points(&series[4], 1), stale, "{what}: the stale host's readings");
        assert_eq!(points(&series[5], 1), seeded_temps, "{what}: {SEED_TEMP_DEVICE} max per bucket");
    };
    check_temperatures("Temperatures", &run_target(&fleet, panel(fleet_d, "Temperatures"), "A", fleet_vars, range));

    // Probe runs: runs per 10 s bucket (by start time) per host and device. The seeded drive's 48
    // (12 granularity, 6 sweep, 30 ladder levels; seeded_drive_runs) counted in the buckets of
    // their start times; the real `probe --quick` on host 1 ran its plan, SR, RR, SW, RW at three
    // IO sizes each: 12 runs on the scratch file, inside the run.
    let drive_runs = seeded_drive_runs();
    assert_eq!(drive_runs.len(), 12 + 6 + 30);
    let mut want_counts: BTreeMap<i64, f64> = BTreeMap::new();
    for (_, off, _) in &drive_runs {
        *want_counts.entry(bucket_ms(t0 + off)).or_default() += 1.0;
    }
    let runs = run_target(&fleet, panel(fleet_d, "Probe runs"), "A", fleet_vars, range);
    let devices: Vec<(&str, &str)> = runs.iter().map(|x| (s(&x["tags"]["host"]), s(&x["tags"]["device"]))).collect();
    assert_eq!(devices, vec![(HOSTS[0].0, "file:scratch.dat"), (HOSTS[0].0, SEED_NAMESPACE)], "Probe runs: series");
    let real = points(&runs[0], 1);
    assert!(
        real.iter().map(|p| p.1).sum::<f64>() == 12.0 && real.iter().all(|(t, _)| (bucket_ms(fleet.started_ns)..=fleet.ended_ns / 1_000_000).contains(t)),
        "Probe runs of the quick probe: {real:?}, want 12 runs in the run's buckets"
    );
    assert_eq!(points(&runs[1], 1), want_counts.into_iter().collect::<Vec<_>>(), "Probe runs of {SEED_NAMESPACE} per bucket");

    // Events, newest first, each with its host: the seeded ones as sent (the backlog event names
    // no device, so that cell is empty), and the live fleet's one, host 1's agent reporting the
    // fixture's unreadable acpitz input once (a repeated error is not reported again).
    let events = run_target(&fleet, panel(fleet_d, "Events"), "A", fleet_vars, range);
    assert_eq!(events.len(), 1, "Events: one table: {events:?}");
    assert_eq!(events[0]["columns"], serde_json::json!(["time", "host", "severity", "kind", "device", "message"]), "Events: columns");
    let rows: Vec<Vec<Value>> =
        events[0]["values"].as_array().cloned().unwrap_or_default().into_iter().map(|r| r.as_array().cloned().unwrap_or_default()).collect();
    let times: Vec<i64> = rows.iter().map(|r| r[0].as_i64().unwrap_or(0)).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "Events: not newest first: {times:?}");
    let mut seeded: Vec<Vec<Value>> = SEED_EVENTS
        .iter()
        .map(|(h, secs, kind, severity, device, message)| {
            let sev = match severity {
                wattflip_proto::v1::Severity::Info => "info",
                wattflip_proto::v1::Severity::Warning => "warning",
                _ => "other",
            };
            let device = if device.is_empty() { Value::Null } else { Value::from(*device) };
            vec![
                Value::from((t0 + secs * 1_000_000_000) / 1_000_000),
                Value::from(HOSTS[*h].0),
                Value::from(sev),
                Value::from(*kind),
                device,
                Value::from(*message),
            ]
        })
        .collect();
    seeded.reverse();
    let (from_seed, live): (Vec<Vec<Value>>, Vec<Vec<Value>>) = rows.into_iter().partition(|r| seeded.contains(r));
    assert_eq!(from_seed, seeded, "Events: the seeded ones, newest first");
    // A loaded machine may starve the probe's power recorder: its stalls are real events of the
    // run (warning `power_recorder_stall`, agent/src/energy/live.rs), not the fixture's.
    let (stalls, live): (Vec<Vec<Value>>, Vec<Vec<Value>>) = live.into_iter().partition(|r| s(&r[3]) == "power_recorder_stall");
    assert!(stalls.iter().all(|r| s(&r[2]) == "warning"), "Events: recorder stalls are warnings: {stalls:?}");
    assert_eq!(live.len(), 1, "Events: exactly one live event besides recorder stalls: {live:?}");
    let l = &live[0];
    let message = s(&l[5]);
    assert!(
        (fleet.started_ns / 1_000_000..=fleet.ended_ns / 1_000_000).contains(&l[0].as_i64().unwrap_or(0))
            && (s(&l[1]), s(&l[2]), s(&l[3]), s(&l[4])) == (HOSTS[0].0, "warning", "sensor_error", "acpitz")
            && message.starts_with("cannot parse /")
            && message.ends_with("/sys/class/hwmon/hwmon3/temp1_input: `garbage` is not an integer (m°C)"),
        "Events: the live event {l:?}"
    );

    // Energy in the range per zone: Σ joules of each RAPL zone is its constant power times the
    // time its points cover (Σ interval_ns, read straight from InfluxDB), within what the
    // counters' 10 ms steps allow at the two ends (a few steps of slack for a loaded machine).
    // A frozen counter (a file replaced behind the agent's open handle) would read 0 W here.
    let energy = run_target(&fleet, panel(fleet_d, "Energy in the range per zone"), "A", fleet_vars, range);
    let joules: BTreeMap<(String, String), f64> =
        energy.iter().map(|x| ((s(&x["tags"]["host"]).to_string(), s(&x["tags"]["zone"]).to_string()), x["values"][0][1].as_f64().unwrap_or(0.0))).collect();
    let slack_s = 10.0 * COUNTER_PERIOD.as_secs_f64();
    for ((host, _), zones) in HOSTS.iter().zip(RAPL_WATTS) {
        for (_, zone, watts) in zones {
            let q = format!(
                "SELECT sum(\"interval_ns\") FROM \"power\" WHERE \"rate\" != 'full' AND \"host\" = '{host}' AND \"zone\" = '{zone}' AND \"source\" = 'rapl'"
            );
            let secs = fleet.influx.rows(&fleet.db, &q).first().and_then(|r| r[1].as_f64()).unwrap_or(0.0) / 1e9;
            assert!(secs > 15.0, "{host} {zone}: its points cover {secs} s of the 20 s run");
            let j = joules.get(&(host.to_string(), zone.to_string())).copied().unwrap_or(0.0);
            let w = *watts as f64;
            eprintln!("{host} {zone}: {j} J over {secs} s = {} W (truth {w} W)", j / secs);
            assert!((j - w * secs).abs() <= w * slack_s, "{host} {zone}: {j} J over {secs} s = {} W, the counter moves at {w} W", j / secs);
        }
    }

    // Power budget by rack: each host counts at the tier the collector tagged (`budget`, from
    // its run Hello): host 1 (r7) at its ACPI power meter (scope wall, 125 W, a constant reading:
    // exact), above its RAPL; host 2 (r8) at RAPL psys (90 W, within the counters' steps) plus its
    // seeded NVMe estimate (8.25 W, 4.6 W once, exact), never package or DRAM as well.
    let (budget_d, budget_vars) = &dashboards["power-budget.json"];
    assert_eq!(
        budget_vars.keys().map(String::as_str).collect::<Vec<_>>(),
        ["budget_w", "group_by", "host", "peak_watts", "power_rp"],
        "power-budget.json variables"
    );
    // No rollups in this database: the collector's marker names the default policy.
    assert_eq!((budget_vars["power_rp"].as_str(), budget_vars["peak_watts"].as_str()), ("autogen", "watts"), "the resolution variables");
    assert_eq!((budget_vars["group_by"].as_str(), budget_vars["budget_w"].as_str()), ("rack", "1000"));
    let psys = |i: usize| RAPL_WATTS[i].iter().find(|z| z.1 == "psys").map(|z| z.2 as f64).unwrap_or(0.0);
    let meter_w = 125.0;
    // The tags as stored: host 1's power meter zone alone (`wall`), host 2's psys and drive.
    let tagged = fleet
        .influx
        .series(&fleet.db, "SELECT count(\"watts\") FROM \"power\" WHERE \"budget\" != '' AND \"rate\" != 'full' GROUP BY \"host\", \"budget\", \"scope\"");
    let mut tags: Vec<(String, String, String)> =
        tagged.iter().map(|(t, _)| (s(&t["host"]).to_string(), s(&t["budget"]).to_string(), s(&t["scope"]).to_string())).collect();
    tags.sort();
    let want_tags: Vec<(String, String, String)> = [(HOSTS[0].0, "wall", "wall"), (HOSTS[1].0, "rapl_nvme", "drive"), (HOSTS[1].0, "rapl_nvme", "psys")]
        .iter()
        .map(|(h, b, sc)| (h.to_string(), b.to_string(), sc.to_string()))
        .collect();
    assert_eq!(tags, want_tags, "budget tags per host and scope");
    // Truth per 10 s bucket of rack r8: 90 W where the agent's psys points fall, plus the seeded
    // drive watts where a drive point falls (their times read back from InfluxDB).
    let bucket_of = |ms: i64| ms - ms.rem_euclid(10_000);
    let drive: BTreeMap<i64, f64> = fleet
        .influx
        .rows(&fleet.db, &format!("SELECT \"watts\" FROM \"power\" WHERE \"host\" = '{}' AND \"scope\" = 'drive'", HOSTS[1].0))
        .iter()
        .map(|r| (bucket_of(r[0].as_i64().unwrap_or(0) / 1_000_000), r[1].as_f64().unwrap_or(f64::NAN)))
        .collect();
    assert_eq!(drive.values().copied().collect::<Vec<_>>().len(), 4, "seeded drive points: {drive:?}");
    let totals = run_target(&fleet, panel(budget_d, "Power per $group_by"), "A", budget_vars, range);
    let racks: Vec<&str> = totals.iter().map(|x| s(&x["tags"]["rack"])).collect();
    assert_eq!(racks, vec![HOSTS[0].1, HOSTS[1].1], "racks: {totals:?}");
    let buckets = |x: &Value| -> Vec<(i64, f64)> { x["values"].as_array().unwrap().iter().filter_map(|r| Some((r[0].as_i64()?, r[1].as_f64()?))).collect() };
    let r7 = buckets(&totals[0]);
    assert!(r7.len() >= 2 && r7.iter().all(|(_, w)| *w == meter_w), "rack {}: every bucket the power meter's {meter_w} W alone: {r7:?}", racks[0]);
    let r8 = buckets(&totals[1]);
    let mut psys_parts = Vec::new();
    for (t, w) in &r8 {
        let d = drive.get(t).copied().unwrap_or(0.0);
        if (w - d).abs() <= 1e-9 {
            continue; // a bucket of the drive estimate alone (after the agent stopped)
        }
        assert!((w - d - psys(1)).abs() <= psys(1) * (per_point - 1.0), "rack {} bucket {t}: {w} W for psys {} W + drive {d} W", racks[1], psys(1));
        psys_parts.push(w - d);
    }
    assert!(psys_parts.len() >= 2 && drive.keys().any(|t| r8.iter().any(|(b, _)| b == t)), "rack {}: {r8:?}, drive {drive:?}", racks[1]);
    psys_parts.sort_by(f64::total_cmp);
    let median = psys_parts[psys_parts.len() / 2];
    assert!((median - psys(1)).abs() <= psys(1) * 0.02, "{} median psys part {median} W for {} W", racks[1], psys(1));
    // The probe streamed full-rate points of the power meter on host 1 (tagged too), and the same
    // panel without the rate filter counts them (a second series of the zone): the check above
    // can fail.
    let full = fleet
        .influx
        .rows(&fleet.db, &format!("SELECT count(\"watts\") FROM \"power\" WHERE \"rate\" = 'full' AND \"host\" = '{}' AND \"budget\" = 'wall'", HOSTS[0].0));
    assert!(full.first().and_then(|r| r[1].as_i64()).unwrap_or(0) > 100, "no full-rate power-meter points from the probe: {full:?}");
    let mut unfiltered = panel(budget_d, "Power per $group_by").clone();
    let q = s(&unfiltered["targets"][0]["query"]).replace(" AND \"rate\" != 'full'", "");
    unfiltered["targets"][0]["query"] = Value::from(q);
    let inflated = run_target(&fleet, &unfiltered, "A", budget_vars, range);
    let max = inflated[0]["values"].as_array().unwrap().iter().filter_map(|r| r[1].as_f64()).fold(f64::MIN, f64::max);
    assert!(max > meter_w * 1.5, "without the filter, rack {} would peak at {max} W", HOSTS[0].1);
    // Peak per host and zone: exactly the tagged zones.
    let peaks = run_target(&fleet, panel(budget_d, "Peak per host and zone"), "A", budget_vars, range);
    let mut rows: Vec<(String, String, String, f64, f64)> = peaks
        .iter()
        .map(|x| {
            let t = |k: &str| s(&x["tags"][k]).to_string();
            (t("host"), t("zone"), t("budget"), x["values"][0][1].as_f64().unwrap_or(0.0), x["values"][0][2].as_f64().unwrap_or(0.0))
        })
        .collect();
    rows.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    assert_eq!(rows.len(), 3, "power meter, drive, psys: {peaks:?}");
    assert_eq!((rows[0].0.as_str(), rows[0].2.as_str(), rows[0].3, rows[0].4), (HOSTS[0].0, "wall", meter_w, meter_w), "{peaks:?}");
    let drive_mean = (3.0 * 8.25 + 4.6) / 4.0;
    assert!(
        (rows[1].0.as_str(), rows[1].1.as_str(), rows[1].2.as_str(), rows[1].3) == (HOSTS[1].0, SEED_CONTROLLER, "rapl_nvme", 8.25)
            && (rows[1].4 - drive_mean).abs() <= 1e-12,
        "drive: {:?}, want peak 8.25 W, mean {drive_mean} W",
        rows[1]
    );
    assert_eq!((rows[2].0.as_str(), rows[2].1.as_str(), rows[2].2.as_str()), (HOSTS[1].0, "psys", "rapl_nvme"), "{peaks:?}");
    let (peak, mean) = (rows[2].3, rows[2].4);
    assert!(peak >= psys(1) && peak <= psys(1) * per_point, "{}: psys peak {peak} W for {} W", HOSTS[1].0, psys(1));
    assert!((mean - psys(1)).abs() <= psys(1) * 0.02, "{}: psys mean {mean} W for {} W", HOSTS[1].0, psys(1));
    // Peak per host, and plan budget at the dashboard's 10 s interval: the same peaks per rack
    // and per host, and the same tiers.
    let per_host = run_target(&fleet, panel(budget_d, "Peak per host"), "A", budget_vars, range);
    let mut host_peaks: Vec<(String, String, f64)> =
        per_host.iter().map(|x| (s(&x["tags"]["host"]).to_string(), s(&x["tags"]["budget"]).to_string(), x["values"][0][1].as_f64().unwrap_or(0.0))).collect();
    host_peaks.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(host_peaks.len(), 2, "{per_host:?}");
    assert_eq!(host_peaks[0], (HOSTS[0].0.to_string(), "wall".to_string(), meter_w), "{per_host:?}");
    assert_eq!((host_peaks[1].0.as_str(), host_peaks[1].1.as_str()), (HOSTS[1].0, "rapl_nvme"), "{per_host:?}");
    let counted = run_target(&fleet, panel(budget_d, "Hosts counted per $group_by and tier"), "A", budget_vars, range);
    let mut counted: Vec<(String, String, Value)> =
        counted.iter().map(|x| (s(&x["tags"]["rack"]).to_string(), s(&x["tags"]["budget"]).to_string(), x["values"][0][1].clone())).collect();
    counted.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let want_counted: Vec<(String, String, Value)> =
        vec![(HOSTS[0].1.into(), "wall".into(), Value::from(1)), (HOSTS[1].1.into(), "rapl_nvme".into(), Value::from(1))];
    assert_eq!(counted, want_counted, "Hosts counted per rack and tier");
    let o = std::process::Command::new(wattflip_e2e::bin("wattflip-collector", "wattflip-collector"))
        .args([
            "--influx-url",
            &fleet.influx.url,
            "--influx-db",
            &fleet.db,
            "plan",
            "budget",
            "--group-by",
            "rack",
            "--budget-w",
            "1000",
            "--bucket",
            "10s",
            "--since",
            "1h",
            "--json",
        ])
        .output()
        .expect("run wattflip-collector plan budget");
    assert!(o.status.success(), "plan budget: {}", String::from_utf8_lossy(&o.stderr));
    let plan10: Value = serde_json::from_slice(&o.stdout).expect("plan budget JSON");
    let peak_vs = run_target(&fleet, panel(budget_d, "Measured peak vs budget"), "A", budget_vars, range);
    for (i, x) in peak_vs.iter().enumerate() {
        let g = &plan10["groups"][i];
        assert_eq!(g["group"], x["tags"]["rack"], "{plan10}");
        let (p, h) = (g["peak_w"].as_f64().unwrap_or(f64::NAN), g["headroom_w"].as_f64().unwrap_or(f64::NAN));
        let (dp, dh) = (x["values"][0][1].as_f64().unwrap_or(0.0), x["values"][0][2].as_f64().unwrap_or(0.0));
        assert!((p - dp).abs() <= 1e-9 * dp && (h - dh).abs() <= 1e-9 * dp, "rack {}: plan budget {p} W / {h} W, dashboard {dp} W / {dh} W", g["group"]);
        let hp = &g["counted"][0];
        assert_eq!(hp["host"], Value::from(host_peaks[i].0.clone()), "{plan10}");
        assert!((hp["peak_w"].as_f64().unwrap_or(0.0) - host_peaks[i].2).abs() <= 1e-9 * host_peaks[i].2, "{}: {hp} vs {:?}", racks[i], host_peaks[i]);
    }
    // Device energy profile, the seeded drive (harness/fleet.rs `seed_runs`): per pattern and IO
    // size E = 2 + 0.02 · KiB (× 2.5 for writes) J over 1024 IOs, 60 % above idle; tails of
    // 0.05 · KiB / 4 s (SW) and 0.6 s (RW) with a tenth of E as background energy.
    let (dev_d, dev_vars) = &dashboards["device-energy-profile.json"];
    let energy_of = |pattern: &str, kib: f64| 2.0 + 0.02 * kib * if pattern.ends_with('W') { 2.5 } else { 1.0 };
    let per_io = run_target(&fleet, panel(dev_d, "Energy per IO vs IO size"), "A", dev_vars, range);
    let mut seen_patterns = Vec::new();
    for x in per_io.iter().filter(|x| x["tags"]["device"] == SEED_NAMESPACE) {
        let pattern = s(&x["tags"]["pattern"]).to_string();
        // The seeds' half-width is 4 % of E: the bracket's ends are 0.96 and 1.04 of it.
        let rows = numeric_rows(x);
        assert_eq!(rows.iter().map(|r| r[0]).collect::<Vec<_>>(), SEED_SIZES_KIB.iter().map(|k| *k as f64).collect::<Vec<_>>(), "{pattern}: IO sizes");
        for r in rows {
            let (kib, e) = (r[0], energy_of(&pattern, r[0]));
            let want = [1.0, 0.6, 0.96, 1.04].map(|f| 1000.0 * f * e / 1024.0);
            assert!(
                r.len() == 5 && r[1..].iter().zip(&want).all(|(g, w)| close(*g, *w)),
                "{pattern} {kib} KiB: {r:?} (mJ, above idle, 95 % low, high), want {want:?}; E = {e} J"
            );
        }
        seen_patterns.push(pattern);
    }
    assert_eq!(seen_patterns, vec!["RR", "RW", "SR", "SW"], "patterns of the seeded drive");
    let bg = run_target(&fleet, panel(dev_d, "Background work per experiment"), "A", dev_vars, range);
    for (experiment, class, tail, bg_share) in
        [("granularity/SR", "None", 0.0, 0.0), ("granularity/RR", "None", 0.0, 0.0), ("granularity/SW", "GWP", 1.6, 0.1), ("granularity/RW", "S", 0.6, 0.1)]
    {
        let x = bg
            .iter()
            .find(|x| x["tags"]["device"] == SEED_NAMESPACE && x["tags"]["experiment"] == experiment)
            .unwrap_or_else(|| panic!("no {experiment}: {bg:?}"));
        let r = &x["values"][0];
        let total: f64 = SEED_SIZES_KIB.iter().map(|k| energy_of(&experiment[12..], *k as f64)).sum();
        assert_eq!(s(&r[1]), class, "{experiment}");
        assert!(
            close(r[2].as_f64().unwrap_or(-1.0), tail) && close(r[3].as_f64().unwrap_or(-1.0), bg_share * total) && close(r[4].as_f64().unwrap_or(-1.0), total),
            "{experiment}: {r}"
        );
    }

    // Figure 4, J/MB and the background tail against IO size, one series per (device, pattern), a
    // point per IO size: the seeded drive's by hand, mean µs = (20 sequential, 90 random) +
    // 2 · KiB (+ 15 writes); J/MB = E / (1024 IOs · KiB · 1024 B / 10⁶), above idle 0.6 of it;
    // tails 0 (reads), 0.05 · KiB / 4 s (SW: 0.05, 0.4, 1.6), 0.6 s (RW). The real probe's
    // series (the scratch file) are measured: its three IO sizes, in order.
    let mean_us = |pattern: &str, kib: f64| if pattern.starts_with('S') { 20.0 } else { 90.0 } + 2.0 * kib + if pattern.ends_with('W') { 15.0 } else { 0.0 };
    let j_per_mb = |pattern: &str, kib: f64| energy_of(pattern, kib) / (1024.0 * kib * 1024.0 / 1e6);
    let tail_of = |pattern: &str, kib: f64| match pattern {
        "SW" => 0.05 * kib / 4.0,
        "RW" => 0.6,
        _ => 0.0,
    };
    let sizes: Vec<f64> = SEED_SIZES_KIB.iter().map(|k| *k as f64).collect();
    let xy_panel = |title: &str, want: &dyn Fn(&str, f64) -> Vec<f64>| {
        let series = run_target(&fleet, panel(dev_d, title), "A", dev_vars, range);
        let keys: Vec<(&str, &str)> = series.iter().map(|x| (s(&x["tags"]["device"]), s(&x["tags"]["pattern"]))).collect();
        let mut want_keys: Vec<(&str, &str)> = Vec::new();
        for device in ["file:scratch.dat", SEED_NAMESPACE] {
            want_keys.extend(["RR", "RW", "SR", "SW"].map(|p| (device, p)));
        }
        assert_eq!(keys, want_keys, "{title}: series");
        for x in &series {
            let (device, pattern) = (s(&x["tags"]["device"]), s(&x["tags"]["pattern"]));
            let rows = numeric_rows(x);
            assert_eq!(rows.iter().map(|r| r[0]).collect::<Vec<_>>(), sizes, "{title}: {device} {pattern}: IO sizes (KiB)");
            if device == SEED_NAMESPACE {
                for (r, kib) in rows.iter().zip(&sizes) {
                    let w = want(pattern, *kib);
                    assert!(r.len() == w.len() + 1 && r[1..].iter().zip(&w).all(|(g, w)| close(*g, *w)), "{title}: {pattern} {kib} KiB: {r:?}, want {w:?}");
                }
            }
        }
    };
    xy_panel("Mean response time vs IO size (Figure 4)", &|p, kib| vec![mean_us(p, kib)]);
    xy_panel("J/MB vs IO size", &|p, kib| [1.0, 0.6, 0.96, 1.04].map(|f| f * j_per_mb(p, kib)).to_vec());
    xy_panel("Background-work tail vs IO size", &|p, kib| vec![tail_of(p, kib)]);

    // Runs: every Granularity run with its device; the seeded drive's twelve as sent (p99 = 2 ·
    // mean, MiB/s = 10⁶ / mean µs · KiB / 1024, E and 0.6 E), in time order; the quick probe's
    // twelve on the scratch file, each pattern at each size once.
    let runs = run_target(&fleet, panel(dev_d, "Runs"), "A", dev_vars, range);
    assert_eq!(
        runs[0]["columns"],
        serde_json::json!([
            "time",
            "device",
            "pattern",
            "io_size_bytes",
            "mean_us",
            "p99_us",
            "mib_per_s",
            "energy_j",
            "energy_u95_j",
            "energy_above_idle_j",
            "energy_above_idle_u95_j"
        ]),
        "Runs: columns"
    );
    let rows: Vec<Vec<Value>> =
        runs[0]["values"].as_array().cloned().unwrap_or_default().into_iter().map(|r| r.as_array().cloned().unwrap_or_default()).collect();
    let drive: Vec<(String, u64, Vec<f64>)> = rows
        .iter()
        .filter(|r| r[1] == SEED_NAMESPACE)
        .map(|r| (s(&r[2]).to_string(), r[3].as_u64().unwrap_or(0), r[4..].iter().map(|v| v.as_f64().unwrap_or(f64::NAN)).collect()))
        .collect();
    let mut want_drive = Vec::new();
    for pattern in SEED_PATTERNS {
        for kib in SEED_SIZES_KIB {
            let (k, m, e) = (kib as f64, mean_us(pattern, kib as f64), energy_of(pattern, kib as f64));
            want_drive.push((pattern.to_string(), kib * 1024, vec![m, 2.0 * m, 1e6 / m * k / 1024.0, e, 0.04 * e, 0.6 * e, 0.05 * 0.6 * e]));
        }
    }
    assert!(
        drive.len() == want_drive.len()
            && drive
                .iter()
                .zip(&want_drive)
                .all(|(g, w)| g.0 == w.0 && g.1 == w.1 && g.2.len() == w.2.len() && g.2.iter().zip(&w.2).all(|(a, b)| close(*a, *b))),
        "Runs of {SEED_NAMESPACE}: {drive:?}\nwant {want_drive:?}"
    );
    let mut real: Vec<(String, u64)> = rows.iter().filter(|r| r[1] == "file:scratch.dat").map(|r| (s(&r[2]).to_string(), r[3].as_u64().unwrap_or(0))).collect();
    real.sort();
    let mut want_real: Vec<(String, u64)> = SEED_PATTERNS.iter().flat_map(|p| SEED_SIZES_KIB.map(|k| (p.to_string(), k * 1024))).collect();
    want_real.sort();
    assert!(rows.len() == 24 && real == want_real, "Runs: {} rows; the quick probe's (pattern, bytes) {real:?}", rows.len());

    // Energy proportionality of the seeded ladders: p(u) = i + (1 − i)·√u + b·u·(1 − u) with
    // i = 3.1 / 11.6, b = 0.08 for SW, at u = 0.1 … 1; EP = 2 − 2·∫p by trapezoids from p(0) = i.
    // The psys ladder is the same plus 90 W, normalised by its own peak (101.6 W).
    let ladder = |bump: f64, offset: f64| -> (f64, f64, f64, f64, f64) {
        let (idle, peak) = (3.1, 11.6);
        let watts = |u: f64| (idle / peak + (1.0 - idle / peak) * u.sqrt() + bump * u * (1.0 - u)) * peak + offset;
        let (p0, top) = (idle + offset, watts(1.0));
        let us: Vec<f64> = (0..=10).map(|l| f64::from(l) / 10.0).collect();
        let p = |u: f64| if u == 0.0 { p0 / top } else { watts(u) / top };
        let integral: f64 = us.windows(2).map(|w| (w[1] - w[0]) * (p(w[0]) + p(w[1])) / 2.0).sum();
        let line = |u: f64| p0 / top + (1.0 - p0 / top) * u;
        let deviation = us[1..10].iter().map(|u| p(*u) - line(*u)).sum::<f64>() / 9.0;
        (2.0 - 2.0 * integral, 1.0 - p0 / top, deviation, p0, top)
    };
    let (ep_d, ep_vars) = &dashboards["energy-proportionality.json"];
    let per_model = run_target(&fleet, panel(ep_d, "EP and dynamic range per model"), "A", ep_vars, range);
    for (workload, bump) in [("RR", 0.0), ("SW", 0.08)] {
        let x = per_model.iter().find(|x| x["tags"]["workload"] == workload).unwrap_or_else(|| panic!("no {workload}: {per_model:?}"));
        let r: Vec<f64> = x["values"][0].as_array().expect("row")[1..].iter().map(|v| v.as_f64().unwrap_or(f64::NAN)).collect();
        let (ep, dr, dev, idle, peak) = ladder(bump, 0.0);
        assert!(
            close(r[0], ep) && close(r[1], dr) && close(r[2], dev) && close(r[3], idle) && close(r[4], peak),
            "{workload}: {r:?}, want {:?}",
            (ep, dr, dev, idle, peak)
        );
    }
    let per_host = run_target(&fleet, panel(ep_d, "EP per host"), "A", ep_vars, range);
    let r: Vec<f64> = per_host[0]["values"][0].as_array().expect("row")[1..].iter().map(|v| v.as_f64().unwrap_or(f64::NAN)).collect();
    let (ep, dr, _, idle, peak) = ladder(0.0, 90.0);
    assert!(
        per_host.len() == 1 && close(r[0], ep) && close(r[1], dr) && close(r[2], idle) && close(r[3], peak),
        "EP per host: {per_host:?}, want {:?}",
        (ep, dr, idle, peak)
    );

    // Efficiency at the peak level (IOPS 400, 1.6 MiB/s at 11.6 W), and the proportionality gap
    // p(u) − u per level, the mean over the drive's own ladders of a workload (scope device: the
    // psys ladder, a host's power, is not the drive model's and stays out, as in the per-model EP).
    let eff = run_target(&fleet, panel(ep_d, "Efficiency per model"), "A", ep_vars, range);
    let eff_of = |workload: &str| -> Vec<Value> {
        eff.iter().find(|x| x["tags"]["workload"] == workload).map(|x| x["values"][0].as_array().expect("row")[1..].to_vec()).unwrap_or_default()
    };
    assert!(close(eff_of("RR")[0].as_f64().unwrap_or(0.0), 400.0 / 11.6) && eff_of("RR")[1].is_null(), "RR efficiency {:?}", eff_of("RR"));
    assert!(eff_of("SW")[0].is_null() && close(eff_of("SW")[1].as_f64().unwrap_or(0.0), 1.6 / 11.6), "SW efficiency {:?}", eff_of("SW"));
    let gaps = run_target(&fleet, panel(ep_d, "Proportionality gap per load level"), "A", ep_vars, range);
    let norm = |bump: f64, offset: f64, u: f64| {
        let (idle, peak) = (3.1, 11.6);
        let watts = |u: f64| {
            if u == 0.0 {
                idle + offset
            } else {
                (idle / peak + (1.0 - idle / peak) * u.sqrt() + bump * u * (1.0 - u)) * peak + offset
            }
        };
        watts(u) / watts(1.0) - u
    };
    assert_eq!(gaps.len(), 2 * 11, "two workloads × levels 0, 10 … 100: {gaps:?}");
    for x in &gaps {
        let (workload, level) = (s(&x["tags"]["workload"]), s(&x["tags"]["level"]));
        let u = level.parse::<f64>().unwrap_or(f64::NAN) / 100.0;
        let want = if workload == "SW" { norm(0.08, 0.0, u) } else { norm(0.0, 0.0, u) };
        let got = x["values"][0][1].as_f64().unwrap_or(f64::NAN);
        assert!(close(got, want), "gap of {workload} at level {level}: {got}, want {want}");
    }
    // Normalised power vs load: the drive's own ladders only (scope device; the psys ladder is
    // the host's, in "EP per host"), one curve per workload, (100 u, p(u), u) at u = 0, 0.1 … 1
    // in that order, p(u) = P(u) / P(1) with P(0) the idle 3.1 W: norm() + u above.
    let curves = run_target(&fleet, panel(ep_d, "Normalised power vs load"), "A", ep_vars, range);
    assert_eq!(curves.iter().map(|x| s(&x["tags"]["workload"])).collect::<Vec<_>>(), vec!["RR", "SW"], "Normalised power vs load: series");
    for (x, bump) in curves.iter().zip([0.0, 0.08]) {
        let got = numeric_rows(x);
        let want: Vec<Vec<f64>> = (0..=10).map(|l| f64::from(l) / 10.0).map(|u| vec![100.0 * u, norm(bump, 0.0, u) + u, u]).collect();
        assert!(
            got.len() == want.len() && got.iter().zip(&want).all(|(g, w)| g.len() == 3 && g.iter().zip(w).all(|(a, b)| close(*a, *b))),
            "Normalised power vs load, {}: {got:?}\nwant {want:?}",
            s(&x["tags"]["workload"])
        );
    }

    // Throttling: the one seeded episode (the collector's own detector writes none here: the
    // seeded SMART counters move, but nothing arrives 2 minutes after that onset to settle it),
    // the governor's two seeded changes, newest first, and the seeded sweep's watts and MiB/s.
    let (thr_d, thr_vars) = &dashboards["throttling.json"];
    let rows_of = |title: &str| -> Vec<Vec<Value>> {
        run_target(&fleet, panel(thr_d, title), "A", thr_vars, range)
            .iter()
            .flat_map(|x| x["values"].as_array().cloned().unwrap_or_default())
            .map(|r| r.as_array().map(|r| r[1..].to_vec()).unwrap_or_default())
            .collect()
    };
    let j = |v: serde_json::Value| v.as_array().cloned().unwrap_or_default();
    assert_eq!(rows_of("Throttle events"), vec![j(serde_json::json!(["SW/131072", 82, 16.5, 14, 12, "throughput+power", "temperature"]))], "Throttle events");
    assert_eq!(
        rows_of("Power-state changes"),
        vec![
            j(serde_json::json!(["restored", 2, 0, 0, "restore guard: original state 0 put back"])),
            j(serde_json::json!(["applied", 0, 2, 2, "governor sweep: state 2 (8 W cap) set and read back"])),
        ],
        "Power-state changes"
    );
    let sweep = run_target(&fleet, panel(thr_d, "Governor sweep: throughput vs power cap"), "A", thr_vars, range);
    for (experiment, share, mibs) in [("governor_sweep/SW:128KiB", 1.0, [2000.0, 1250.0, 600.0]), ("governor_sweep/RR:4KiB", 0.7, [410.0, 405.0, 398.0])] {
        let x = sweep.iter().find(|x| x["tags"]["experiment"] == experiment).unwrap_or_else(|| panic!("no {experiment}: {sweep:?}"));
        let got: Vec<(f64, f64)> = x["values"].as_array().expect("rows").iter().map(|r| (r[1].as_f64().unwrap_or(0.0), r[2].as_f64().unwrap_or(0.0))).collect();
        let want: Vec<(f64, f64)> = [18.5, 15.2, 8.9].iter().zip(mibs).map(|(w, m)| (w * share, m)).collect();
        assert!(got.len() == 3 && got.iter().zip(&want).all(|(g, w)| close(g.0, w.0) && g.1 == w.1), "{experiment}: {got:?}, want {want:?}");
    }
    // Power budget: headroom is the budget (1000 W) minus each bucket's rack total; the
    // measured peak per rack is the largest of those totals.
    let headroom = run_target(&fleet, panel(budget_d, "Headroom per $group_by"), "A", budget_vars, range);
    for (i, (x, t)) in headroom.iter().zip(&totals).enumerate() {
        let h: Vec<f64> = x["values"].as_array().expect("rows").iter().filter_map(|r| r[1].as_f64()).collect();
        let tt: Vec<f64> = t["values"].as_array().expect("rows").iter().filter_map(|r| r[1].as_f64()).collect();
        assert!(h.len() == tt.len() && h.iter().zip(&tt).all(|(h, t)| close(*h, 1000.0 - t)), "{}: headroom {h:?} for totals {tt:?}", racks[i]);
    }
    let peak_vs = run_target(&fleet, panel(budget_d, "Measured peak vs budget"), "A", budget_vars, range);
    for (i, (x, t)) in peak_vs.iter().zip(&totals).enumerate() {
        let max = t["values"].as_array().expect("rows").iter().filter_map(|r| r[1].as_f64()).fold(f64::MIN, f64::max);
        let r = &x["values"][0];
        assert!(
            close(r[1].as_f64().unwrap_or(0.0), max) && close(r[2].as_f64().unwrap_or(0.0), 1000.0 - max) && close(r[3].as_f64().unwrap_or(0.0), max / 10.0),
            "{}: {r}",
            racks[i]
        );
    }

    // The plan commands on the same fleet, against the generator's numbers.
    let plan = |args: &[&str]| -> Value {
        let o = std::process::Command::new(wattflip_e2e::bin("wattflip-collector", "wattflip-collector"))
            .args(["--influx-url", &fleet.influx.url, "--influx-db", &fleet.db, "plan"])
            .args(args)
            .arg("--json")
            .output()
            .expect("run wattflip-collector plan");
        assert!(o.status.success(), "plan {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("plan {args:?}: not JSON ({e})"))
    };
    // Budget per rack: host 1 is counted by its ACPI power meter (125 W, the fixture's
    // power1_average), above its RAPL; host 2 by RAPL psys (90 W) plus its NVMe estimate (8.25 W,
    // 4.6 W once); the stale host has no power at all and is listed, not dropped.
    let b = plan(&["budget", "--group-by", "rack", "--budget-w", "100"]);
    let groups = b["groups"].as_array().expect("groups");
    assert_eq!(groups.iter().map(|g| s(&g["group"])).collect::<Vec<_>>(), vec![HOSTS[0].1, HOSTS[1].1, STALE_HOST.1], "{b}");
    assert_eq!((groups[0]["peak_w"].as_f64(), groups[0]["exceeds"].as_bool(), groups[0]["hosts"].as_u64()), (Some(125.0), Some(true), Some(1)), "{b}");
    let h2 = &groups[1]["counted"][0];
    assert_eq!((s(&h2["host"]), s(&h2["tier"]), h2["scopes"].clone()), (HOSTS[1].0, "RAPL + NVMe estimate", serde_json::json!(["psys", "drive"])), "{b}");
    let peak2 = groups[1]["peak_w"].as_f64().unwrap_or(0.0);
    assert!(peak2 >= psys(1) * 0.98 && peak2 <= psys(1) * 1.02 + 8.25, "{} peak {peak2} W: psys {} W plus at most 8.25 W", HOSTS[1].1, psys(1));
    assert_eq!(s(&groups[2]["coverage"]), format!("0 of 1 hosts counted; missing: {} (no power data in the last 30d)", STALE_HOST.0));
    assert!(groups[2]["peak_w"].is_null(), "{b}");
    // Power cap at state 2 for the seeded model: one drive in host 1's inventory; per pattern the
    // sweep's watts (SW 18.5 → 8.9 W, RR at 0.7 of that) and MiB/s (SW 2000 → 600, RR 410 → 398).
    let c = plan(&["power-cap", "--model", wattflip_e2e::fleet::SEED_MODEL, "--state", "2"]);
    let saved = 0.5 * (18.5 - 8.9) + 0.5 * (18.5 * 0.7 - 8.9 * 0.7);
    let lost = 0.5 * 100.0 * (2000.0 - 600.0) / 2000.0 + 0.5 * 100.0 * (410.0 - 398.0) / 410.0;
    assert_eq!(c["drives"].as_u64(), Some(1), "{c}");
    let (got_saved, got_lost) = (c["fleet_saved_w"].as_f64().unwrap_or(0.0), c["throughput_lost_pct"].as_f64().unwrap_or(0.0));
    assert!((got_saved - saved).abs() < 1e-9 && (got_lost - lost).abs() < 1e-9, "power cap {got_saved} W, {got_lost} %: want {saved} W, {lost} %");
    // Capacity at RR 4 KiB: the seeded run used 2 + 0.02 · 4 = 2.08 J over 1024 IOs of 98 µs, so
    // 2.08 / 0.100352 = 20.73 W per drive and ⌊100 / 20.73⌋ = 4 drives of 1e6 / 98 IOPS each.
    let k = plan(&["capacity", "--model", wattflip_e2e::fleet::SEED_MODEL, "--budget-w", "100", "--workload", "RR:4KiB"]);
    let w = 2.08 / (1024.0 * 98e-6);
    assert!((k["watts_per_drive"].as_f64().unwrap_or(0.0) - w).abs() < 1e-9, "{k}");
    assert_eq!(k["drives"].as_u64(), Some(4), "{k}");
    assert!((k["total_iops"].as_f64().unwrap_or(0.0) - 4.0 * 1e6 / 98.0).abs() < 1e-6, "{k}");

    // Roll-ups of the seeded model: idle is the median of its runs' baselines (twenty ladder
    // levels on the rail at 3.1 W, ten on psys at 93.1 W → 3.1 W); the background class per
    // granularity experiment as seeded; one throttle episode over the drive's temperature days
    // (one UTC day unless the run straddled midnight).
    let r = plan(&["rollup", "--model", wattflip_e2e::fleet::SEED_MODEL, "--metric", "idle,background,throttle"]);
    let g = &r["groups"][0];
    assert_eq!((g["idle"]["devices"].as_u64(), g["idle"]["median_w"].as_f64()), (Some(1), Some(3.1)), "{r}");
    let classes: Vec<(&str, &str)> = g["background"].as_array().expect("background").iter().map(|b| (s(&b["experiment"]), s(&b["class"]))).collect();
    assert_eq!(classes, vec![("granularity/RR", "None"), ("granularity/RW", "S"), ("granularity/SR", "None"), ("granularity/SW", "GWP")], "{r}");
    let day = |ns: i64| ns.div_euclid(86_400_000_000_000);
    let days = if day(fleet.started_ns) == day(fleet.ended_ns) { 1 } else { 2 };
    let t = &g["throttle"];
    if days == 1 {
        assert_eq!((t["devices"].as_u64(), t["device_days"].as_u64(), t["events"].as_u64()), (Some(1), Some(1), Some(1)), "{r}");
    } else {
        assert_eq!((t["devices"].as_u64(), t["events"].as_u64()), (Some(1), Some(1)), "{r}");
    }

    // Throttling: throughput and power honour $device. With every device, power is the second
    // host's drive estimate per 10 s bucket; with the controller nvme0, throughput is its
    // namespace's runs only; with a CPU sensor chip, neither has a series.
    let (thr_d, thr_vars) = &dashboards["throttling.json"];
    let combined = panel(thr_d, "Temperature, throughput and power");
    let power = run_target(&fleet, combined, "C", thr_vars, range);
    let want_power =
        vec![(serde_json::json!({"host": HOSTS[1].0, "source": "nvme_estimate", "zone": SEED_CONTROLLER}), [8.25, 8.25, 4.6, 8.25].map(Value::from).to_vec())];
    assert_eq!(tagged_values(&power), want_power, "drive power of every device");
    let one = |device: &str| {
        let mut vars = thr_vars.clone();
        vars.insert("device".to_string(), escape_regex(device));
        let devices =
            |r: &str| -> BTreeSet<String> { run_target(&fleet, combined, r, &vars, range).iter().map(|x| s(&x["tags"]["device"]).to_string()).collect() };
        let zones: BTreeSet<String> = run_target(&fleet, combined, "C", &vars, range).iter().map(|x| s(&x["tags"]["zone"]).to_string()).collect();
        (devices("A"), devices("B"), zones)
    };
    let set = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<BTreeSet<String>>();
    assert_eq!(one(SEED_CONTROLLER), (set(&[SEED_CONTROLLER]), set(&["nvme0n1"]), set(&[SEED_CONTROLLER])), "$device = nvme0");
    assert_eq!(one("coretemp.0"), (set(&["coretemp.0"]), set(&[]), set(&[])), "$device = coretemp.0");
    // Its temperatures are the fleet overview's (same query, same truth), and its throughput with
    // $device = nvme0 is the mean MiB/s per 10 s bucket of each experiment of the seeded drive
    // (seeded_drive_runs, bucketed by start time by hand).
    check_temperatures("Temperature, throughput and power", &run_target(&fleet, combined, "A", thr_vars, range));
    let mut nvme0_vars = thr_vars.clone();
    nvme0_vars.insert("device".to_string(), escape_regex(SEED_CONTROLLER));
    let mut sums: BTreeMap<(String, i64), (f64, f64)> = BTreeMap::new();
    for (experiment, off, mibs) in &drive_runs {
        let e = sums.entry((experiment.clone(), bucket_ms(t0 + off))).or_default();
        *e = (e.0 + mibs, e.1 + 1.0);
    }
    let mut want_tp: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    for ((experiment, t), (sum, n)) in sums {
        want_tp.entry(experiment).or_default().push((t, sum / n));
    }
    let tp = run_target(&fleet, combined, "B", &nvme0_vars, range);
    let got_tp: BTreeMap<String, Vec<(i64, f64)>> = tp
        .iter()
        .inspect(|x| assert_eq!((s(&x["tags"]["host"]), s(&x["tags"]["device"])), (HOSTS[0].0, SEED_NAMESPACE), "throughput series {x}"))
        .map(|x| (s(&x["tags"]["experiment"]).to_string(), points(x, 1)))
        .collect();
    assert!(
        got_tp.len() == tp.len()
            && got_tp.keys().eq(want_tp.keys())
            && got_tp.values().zip(want_tp.values()).all(|(g, w)| g.len() == w.len() && g.iter().zip(w).all(|(a, b)| a.0 == b.0 && close(a.1, b.1))),
        "throughput of {SEED_NAMESPACE} per bucket: {got_tp:?}\nwant {want_tp:?}"
    );

    // NVMe thermal management: the largest counter per 10 s bucket of the seeded SMART records
    // (at t0 + 5 i s, i = 0 … 3: TMT1 transitions i, TMT2 transitions ⌊i / 2⌋, minutes above
    // the warning temperature max(i − 1, 0)).
    let mut want_tmt: BTreeMap<i64, [f64; 3]> = BTreeMap::new();
    for i in 0..4i64 {
        let b = want_tmt.entry(bucket_ms(t0 + i * 5_000_000_000)).or_insert([0.0; 3]);
        for (slot, v) in b.iter_mut().zip([i, i / 2, (i - 1).max(0)]) {
            *slot = slot.max(v as f64);
        }
    }
    let tmt = run_target(&fleet, panel(thr_d, "NVMe thermal management"), "A", thr_vars, range);
    assert_eq!(tmt.len(), 1, "NVMe thermal management: one drive: {tmt:?}");
    assert_eq!((s(&tmt[0]["tags"]["host"]), s(&tmt[0]["tags"]["device"])), (HOSTS[0].0, SEED_CONTROLLER), "NVMe thermal management: series");
    assert_eq!(
        tmt[0]["columns"],
        serde_json::json!(["time", "TMT1 transitions", "TMT2 transitions", "minutes above warning"]),
        "NVMe thermal management: columns"
    );
    let got_tmt: BTreeMap<i64, [f64; 3]> =
        tmt[0]["values"].as_array().expect("rows").iter().map(|r| (r[0].as_i64().unwrap_or(0), [1, 2, 3].map(|i| r[i].as_f64().unwrap_or(f64::NAN)))).collect();
    assert_eq!(got_tmt, want_tmt, "NVMe thermal management per bucket");
    check_efficiency(&fleet, &dashboards["device-efficiency.json"], range);
}

/// The device-efficiency dashboard against the seeded phases (harness/fleet.rs
/// `SEED_EFFICIENCY`, values by hand there): each model and firmware its own row, unstable
/// phases only in their own panel, and the model filter exact.
fn check_efficiency(fleet: &Fleet, (d, vars): &(Value, BTreeMap<String, String>), range: (i64, i64)) {
    let rows = |title: &str, vars: &BTreeMap<String, String>| -> BTreeMap<Vec<String>, Vec<f64>> {
        let series = run_target(fleet, panel(d, title), "A", vars, range);
        series
            .iter()
            .map(|x| {
                let tags = x["tags"].as_object().map(|t| t.values().map(|v| s(v).to_string()).collect()).unwrap_or_default();
                let rows = numeric_rows(x);
                assert_eq!(rows.len(), 1, "{title}: one row per series: {x}");
                (tags, rows[0].clone())
            })
            .collect()
    };
    let k = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let within = |got: &BTreeMap<Vec<String>, Vec<f64>>, want: &[(Vec<String>, Vec<f64>)], title: &str| {
        assert_eq!(got.keys().cloned().collect::<Vec<_>>(), want.iter().map(|w| w.0.clone()).collect::<Vec<_>>(), "{title}: series");
        for (tags, w) in want {
            assert!(got[tags].iter().zip(w).all(|(a, b)| close(*a, *b)) && got[tags].len() == w.len(), "{title} {tags:?}: {:?}, want {w:?}", got[tags]);
        }
    };
    // Tags come back sorted by key: (firmware, model, profile).
    within(
        &rows("IOPS/W per model and firmware", vars),
        &[(k(&["1.0", "SEED-EFF-A", "rand_read_4k"]), vec![18_750.0, 1.0]), (k(&["2.1", "SEED-EFF-B", "rand_read_4k"]), vec![12_000.0, 1.0])],
        "IOPS/W per model and firmware",
    );
    within(&rows("MiB/s/W per model and firmware", vars), &[(k(&["1.0", "SEED-EFF-A", "seq_read_128k"]), vec![250.0, 1.0])], "MiB/s/W");
    within(
        &rows("Ready-idle W/TB per model and firmware", vars),
        &[(k(&["1.0", "SEED-EFF-A"]), vec![4.8, 1.25, 800.0]), (k(&["2.1", "SEED-EFF-B"]), vec![6.0, 1.5625, 640.0])],
        "Ready-idle W/TB",
    );
    // (device, host, profile): the unstable phase, counted, with its stability figures only.
    within(&rows("Phases without a stable interval", vars), &[(k(&[SEED_NAMESPACE, HOSTS[1].0, "rand_write_4k"]), vec![1.0, -0.064, 0.031])], "Unstable");
    let by_drive = rows("Efficiency by drive and profile", vars);
    assert_eq!(by_drive.len(), 3, "{by_drive:?}");
    let rr1 = &by_drive[&k(&[SEED_NAMESPACE, "1.0", HOSTS[0].0, "SEED-EFF-A", "rand_read_4k"])];
    assert!([18_750.0, 73.2421875, 9.6, 9.6 / 180_000.0, 9.6 / 703.125].iter().zip(rr1).all(|(w, g)| close(*g, *w)), "{rr1:?}");
    // An exact model filter: only model A's row.
    let mut only_a = vars.clone();
    only_a.insert("model".into(), escape_regex("SEED-EFF-A"));
    let a = rows("IOPS/W per model and firmware", &only_a);
    assert_eq!(a.keys().cloned().collect::<Vec<_>>(), vec![k(&["1.0", "SEED-EFF-A", "rand_read_4k"])], "model filter");
}

#[test]
fn substitution_matches_grafana() {
    let vars: BTreeMap<String, String> = [("host".to_string(), "(a|b\\.c)".to_string()), ("group_by".to_string(), "rack".to_string())].into();
    assert_eq!(
        substitute("SELECT x FROM m WHERE $timeFilter AND \"host\" =~ /^$host$/ GROUP BY time($__interval), \"${group_by}\"", &vars, 1, 2),
        "SELECT x FROM m WHERE time >= 1ms and time <= 2ms AND \"host\" =~ /^(a|b\\.c)$/ GROUP BY time(10s), \"rack\""
    );
    assert_eq!(substitute("$nope and $", &vars, 1, 2), "$nope and $");
    assert_eq!(substitute("\"since_ms\" <= ${__from} AND ${__to} - ${__from}", &vars, 5, 7), "\"since_ms\" <= 5 AND 7 - 5");
    assert_eq!(escape_regex("file:scratch.dat"), "file:scratch\\.dat");
    assert_eq!(used_variables("/^$host$/ ${scope} $__interval $"), ["__interval", "host", "scope"].iter().map(|s| s.to_string()).collect());
}
