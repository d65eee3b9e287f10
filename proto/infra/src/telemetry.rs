//! Self-telemetry shared by agent and collector: lock-free counters and histograms, per-label
//! summaries, the Prometheus text exposition format (version 0.0.4) and a tiny HTTP server for
//! `GET /metrics`. A binary keeps its own struct of metrics and renders it with [`Text`]; to add a
//! metric, add a field there and one `Text` call in its `render`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A fixed-bucket histogram of seconds. Buckets are upper bounds; `+Inf` is implied.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_ns: AtomicU64,
    count: AtomicU64,
}

/// 0.5 ms … 30 s: spans a local InfluxDB write and a retried one.
pub const LATENCY_BUCKETS: &[f64] = &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram { bounds, counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(), sum_ns: AtomicU64::new(0), count: AtomicU64::new(0) }
    }

    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        // Non-cumulative here; rendering accumulates.
        if let Some(i) = self.bounds.iter().position(|b| s <= *b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.sum_ns.fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new(LATENCY_BUCKETS)
    }
}

/// Count and total duration per label value (a Prometheus summary without quantiles), plus an
/// error count: enough for per-sensor read durations and errors without unbounded buckets.
#[derive(Debug, Default)]
pub struct LabelledTimings {
    inner: Mutex<BTreeMap<String, Timing>>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Timing {
    pub count: u64,
    pub seconds: f64,
    pub errors: u64,
}

impl LabelledTimings {
    pub fn record(&self, label: &str, d: Duration, ok: bool) {
        let mut m = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let t = m.entry(label.to_string()).or_default();
        t.count += 1;
        t.seconds += d.as_secs_f64();
        if !ok {
            t.errors += 1;
        }
    }

    pub fn snapshot(&self) -> BTreeMap<String, Timing> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Counters keyed by one label value (e.g. rejected agents by reason).
#[derive(Debug, Default)]
pub struct LabelledCounter {
    inner: Mutex<BTreeMap<String, u64>>,
}

impl LabelledCounter {
    pub fn inc(&self, label: &str) {
        self.add(label, 1);
    }

    pub fn add(&self, label: &str, n: u64) {
        *self.inner.lock().unwrap_or_else(|p| p.into_inner()).entry(label.to_string()).or_default() += n;
    }

    pub fn get(&self, label: &str) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).get(label).copied().unwrap_or(0)
    }

    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Builder of one exposition.
#[derive(Default)]
pub struct Text {
    out: String,
}

/// Escapes a label value (backslash, quote, newline), as the format requires.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

impl Text {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    pub fn counter(&mut self, name: &str, help: &str, v: u64) -> &mut Self {
        self.head(name, "counter", help);
        let _ = writeln!(self.out, "{name} {v}");
        self
    }

    pub fn gauge(&mut self, name: &str, help: &str, v: f64) -> &mut Self {
        self.head(name, "gauge", help);
        let _ = writeln!(self.out, "{name} {v}");
        self
    }

    pub fn labelled_counter(&mut self, name: &str, help: &str, label: &str, c: &LabelledCounter) -> &mut Self {
        self.head(name, "counter", help);
        for (k, v) in c.snapshot() {
            let _ = writeln!(self.out, "{name}{{{label}=\"{}\"}} {v}", escape(&k));
        }
        self
    }

