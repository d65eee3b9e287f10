//! The resolution markers the Grafana dashboards choose a retention policy by (docs/schema.md,
//! *Dashboards: resolution by range*): points of [`MEASUREMENT`] in the default policy that say,
//! for a dashboard's time range, which policy holds its points and which field holds a peak.
//! Grafana cannot pick a policy by range itself; its `rp` variable runs [`VARIABLE_QUERY`] with the
//! range's `${__from}` and `${__to}`; panels that read only `power` (the power budget) pick by the
//! markers' `power_rp`, which names the hourly tier for ranges beyond [`HOURLY_MIN_RANGE`]. A new
//! resolution is one more marker kind in [`marker_lines`] and a row in the docs.

use crate::rollup::client::Client;
use crate::rollup::setup::Setup;
use crate::sinks::influx::config::{InfluxApi, InfluxConfig, Retention, HOURLY_RP, RAW_RP, ROLLUP_RP};
use std::time::Duration;
use tokio::sync::watch;
use wattflip_infra::Backoff;

pub const MEASUREMENT: &str = "wattflip_resolution";
/// Ranges up to a day read raw points (when they still cover the range's start): a day is about
/// a thousand 1-minute buckets, past which a graph draws no finer than the rollups anyway.
pub const RAW_MAX_RANGE: Duration = Duration::from_secs(86_400);
/// Ranges longer than a week read `power` from the hourly tier (`power_rp`): a graph of more than
/// a week draws no finer than an hour per pixel column anyway. Everything else stays on
/// `rollup_1m` (`rp`).
pub const HOURLY_MIN_RANGE: Duration = Duration::from_secs(7 * 86_400);
/// How often the markers are written again (without retention, and at most with it).
const EVERY: Duration = Duration::from_secs(3_600);
/// What the dashboards' `rp` variable runs (`peak_celsius`, `peak_watts` select those fields):
/// the newest marker whose policy covers the range. With rollups the newest markers are a raw one,
/// 1 ms before it a rollup one and 2 ms before it an hourly one; each qualifies only when the range
/// starts after its `since_ms` and spans at most its `max_range_ms`, so the newest that qualifies
/// is raw (a day inside the raw retention), rollup (up to a week) or hourly (longer).
pub const VARIABLE_QUERY: &str = "SELECT last(\"rp\") FROM \"wattflip_resolution\" WHERE \"since_ms\" <= ${__from} AND \"max_range_ms\" >= ${__to} - ${__from}";

/// How often the markers are written: hourly, or four times per raw retention when that is
/// shorter, so the raw marker's `since_ms` (the write time − retention + this period) never
/// claims an hour the raw policy has already dropped.
pub fn period(retention: Option<&Retention>) -> Duration {
    retention.map_or(EVERY, |r| EVERY.min(r.raw / 4))
}

/// The marker lines written at `now_ns`, and the policy they go to (`None`: the default). With
/// retention: raw points for ranges within a day that start inside the raw retention, rollups
/// otherwise, and for `power_rp` the hourly tier beyond a week. Without: the default policy
/// `default_rp` for every range.
pub fn marker_lines(retention: Option<&Retention>, default_rp: &str, now_ns: i64) -> (String, Option<&'static str>) {
    // (kind, rp, power_rp), since_ms, max_range_ms, (peak_celsius, peak_watts), time.
    let line = |(kind, rp, power_rp): (&str, &str, &str), since_ms: i64, max_range_ms: i64, peak: (&str, &str), t: i64| {
        format!(
            "{MEASUREMENT},kind={kind} rp=\"{rp}\",power_rp=\"{power_rp}\",since_ms={since_ms}i,max_range_ms={max_range_ms}i,peak_celsius=\"{}\",peak_watts=\"{}\" {t}\n",
            peak.0, peak.1
        )
    };
    let now_ms = now_ns.div_euclid(1_000_000);
    match retention {
        Some(r) => {
            let since = now_ms - r.raw.as_millis() as i64 + period(Some(r)).as_millis() as i64;
            let raw = line(("raw", RAW_RP, RAW_RP), since, RAW_MAX_RANGE.as_millis() as i64, ("celsius", "watts"), now_ns);
            let peaks = ("peak_celsius", "peak_watts");
            let rollup = line(("rollup", ROLLUP_RP, ROLLUP_RP), 0, HOURLY_MIN_RANGE.as_millis() as i64, peaks, now_ns - 1_000_000);
            let hourly = line(("rollup_1h", ROLLUP_RP, HOURLY_RP), 0, i64::MAX, peaks, now_ns - 2_000_000);
            (format!("{raw}{rollup}{hourly}"), Some(RAW_RP))
        }
        None => (line(("default", default_rp, default_rp), 0, i64::MAX, ("celsius", "watts"), now_ns), None),
    }
}

