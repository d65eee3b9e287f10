//! The OTLP sink against a real Prometheus (issue 28 items 1 and 3): a known fleet of three hosts
//! with different power tiers (RAPL psys + an NVMe estimate, a wall meter over RAPL, package +
//! DRAM counters), temperatures, a SMART log, an inventory and a probe run, streamed as agents
//! stream them through the real collector (InfluxDB required, OTLP optional) into a real
//! `prometheus --web.enable-otlp-receiver`. Every value is found exactly through Prometheus's HTTP
//! API under the names Prometheus gives OTel metrics (`hw_energy_joules_total`, …), against sums
//! written out by hand from the tables below (values in quarters, so every sum is exact).

use crate::otlp_fleet::*;
use std::collections::BTreeMap;
use wattflip_e2e::prometheus::Prometheus;
use wattflip_e2e::*;

/// (selector, hw_id) → samples by hand: (seconds after t0, value).
fn expect(p: &Prometheus, selector: &str, t_end: f64, want: &[(f64, f64)], t0_s: f64) {
    let got = p.samples(selector, "30m", t_end);
    assert_eq!(got.len(), 1, "{selector}: one series expected, got {got:#?}\nmetrics: {:?}", p.metric_names());
    let rel: Vec<(f64, f64)> = got[0].1.iter().map(|(t, v)| (t - t0_s, *v)).collect();
    assert_eq!(rel, want, "{selector}");
}

#[test]
fn a_known_fleet_is_found_exactly_in_prometheus() {
    let prom = Prometheus::start();
    let influx = Influx::start();
    let extra = format!("{}\n[otlp]\nurl = \"{}\"\nflush_interval = \"100ms\"\n", pki().collector_tls(), prom.otlp_url());
    let collector = Collector::start_with(free_port(), &influx.url, "wf_otlp", &extra);
    let t0 = fleet_t0();
    stream(&collector.url, t0);
    let t0_s = t0 as f64 / 1e9;
    let t_end = t0_s + (BUCKETS as f64) * 10.0 + 5.0;
    // The optional sink is not waited for by the Acks: wait until the last window is there.
    let last = "hw_host_power_watts{instance=\"otlp-pkg\"}";
    let found = wait_for(std::time::Duration::from_secs(20), || (prom.samples(last, "30m", t_end).first().map(|s| s.1.len()) == Some(BUCKETS)).then_some(()));
    assert!(found.is_some(), "the last window never reached Prometheus; collector log:\n{}\nprometheus log:\n{}", collector.log(), prom.log());
    let at = |k: usize| k as f64 * 10.0 + 1.0;
    for (host, _rack, zones, _) in fleet() {
        for z in &zones {
            let sel = |name: &str| format!("{name}{{instance=\"{host}\",hw_id=\"{}:{}\",wattflip_scope=\"{}\"}}", z.source, z.zone, z.scope);
            let watts: Vec<(f64, f64)> = z.watts.iter().enumerate().map(|(k, w)| (at(k), *w)).collect();
            expect(&prom, &sel("hw_power_watts"), t_end, &watts, t0_s);
            if z.counter {
                // Cumulative joules: each window's energy is its watts × 10 s.
                let mut total = 0.0;
                let energy: Vec<(f64, f64)> = z
                    .watts
                    .iter()
                    .enumerate()
                    .map(|(k, w)| {
                        (at(k), {
                            total += w * 10.0;
                            total
                        })
                    })
                    .collect();
                expect(&prom, &sel("hw_energy_joules_total"), t_end, &energy, t0_s);
            } else {
                assert_eq!(prom.samples(&sel("hw_energy_joules_total"), "30m", t_end), vec![], "{host} {}: an instantaneous source has no energy", z.zone);
            }
        }
    }
    // Host totals by hand: the tier's zones only (psys + drive; the wall meter; package + DRAM).
    for (host, totals) in HOST_POWER {
        let want: Vec<(f64, f64)> = totals.iter().enumerate().map(|(k, w)| (at(k), *w)).collect();
        expect(&prom, &format!("hw_host_power_watts{{instance=\"{host}\"}}"), t_end, &want, t0_s);
    }
    // 10 s × (package + DRAM), cumulative: 460, +515, +475, +460, +662.5, +460.
    let pkg_energy = [460.0, 975.0, 1450.0, 1910.0, 2572.5, 3032.5];
    let want: Vec<(f64, f64)> = pkg_energy.iter().enumerate().map(|(k, j)| (at(k), *j)).collect();
    expect(&prom, "hw_host_energy_joules_total{instance=\"otlp-pkg\",wattflip_budget=\"rapl_nvme\"}", t_end, &want, t0_s);
    for host in ["otlp-rapl", "otlp-wall"] {
        let none = prom.samples(&format!("hw_host_energy_joules_total{{instance=\"{host}\"}}"), "30m", t_end);
        assert_eq!(none, vec![], "{host}: a tier with an instantaneous source has no host energy (not available, never a guess)");
    }
    check_drive_and_run(&prom, t0_s, t_end);
    // Labels: the agent's rack on every series, the OTel attributes translated.
    let s = prom.series("hw_power_watts{instance=\"otlp-wall\",hw_id=\"ipmi:dcmi\"}", t_end);
    let labels: BTreeMap<&str, &str> = s[0].0.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let want: BTreeMap<&str, &str> = [
        ("__name__", "hw_power_watts"),
        ("hw_id", "ipmi:dcmi"),
        ("hw_name", "dcmi"),
        ("hw_type", "enclosure"),
        ("instance", "otlp-wall"),
        ("job", "wattflip"),
        ("rack", "ra"),
        ("wattflip_budget", "wall"),
        ("wattflip_method", "measured"),
        ("wattflip_scope", "wall"),
        ("wattflip_source", "ipmi"),
    ]
    .into();
    assert_eq!(labels, want);
    // The required sink has the same power points (the OTLP sink adds, never replaces).
    let rows = influx.rows("wf_otlp", "SELECT count(\"watts\") FROM \"power\"");
    // 7 zones × 6 buckets, and the 5 full-rate points.
    assert_eq!(rows[0][1], serde_json::json!(7 * BUCKETS + 5), "power points in InfluxDB");
}

