//! The InfluxDB sink's configuration: the `[influx]` table of the collector's TOML ([`RawInflux`])
//! and its checked form ([`InfluxConfig`]), owned by the sink and composed by the service
//! configuration (`crate::config`). A new setting is a field of both, a check in
//! [`InfluxConfig::from_raw`] (its problems named `influx.<key>`) and a line in
//! `collector.example.toml`.

use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;
use wattflip_infra::duration::{Bounded, CENTURY, HOUR};
use wattflip_infra::tomlcfg::Loader;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InfluxApi {
    /// `/write` + `/query` of InfluxDB 1.x; also served by 1.8+, 2.x (DBRP) and 3.x.
    V1,
    /// `/api/v2/write` with a token (InfluxDB 2.x, 3.x; 1.8+ with `user:password` as token).
    V2,
}

#[derive(Debug, Clone, PartialEq)]
pub struct InfluxConfig {
    pub url: String,
    pub database: String,
    pub api: InfluxApi,
    pub org: String,
    pub bucket: String,
    /// Token (v2) or password (v1), read from a file or an environment variable; never logged.
    pub secret: Option<Secret>,
    pub username: String,
    pub batch_lines: usize,
    /// Requests in flight at once (writer tasks sharing one queue).
    pub writers: usize,
    pub flush_interval: Duration,
    pub request_timeout: Duration,
    pub max_backoff: Duration,
    pub gzip: bool,
    /// Where lines InfluxDB refused are kept (`wattflip-collector dead-letter list|replay`).
    pub dead_letter_dir: PathBuf,
    /// Raw retention and 1-minute rollups (`raw_retention` set), else None: one default retention
    /// policy as before (docs/schema.md, *Retention and rollups*).
    pub retention: Option<Retention>,
}

/// The retention policy raw points are written to (the database's default, so every unqualified
/// query reads raw points) and the one rollups and the whole copies of runs and events go to.
pub const RAW_RP: &str = "raw";
pub const ROLLUP_RP: &str = "rollup_1m";
/// The hourly tier computed from the 1-minute rollups (`rollup::hourly`), kept as long.
pub const HOURLY_RP: &str = "rollup_1h";

/// `[influx] raw_retention`, `rollup_retention`, `rollup_settle`, `rollup_max_dirty`.
#[derive(Debug, Clone, PartialEq)]
pub struct Retention {
    /// How long raw points are kept (InfluxDB's minimum is 1 h).
    pub raw: Duration,
    /// How long rollups and the copies of runs and events are kept (≥ `raw`).
    pub rollup: Duration,
    /// How long after the last write into a minute that minute's rollup is recomputed.
    pub settle: Duration,
    /// At most this many (measurement, host, minute) buckets wait to be recomputed.
    pub max_dirty: usize,
}

impl Retention {
    /// The statements that create the retention policies (or bring an existing one to the
    /// configured duration): `raw` as the default, `rollup_1m` and `rollup_1h` beside it. Each CREATE fails
    /// harmlessly when the policy exists (its error is ignored); the ALTER that follows applies.
    /// Both name the shard duration that fits the new duration ([`shard_duration`]): InfluxDB
    /// refuses an ALTER whose DURATION is shorter than the policy's current shard duration
    /// (7d → 2h kept the 1-day shards of 7d and failed).
    pub fn setup_statements(&self, database: &str) -> Vec<(String, bool)> {
        let db = database.replace('"', "");
        let (raw, long) = (self.raw.as_secs(), self.rollup.as_secs());
        let (raw_shard, long_shard) = (shard_duration(self.raw).as_secs(), shard_duration(self.rollup).as_secs());
        vec![
            (format!("CREATE DATABASE \"{db}\""), false),
            (format!("CREATE RETENTION POLICY \"{RAW_RP}\" ON \"{db}\" DURATION {raw}s REPLICATION 1 SHARD DURATION {raw_shard}s DEFAULT"), true),
            (format!("ALTER RETENTION POLICY \"{RAW_RP}\" ON \"{db}\" DURATION {raw}s SHARD DURATION {raw_shard}s DEFAULT"), false),
            (format!("CREATE RETENTION POLICY \"{ROLLUP_RP}\" ON \"{db}\" DURATION {long}s REPLICATION 1 SHARD DURATION {long_shard}s"), true),
            (format!("ALTER RETENTION POLICY \"{ROLLUP_RP}\" ON \"{db}\" DURATION {long}s SHARD DURATION {long_shard}s"), false),
            (format!("CREATE RETENTION POLICY \"{HOURLY_RP}\" ON \"{db}\" DURATION {long}s REPLICATION 1 SHARD DURATION {long_shard}s"), true),
            (format!("ALTER RETENTION POLICY \"{HOURLY_RP}\" ON \"{db}\" DURATION {long}s SHARD DURATION {long_shard}s"), false),
        ]
    }
}

