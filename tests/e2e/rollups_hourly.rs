//! The hourly tier (`rollup_1h`, docs/schema.md *Retention and rollups*) through the real
//! collector into a real influxd: `plan budget` on the hourly tier (with the minute rollups for
//! the window's partial hours) gives exactly the answer of the 1-minute rollups and of the
//! generator, per rack and per host, over a window whose peak lies in the hourly part for one rack
//! and in the last hours (minute tier) for the other, over a window that starts inside an hour,
//! with a host that changed tier in the window (its old tier's points are left out, as the minute
//! path leaves them out), and again after a minute arrives late into an hour already computed.
//!
//! Values are quarters of a watt (`rollups::watts`): every sum is exact in any order, so the
//! expected peaks are computed here from the generator with `==`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::rollups::{collector, watts, Stream, Zone, MINUTE_NS, PER_MINUTE};
use serde_json::Value;
use std::time::Duration;
use wattflip_e2e::*;

const HOUR_NS: i64 = 60 * MINUTE_NS;
const WALL: Zone = ("ipmi", "dcmi", "wall", false);
const PSU: [Zone; 2] = [("hwmon", "pmbus-0/pin", "psu_in", false), ("hwmon", "pmbus-1/pin", "psu_in", false)];
/// Four rails: more than the rack's peak if they were added to it.
const RAILS: [Zone; 4] = [
    ("hwmon", "ina3221-0/ch1", "rail", false),
    ("hwmon", "ina3221-0/ch2", "rail", false),
    ("hwmon", "ina3221-0/ch3", "rail", false),
    ("hwmon", "ina3221-1/ch1", "rail", false),
];

/// (rack, peak) per rack and (host, peak) per host counted.
type Figures = (Vec<(String, f64)>, Vec<(String, f64)>);
/// (host, rack, generator index, zones counted, minutes sent).
type Host = (&'static str, &'static str, i64, Vec<Zone>, Vec<i64>);

/// (host, rack, generator index, zones counted, minutes sent at first). Minutes count from the
/// hour four hours before the test's hour: 0–179 are hourly, 180 on the last hours.
fn fleet() -> Vec<Host> {
    vec![
        ("hr-a", "ra", 0, vec![WALL], vec![10, 40, 70, 100, 130, 170, 190, 200]),
        ("hr-b", "ra", 1, PSU.to_vec(), vec![10, 40, 70, 100, 130]),
        ("hr-c", "rb", 2, vec![WALL], vec![10, 70, 130, 190]),
        // Rails in minute 10 (tagged `rails` then), a wall meter from minute 40 on.
        ("hr-mix", "rb", 3, vec![WALL], vec![40, 70, 130, 190]),
    ]
}

/// The minute mean of a host's counted zones (the generator's own sum).
fn host_w(h: i64, zones: usize, m: i64) -> f64 {
    (0..zones as i64).map(|z| (0..PER_MINUTE).map(|i| watts(h, z, m, i)).sum::<f64>() / PER_MINUTE as f64).sum()
}

/// Per rack the peak of the minute sums and per host its own peak, over minutes > `from`.
fn truth(sent: &[Host], from: i64) -> Figures {
    let mut racks: std::collections::BTreeMap<String, std::collections::BTreeMap<i64, f64>> = Default::default();
    let mut hosts = Vec::new();
    for (host, rack, h, zones, minutes) in sent {
        let ms: Vec<i64> = minutes.iter().copied().filter(|m| *m > from).collect();
        for m in &ms {
            *racks.entry(rack.to_string()).or_default().entry(*m).or_default() += host_w(*h, zones.len(), *m);
        }
        hosts.push((host.to_string(), ms.iter().map(|m| host_w(*h, zones.len(), *m)).fold(f64::MIN, f64::max)));
    }
    hosts.sort_by(|a, b| a.0.cmp(&b.0));
    (racks.into_iter().map(|(r, by_m)| (r, by_m.values().copied().fold(f64::MIN, f64::max))).collect(), hosts)
}