    pub fn histogram(&mut self, name: &str, help: &str, h: &Histogram) -> &mut Self {
        self.head(name, "histogram", help);
        let mut acc = 0;
        for (b, c) in h.bounds.iter().zip(&h.counts) {
            acc += c.load(Ordering::Relaxed);
            let _ = writeln!(self.out, "{name}_bucket{{le=\"{b}\"}} {acc}");
        }
        let count = h.count.load(Ordering::Relaxed);
        let _ = writeln!(self.out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(self.out, "{name}_sum {}", h.sum_ns.load(Ordering::Relaxed) as f64 / 1e9);
        let _ = writeln!(self.out, "{name}_count {count}");
        self
    }

    /// `<name>_seconds` summary and `<name>_errors_total` counter per label value.
    pub fn timings(&mut self, name: &str, help: &str, label: &str, t: &LabelledTimings) -> &mut Self {
        let snap = t.snapshot();
        let secs = format!("{name}_seconds");
        self.head(&secs, "summary", &format!("{help}: duration"));
        for (k, v) in &snap {
            let _ = writeln!(self.out, "{secs}_sum{{{label}=\"{}\"}} {}", escape(k), v.seconds);
            let _ = writeln!(self.out, "{secs}_count{{{label}=\"{}\"}} {}", escape(k), v.count);
        }
        let errs = format!("{name}_errors_total");
        self.head(&errs, "counter", &format!("{help}: failures"));
        for (k, v) in &snap {
            let _ = writeln!(self.out, "{errs}{{{label}=\"{}\"}} {}", escape(k), v.errors);
        }
        self
    }

    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.out)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot listen for metrics on {addr}: {source} (is metrics.listen used by another process?)")]
pub struct MetricsBindError {
    pub addr: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// Binds `addr` now (so a taken port is an error at start) and serves `GET /metrics` with the
/// output of `render` until `shutdown` completes. Returns the bound address (port 0 resolved).
pub async fn serve_metrics(
    addr: SocketAddr,
    render: Arc<dyn Fn() -> String + Send + Sync>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<SocketAddr, MetricsBindError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| MetricsBindError { addr, source })?;
    let bound = listener.local_addr().map_err(|source| MetricsBindError { addr, source })?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let r = render.clone();
            async move { ([("content-type", "text/plain; version=0.0.4")], r()) }
        }),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
            tracing::warn!("metrics server stopped: {e}");
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_format() {
        let h = Histogram::new(&[0.01, 0.1]);
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_millis(50));
        h.observe(Duration::from_secs(1));
        let t = LabelledTimings::default();
        t.record("hwmon:nvme0", Duration::from_millis(2), true);
        t.record("hwmon:nvme0", Duration::from_millis(3), false);
        let c = LabelledCounter::default();
        c.inc("no \"cert\"");
        let text = Text::default()
            .counter("x_total", "X.", 3)
            .histogram("lat_seconds", "Latency.", &h)
            .timings("read", "Reads", "sensor", &t)
            .labelled_counter("rej_total", "Rejected.", "reason", &c)
            .finish();
        assert_eq!(
            text,
            "# HELP x_total X.\n# TYPE x_total counter\nx_total 3\n\
             # HELP lat_seconds Latency.\n# TYPE lat_seconds histogram\n\
             lat_seconds_bucket{le=\"0.01\"} 1\nlat_seconds_bucket{le=\"0.1\"} 2\nlat_seconds_bucket{le=\"+Inf\"} 3\n\
             lat_seconds_sum 1.055\nlat_seconds_count 3\n\
             # HELP read_seconds Reads: duration\n# TYPE read_seconds summary\n\
             read_seconds_sum{sensor=\"hwmon:nvme0\"} 0.005\nread_seconds_count{sensor=\"hwmon:nvme0\"} 2\n\
             # HELP read_errors_total Reads: failures\n# TYPE read_errors_total counter\n\
             read_errors_total{sensor=\"hwmon:nvme0\"} 1\n\
             # HELP rej_total Rejected.\n# TYPE rej_total counter\nrej_total{reason=\"no \\\"cert\\\"\"} 1\n"
        );
    }

    #[tokio::test]
    async fn serves_metrics_over_http() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let addr = serve_metrics("127.0.0.1:0".parse().unwrap(), Arc::new(|| "up 1\n".to_string()), async {
            let _ = rx.await;
        })
        .await
        .unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).await.unwrap();
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
        assert!(body.ends_with("\r\n\r\nup 1\n"), "{body}");
        let _ = tx.send(());
    }
}