/// The shard-group duration InfluxDB 1.x picks by default for a retention duration (1 h below
/// 2 days, 1 day below 180 days, 7 days from there: `shardGroupDuration` in
/// <https://github.com/influxdata/influxdb/blob/1.8/services/meta/data.go>; the rule is listed in
/// <https://docs.influxdata.com/influxdb/v1/query_language/manage-database/#retention-policy-management>),
/// named explicitly so that changing the duration changes the shards with it.
pub fn shard_duration(retention: Duration) -> Duration {
    const DAY: u64 = 86_400;
    match retention.as_secs() {
        d if d < 2 * DAY => Duration::from_secs(3600),
        d if d < 180 * DAY => Duration::from_secs(DAY),
        _ => Duration::from_secs(7 * DAY),
    }
}

/// A credential. Its Debug output is redacted so it cannot leak into logs or errors.
#[derive(Clone, PartialEq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// The `[influx]` table as written; [`InfluxConfig::from_raw`] checks it.
#[derive(Debug, Default, Deserialize)]
pub struct RawInflux {
    url: Option<String>,
    database: Option<String>,
    api: Option<String>,
    org: Option<String>,
    bucket: Option<String>,
    username: Option<String>,
    secret_file: Option<PathBuf>,
    secret_env: Option<String>,
    batch_lines: Option<usize>,
    writers: Option<usize>,
    flush_interval: Option<String>,
    request_timeout: Option<String>,
    max_backoff: Option<String>,
    gzip: Option<bool>,
    dead_letter_dir: Option<PathBuf>,
    raw_retention: Option<String>,
    rollup_retention: Option<String>,
    rollup_settle: Option<String>,
    rollup_max_dirty: Option<usize>,
}

pub const DEFAULT_DEAD_LETTER_DIR: &str = "/var/lib/wattflip-collector/dead-letter";

impl InfluxConfig {
    /// Checks the `[influx]` table, with the command line's `--influx-url` and `--influx-db` over
    /// it, and records every problem in `loader` under `influx.<key>` (the caller's
    /// `loader.finish()` reports them). Returns defaults where a value was refused.
    pub fn from_raw(influx: RawInflux, url_override: Option<String>, database_override: Option<String>, loader: &mut Loader) -> InfluxConfig {
        let url = url_override.or(influx.url).unwrap_or_else(|| "http://127.0.0.1:8086".into());
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            loader.problem("influx.url", format!("`{url}` must start with http:// or https://"));
        }
        let database = database_override.or(influx.database).unwrap_or_else(|| "wattflip".into());
        if database.is_empty() || database.contains(['"', '\n']) {
            loader.problem("influx.database", "must be a non-empty name without quotes");
        }
        let api = match influx.api.as_deref().unwrap_or("v1") {
            "v1" => InfluxApi::V1,
            "v2" => InfluxApi::V2,
            other => {
                loader.problem("influx.api", format!("`{other}` is not `v1` or `v2`"));
                InfluxApi::V1
            }
        };
        let org = influx.org.unwrap_or_default();
        let bucket = influx.bucket.unwrap_or_else(|| database.clone());
        if api == InfluxApi::V2 && org.is_empty() {
            loader.problem("influx.org", "is required with api = \"v2\"");
        }
        let secret = read_secret(influx.secret_file, influx.secret_env, loader);
        if api == InfluxApi::V2 && secret.is_none() {
            loader.problem("influx.secret_file", "a token is required with api = \"v2\" (secret_file or secret_env)");
        }
        let batch_lines = influx.batch_lines.unwrap_or(5000);
        if !(1..=5000).contains(&batch_lines) {
            loader.problem("influx.batch_lines", format!("{batch_lines} is outside 1..=5000"));
        }
        // Two in flight: InfluxDB stores one request while the next is gathered and compressed.
        let writers = influx.writers.unwrap_or(2);
        if !(1..=8).contains(&writers) {
            loader.problem("influx.writers", format!("{writers} is outside 1..=8"));
        }
        let (interval, timeout) = (Bounded::new(Duration::from_millis(1), HOUR), Bounded::new(Duration::from_millis(100), HOUR));
        let flush_interval = interval.read("influx.flush_interval", influx.flush_interval.as_deref(), Duration::from_secs(1), loader);
        let request_timeout = timeout.read("influx.request_timeout", influx.request_timeout.as_deref(), Duration::from_secs(10), loader);
        let max_backoff = interval.read("influx.max_backoff", influx.max_backoff.as_deref(), Duration::from_secs(30), loader);
        let retention = retention(&influx.raw_retention, &influx.rollup_retention, &influx.rollup_settle, influx.rollup_max_dirty, loader);
        if retention.is_some() && api == InfluxApi::V2 {
            loader.problem("influx.raw_retention", "needs api = \"v1\": retention policies and SELECT … INTO are InfluxQL (1.x API)");
        }
        let dead_letter_dir = influx.dead_letter_dir.unwrap_or_else(|| PathBuf::from(DEFAULT_DEAD_LETTER_DIR));
        loader.check_dir("influx.dead_letter_dir", &dead_letter_dir);
        InfluxConfig {
            url: url.trim_end_matches('/').to_string(),
            database,
            api,
            org,
            bucket,
            secret,
            username: influx.username.unwrap_or_default(),
            batch_lines,
            writers,
            flush_interval,
            request_timeout,
            max_backoff,
            gzip: influx.gzip.unwrap_or(true),
            dead_letter_dir,
            retention,
        }
    }
}