fn plan(influx: &Influx, db: &str, since: &str, resolution: &str) -> Value {
    let o = std::process::Command::new(bin("wattflip-collector", "wattflip-collector"))
        .args(["--influx-url", &influx.url, "--influx-db", db, "plan", "budget", "--group-by", "rack", "--budget-w", "1000"])
        .args(["--since", since, "--resolution", resolution, "--json"])
        .output()
        .expect("run wattflip-collector plan budget");
    assert!(o.status.success(), "plan budget --since {since} --resolution {resolution}: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// (rack, peak) and (host, peak) of a plan (NaN for a group without a peak yet: never equal).
fn figures(p: &Value) -> Figures {
    let groups = p["groups"].as_array().unwrap();
    let racks = groups.iter().map(|g| (g["group"].as_str().unwrap().to_string(), g["peak_w"].as_f64().unwrap_or(f64::NAN))).collect();
    let mut hosts: Vec<(String, f64)> = groups
        .iter()
        .flat_map(|g| g["counted"].as_array().unwrap().iter().map(|h| (h["host"].as_str().unwrap().to_string(), h["peak_w"].as_f64().unwrap())))
        .collect();
    hosts.sort_by(|a, b| a.0.cmp(&b.0));
    (racks, hosts)
}

/// The hourly plan over `since` once it answers `want` (the tier is computed after the minutes
/// settle); it must equal the minute-rollup plan, which must equal `want` too.
fn hourly_equals_minutes(influx: &Influx, db: &str, since: &str, want: &Figures, log: &dyn Fn() -> String) -> Value {
    let mut last = Value::Null;
    let ok = wait_for(Duration::from_secs(60), || {
        last = plan(influx, db, since, "hourly");
        (last["resolution"].as_str().unwrap().starts_with("hourly tier") && figures(&last) == *want).then_some(())
    });
    assert!(ok.is_some(), "the hourly plan over {since} equal to the generator within 60 s: want {want:?}, got {last}\n{}", log());
    let minutes = plan(influx, db, since, "rollup");
    assert_eq!(figures(&minutes), *want, "minute rollups over {since}: {minutes}");
    assert_eq!(last["groups"], minutes["groups"], "hourly vs minute rollups over {since}: {last}");
    last
}

#[test]
fn plan_budget_on_the_hourly_tier_equals_the_minute_rollups_also_after_late_data() {
    const DB: &str = "wf_rollup_hourly";
    let influx = Influx::start();
    let c = collector(&influx, DB);
    let now = wattflip_e2e::fleet::now_ns();
    let t0 = (now / HOUR_NS - 4) * HOUR_NS;
    let mut sent = fleet();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut b = rt.block_on(async {
        let mut streams = Vec::new();
        for (host, rack, h, zones, minutes) in &sent {
            let mut s = Stream::open(&c.url, host, rack).await;
            if *host == "hr-mix" {
                s.send(*h, &RAILS, t0, 10, 0..PER_MINUTE).await;
            }
            for m in minutes {
                s.send(*h, zones, t0, *m, 0..PER_MINUTE).await;
            }
            streams.push(s);
        }
        streams.swap_remove(1)
    });
    // The collector tagged hr-mix's rails (its tier then) and its wall meter after.
    let tags = influx.series(DB, "SELECT count(\"watts\") FROM \"raw\".\"power\" WHERE \"host\" = 'hr-mix' GROUP BY \"budget\"");
    let budgets: Vec<&str> = tags.iter().map(|(t, _)| t["budget"].as_str().unwrap()).collect();
    assert_eq!(budgets, ["rails", "wall"], "hr-mix's tiers");

    // 30 days: every hour before the last two from the tier (backfilled back to hour 0).
    let want = truth(&sent, -1);
    let p = hourly_equals_minutes(&influx, DB, "30d", &want, &|| c.log());
    // Backfilled to the oldest minute rollup's hour: every table covers hour 0 on.
    let cov = influx.series(DB, "SELECT last(\"since_ns\") FROM \"rollup_1h\".\"wattflip_rollup_1h\" GROUP BY \"table\"");
    let cov: Vec<(&str, i64)> = cov.iter().map(|(t, r)| (t["table"].as_str().unwrap(), r[0][1].as_i64().unwrap())).collect();
    assert_eq!(cov, [("group_power_rack", t0), ("host_power", t0), ("power", t0)], "the tier's coverage");
    assert!(p["resolution"].as_str().unwrap().contains("1 host(s) with more tagged scopes than their tier"), "{p}");
    // rack ra peaks in the hourly part (minute 130), rb in the last hours (minute 190).
    assert_eq!(want.0[0].1, host_w(0, 1, 130) + host_w(1, 2, 130));
    assert_eq!(want.0[1].1, host_w(2, 1, 190) + host_w(3, 1, 190));

    // A window that starts inside hour 1 (minute 90.5): its first part from the minute tier.
    let since = format!("{}s", (wattflip_e2e::fleet::now_ns() - (t0 + 90 * MINUTE_NS + 30_000_000_000)) / 1_000_000_000);
    hourly_equals_minutes(&influx, DB, &since, &truth(&sent, 90), &|| c.log());

    // Late: hr-b's minute 170, in an hour the tier has computed; rack ra's peak moves there.
    rt.block_on(b.send(1, &PSU, t0, 170, 0..PER_MINUTE));
    sent[1].4.push(170);
    let want = truth(&sent, -1);
    assert_eq!(want.0[0].1, host_w(0, 1, 170) + host_w(1, 2, 170));
    hourly_equals_minutes(&influx, DB, "30d", &want, &|| c.log());
    drop(c);
}