/// Writes the markers once; finds the default policy's name when there is no retention.
async fn write_once(db: &Client) -> Result<(), String> {
    let retention = db.cfg.retention.as_ref();
    let default_rp = match retention {
        Some(_) => String::new(),
        None => {
            let rows = db.rows(&format!("SHOW RETENTION POLICIES ON \"{}\"", db.cfg.database.replace('"', ""))).await?;
            let default = rows.iter().find(|r| r.get(4).and_then(serde_json::Value::as_bool) == Some(true));
            default.and_then(|r| r.first()?.as_str().map(str::to_string)).ok_or("the database has no default retention policy yet")?
        }
    };
    let now_ns = wattflip_proto::units::UnixNanos::now().0;
    let (lines, rp) = marker_lines(retention, &default_rp, now_ns);
    db.write(lines, rp).await
}

/// Runs until `shutdown`: writes the markers at start (retrying until the database exists) and
/// every [`period`]. Only the 1.x API has retention policies and InfluxQL's `/query`.
pub async fn run(cfg: InfluxConfig, setup: Setup, mut shutdown: watch::Receiver<bool>) {
    if cfg.api != InfluxApi::V1 {
        return;
    }
    let every = period(cfg.retention.as_ref());
    let db = Client::new(cfg);
    // The database and policies first, as the writer does, since no agent may have written yet
    // (once: not every period).
    if !setup.run(&db, "resolution markers", &db.cfg.setup_statements(), &mut shutdown).await {
        return;
    }
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    loop {
        let wait = match write_once(&db).await {
            Ok(()) => {
                backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
                every
            }
            Err(e) => {
                if backoff.attempt() >= 3 {
                    tracing::warn!(attempt = backoff.attempt(), "cannot write the dashboards' resolution markers ({MEASUREMENT}), will retry: {e}");
                }
                backoff.next_delay_or(None)
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_say_raw_within_retention_and_a_day_else_rollups() {
        let r = Retention { raw: Duration::from_secs(7 * 86_400), rollup: Duration::from_secs(400 * 86_400), settle: Duration::from_secs(30), max_dirty: 10 };
        let now_ns = 1_800_000_000_123_456_789;
        let (lines, rp) = marker_lines(Some(&r), "", now_ns);
        assert_eq!(rp, Some("raw"));
        assert_eq!(
            lines,
            "wattflip_resolution,kind=raw rp=\"raw\",power_rp=\"raw\",since_ms=1799398800123i,max_range_ms=86400000i,peak_celsius=\"celsius\",peak_watts=\"watts\" 1800000000123456789\n\
             wattflip_resolution,kind=rollup rp=\"rollup_1m\",power_rp=\"rollup_1m\",since_ms=0i,max_range_ms=604800000i,peak_celsius=\"peak_celsius\",peak_watts=\"peak_watts\" 1800000000122456789\n\
             wattflip_resolution,kind=rollup_1h rp=\"rollup_1m\",power_rp=\"rollup_1h\",since_ms=0i,max_range_ms=9223372036854775807i,peak_celsius=\"peak_celsius\",peak_watts=\"peak_watts\" 1800000000121456789\n"
        );
        // A one-hour raw retention is marked four times an hour, 15 minutes of margin.
        let short = Retention { raw: Duration::from_secs(3_600), ..r };
        assert_eq!(period(Some(&short)), Duration::from_secs(900));
        let (lines, _) = marker_lines(Some(&short), "", now_ns);
        assert!(lines.contains("since_ms=1799997300123i"), "{lines}");
        let (lines, rp) = marker_lines(None, "autogen", now_ns);
        assert_eq!(rp, None);
        assert_eq!(
            lines,
            "wattflip_resolution,kind=default rp=\"autogen\",power_rp=\"autogen\",since_ms=0i,max_range_ms=9223372036854775807i,peak_celsius=\"celsius\",peak_watts=\"watts\" 1800000000123456789\n"
        );
    }
}