/// The drive of `otlp-pkg`: temperature, SMART, status, size, and the probe run's results.
fn check_drive_and_run(prom: &Prometheus, t0_s: f64, t_end: f64) {
    let at = |k: usize| k as f64 * 10.0 + 1.0;
    let temps: Vec<(f64, f64)> = TEMPS.iter().enumerate().map(|(k, c)| (at(k), *c)).collect();
    expect(prom, "hw_temperature_celsius{instance=\"otlp-pkg\",hw_id=\"nvme_cli:nvme0/Composite\",hw_type=\"temperature\"}", t_end, &temps, t0_s);
    let smart = |attr: &str| format!("hw_physical_disk_smart_ratio{{instance=\"otlp-pkg\",hw_id=\"nvme0\",hw_physical_disk_smart_attribute=\"{attr}\"}}");
    expect(prom, &smart("percentage_used"), t_end, &[(at(0), 3.0)], t0_s);
    expect(prom, &smart("power_on_hours"), t_end, &[(at(0), 1200.0)], t0_s);
    expect(prom, &smart("media_errors"), t_end, &[(at(0), 0.0)], t0_s);
    expect(prom, "hw_physical_disk_endurance_utilization_ratio{instance=\"otlp-pkg\",hw_physical_disk_state=\"remaining\"}", t_end, &[(at(0), 0.97)], t0_s);
    for (state, v) in [("ok", 1.0), ("degraded", 0.0), ("failed", 0.0)] {
        expect(prom, &format!("hw_status{{instance=\"otlp-pkg\",hw_id=\"nvme0\",hw_state=\"{state}\"}}"), t_end, &[(at(0), v)], t0_s);
    }
    let size = prom.series("hw_physical_disk_size_bytes{instance=\"otlp-pkg\"}", t_end);
    assert_eq!(size.len(), 1, "{size:?}");
    assert_eq!(size[0].1[0].1, 1_000_204_886_016.0);
    for (k, v) in
        [("hw_model", "WF TEST SSD"), ("hw_serial_number", "S123"), ("hw_firmware_version", "1.0"), ("hw_parent", "nvme0"), ("hw_physical_disk_type", "SSD")]
    {
        assert_eq!(size[0].0.get(k).map(String::as_str), Some(v), "{k} on {size:?}");
    }
    let run = "{instance=\"otlp-pkg\",hw_id=\"nvme0n1\",wattflip_experiment=\"granularity/SW\",wattflip_background_class=\"S\",wattflip_value=\"131072\"}";
    expect(prom, &format!("wattflip_probe_run_energy_joules{run}"), t_end, &[(at(2), 12.5)], t0_s);
    expect(prom, &format!("wattflip_probe_run_background_energy_joules{run}"), t_end, &[(at(2), 0.75)], t0_s);
    // UCUM `J/MiBy`: Prometheus translates `J` and keeps `MiBy` as written.
    expect(prom, &format!("wattflip_probe_run_energy_per_mib_joules_per_MiBy{run}"), t_end, &[(at(2), 0.046875)], t0_s);
    // And each figure's 95 % half-width.
    expect(prom, &format!("wattflip_probe_run_energy_u95_joules{run}"), t_end, &[(at(2), 0.5)], t0_s);
    expect(prom, &format!("wattflip_probe_run_background_energy_u95_joules{run}"), t_end, &[(at(2), 0.125)], t0_s);
    expect(prom, &format!("wattflip_probe_run_energy_per_mib_u95_joules_per_MiBy{run}"), t_end, &[(at(2), 0.001953125)], t0_s);
}
