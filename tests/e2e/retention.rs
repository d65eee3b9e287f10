//! Changing `raw_retention` on a live database (issue 40): 7 d → 2 h → 30 d with a collector
//! restart between, against a real influxd. Each start brings the `raw` policy to the new duration
//! with the shard duration InfluxDB would pick for it (1 day for 7 d and 30 d, 1 hour for 2 h; a
//! 2 h DURATION beside the 1-day shards of 7 d is refused by InfluxDB), and the rollups and the
//! dashboards' resolution markers go on after each change: a minute sent after the restart is
//! rolled up, and a raw marker is written whose `since_ms` follows the new retention.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::rollups::{rolled_points, wait, Stream, MINUTE_NS, PER_MINUTE, ZONES};
use wattflip_e2e::*;

const DB: &str = "wf_retention";

fn collector(influx: &Influx, raw: &str) -> Collector {
    let extra = format!("raw_retention = \"{raw}\"\nrollup_settle = \"1s\"\n{}", pki().collector_tls());
    Collector::start_with(free_port(), &influx.url, DB, &extra)
}

/// (duration, shard group duration) of the `raw` policy as InfluxDB reports them.
fn raw_policy(influx: &Influx) -> Option<(String, String)> {
    let rows = influx.try_rows(DB, &format!("SHOW RETENTION POLICIES ON \"{DB}\""))?;
    let r = rows.iter().find(|r| r[0].as_str() == Some("raw"))?;
    Some((r[1].as_str()?.to_string(), r[2].as_str()?.to_string()))
}

/// The newest raw marker's `since_ms`.
fn raw_since_ms(influx: &Influx) -> Option<i64> {
    let q = "SELECT last(\"since_ms\") FROM \"wattflip_resolution\" WHERE \"kind\" = 'raw'";
    influx.try_rows(DB, q).and_then(|r| r.first().and_then(|r| r[1].as_i64()))
}

#[test]
fn raw_retention_changes_from_7d_to_2h_to_30d_on_a_live_database() {
    let influx = Influx::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // (raw_retention, its duration and shard duration as SHOW RETENTION POLICIES prints them).
    let steps = [("7d", "168h0m0s", "24h0m0s", 7 * 86_400_000), ("2h", "2h0m0s", "1h0m0s", 7_200_000), ("30d", "720h0m0s", "24h0m0s", 30 * 86_400_000)];
    for (k, (raw, duration, shard, retention_ms)) in steps.into_iter().enumerate() {
        let c = collector(&influx, raw);
        let policy = (duration.to_string(), shard.to_string());
        wait(&format!("the raw policy at {raw}"), || raw_policy(&influx).as_ref() == Some(&policy));
        // A minute of one host, sent after this start: its rollup appears.
        let t0 = (fleet::now_ns() / MINUTE_NS - 5) * MINUTE_NS;
        let host = format!("ret-{k}");
        rt.block_on(async {
            let mut s = Stream::open(&c.url, &host, "r1").await;
            s.send(k as i64, &ZONES, t0, 0, 0..PER_MINUTE).await;
        });
        let host_points = || {
            let q = format!("SELECT sum(\"count\") FROM \"rollup_1m\".\"power\" WHERE \"host\" = '{host}' AND time >= {t0}");
            influx.try_rows(DB, &q).and_then(|r| r.first().and_then(|r| r[1].as_i64())).unwrap_or(0)
        };
        wait(&format!("the rollup of the minute sent at {raw}:\n{}", c.log()), || host_points() == PER_MINUTE * ZONES.len() as i64);
        // The raw marker written by this start claims no more than the new retention.
        let started_ms = t0 / 1_000_000;
        wait(&format!("a raw marker for {raw}:\n{}", c.log()), || {
            raw_since_ms(&influx).is_some_and(|s| s >= started_ms - retention_ms && s <= fleet::now_ns() / 1_000_000 - retention_ms + 3_600_000)
        });
        assert!(rolled_points(&influx, DB, t0, t0 + MINUTE_NS) >= PER_MINUTE * ZONES.len() as i64);
        assert!(!c.log().contains("cannot create the retention policies"), "{raw}: the policies were refused:\n{}", c.log());
        drop(c);
    }
}