impl InfluxConfig {
    /// The statements that create the database (and with retention its policies), each with
    /// whether it may fail harmlessly.
    pub fn setup_statements(&self) -> Vec<(String, bool)> {
        match &self.retention {
            Some(r) => r.setup_statements(&self.database),
            None => vec![(format!("CREATE DATABASE \"{}\"", self.database.replace('"', "")), false)],
        }
    }

    /// The `rp` parameter of a 1.x write: the raw policy with retention, none without.
    pub fn raw_rp(&self) -> Vec<(&'static str, &'static str)> {
        self.retention.iter().map(|_| ("rp", RAW_RP)).collect()
    }
}

/// The checked retention settings; None when `raw_retention` is not set (then the other three
/// must not be either: they would do nothing).
fn retention(raw: &Option<String>, rollup: &Option<String>, settle: &Option<String>, max_dirty: Option<usize>, loader: &mut Loader) -> Option<Retention> {
    let Some(raw) = raw else {
        if rollup.is_some() || settle.is_some() || max_dirty.is_some() {
            loader.problem("influx.raw_retention", "rollup_retention, rollup_settle and rollup_max_dirty need raw_retention (e.g. \"7d\")");
        }
        return None;
    };
    // InfluxDB keeps durations as i64 nanoseconds (292 years); a century is the longest kept here.
    let century = CENTURY;
    let raw = Bounded::new(HOUR, century).because("InfluxDB's minimum retention is 1h").read_set("influx.raw_retention", raw, loader);
    let rollup = match rollup {
        Some(s) => Bounded::new(raw.unwrap_or(HOUR), century).because("at least raw_retention: rollups must outlive the raw points").read_set(
            "influx.rollup_retention",
            s,
            loader,
        ),
        None => Some(Duration::from_secs(400 * 86_400)),
    };
    if let (Some(raw), Some(r)) = (raw, rollup) {
        if r < raw {
            loader.problem("influx.rollup_retention", format!("the default 400d is shorter than raw_retention ({raw:?}): rollups must outlive the raw points"));
        }
    }
    let settle = match settle {
        Some(s) => Bounded::new(Duration::ZERO, HOUR).read_set("influx.rollup_settle", s, loader),
        None => Some(Duration::from_secs(30)),
    };
    let max_dirty = max_dirty.unwrap_or(200_000);
    if max_dirty == 0 {
        loader.problem("influx.rollup_max_dirty", "must be at least 1");
    }
    let (raw, rollup, settle) = (raw?, rollup?, settle?);
    Some(Retention { raw, rollup, settle, max_dirty })
}

/// The token or password from `secret_file` or `secret_env` (at most one of them), a problem in
/// `loader` when it cannot be read.
fn read_secret(file: Option<PathBuf>, env: Option<String>, loader: &mut Loader) -> Option<Secret> {
    match (file, env) {
        (Some(_), Some(_)) => {
            loader.problem("influx.secret_file", "set either secret_file or secret_env, not both");
            None
        }
        (Some(f), None) => match std::fs::read_to_string(&f) {
            Ok(s) => Some(Secret(s.trim().to_string())),
            Err(e) => {
                loader.problem("influx.secret_file", format!("cannot read {}: {e}", f.display()));
                None
            }
        },
        (None, Some(var)) => match std::env::var(&var) {
            Ok(s) if !s.is_empty() => Some(Secret(s)),
            _ => {
                loader.problem("influx.secret_env", format!("environment variable {var} is not set"));
                None
            }
        },
        (None, None) => None,
    }
}
