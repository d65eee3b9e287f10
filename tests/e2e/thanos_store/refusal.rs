//! One host's refused sample costs no other point, through a real Thanos receive (issue 38): the
//! scenario of `otlp_refusal` (two hosts, one flush window holding host A's out-of-order window)
//! with the collector's required OTLP sink posting to receiver 0. The receivers take out-of-order
//! samples up to 1 h old (the harness's window), so A's refused window is 2 h old: Thanos answers
//! 409 Conflict for it (too old) after storing the rest of the request; the collector splits the
//! request as it does for Prometheus's 400, so only A's old window is refused and every other
//! window of both hosts is acknowledged as stored and answered by query.

use crate::otlp_refusal::one_flush_window;
use wattflip_e2e::thanos::Thanos;

#[test]
fn thanos_409_for_one_hosts_too_old_window_costs_no_other_window() {
    let thanos = Thanos::start();
    one_flush_window(&thanos.receivers[0].otlp_url(), "wf_thanos_refusal", -4 * 3600, &|host, t0| {
        thanos.wait_stores_cover(t0 / 1_000_000);
        // Three hours back: the refused window would be answered if it had been stored.
        let q = format!("hw_power_watts{{instance=\"{host}\"}}[3h]");
        let series = thanos.query(&q, t0 as f64 / 1e9 + 10.0, true);
        assert_eq!(series.len(), 1, "one series of {host}: {series:?}");
        series[0].samples.iter().map(|(t_ms, v)| ((t_ms * 1_000_000 - t0) as f64 / 1e9, *v)).collect()
    });
}
