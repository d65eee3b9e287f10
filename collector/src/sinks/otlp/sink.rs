//! OTLP as a [`Sink`]: its registration (the `[otlp]` table), the sink started from its
//! configuration, and its counters on the metrics page. Each stream translates its agent's Hello
//! and batches and queues them on the writer; a required sink's Ack waits for the receiver and
//! reports a batch the receiver refused as stored nowhere (`points_stored` 0; its points are
//! counted on the sink's own metrics), an optional one is never waited for.

use crate::sinks::otlp::config::{OtlpConfig, RawOtlp};
use crate::sinks::otlp::writer::{spawn, OtlpHandle, OtlpStats};
use crate::sinks::rows::{self, Reading::*, Row};
use crate::sinks::{async_trait, Account, Acks, Delivery, Queued, Registration, Sink, SinkConfig, SinkMetrics, SinkStopped, SinkStream, Started, Unencodable};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::watch;
use wattflip_infra::telemetry::Text;
use wattflip_infra::tomlcfg::Loader;
use wattflip_proto::domain::Hello;
use wattflip_proto::schema::HostTags;

/// The `[otlp]` table: no table, no OTLP sink.
pub const REGISTRATION: Registration = Registration { section: "otlp", configure };

fn configure(loader: &mut Loader) -> Option<Arc<dyn SinkConfig>> {
    let raw: Option<RawOtlp> = loader.take("otlp");
    OtlpConfig::from_raw(raw, loader).map(|c| Arc::new(c) as Arc<dyn SinkConfig>)
}

impl SinkConfig for OtlpConfig {
    fn describe(&self) -> String {
        format!("OTLP sink: {} ({})", self.url, if self.required { "required: Acks wait for it" } else { "optional: bounded retry queue" })
    }

    fn start(&self, stop: watch::Receiver<bool>) -> Started {
        tracing::info!(url = %self.url, required = self.required, "OTLP sink on");
        let stats = Arc::new(OtlpStats::default());
        let (handle, task) = spawn(self.clone(), stats.clone(), stop);
        Started { sink: Arc::new(OtlpSink { handle, stats }), task }
    }
}

/// The OTLP sink: the writer's handle and its counters.
pub struct OtlpSink {
    handle: OtlpHandle,
    stats: Arc<OtlpStats>,
}

impl Sink for OtlpSink {
    fn name(&self) -> &'static str {
        "otlp"
    }

    fn acks(&self) -> Acks {
        if self.handle.required() {
            Acks::Wait
        } else {
            Acks::BestEffort
        }
    }

    fn ready(&self) -> bool {
        self.stats.readiness.ready()
    }

    fn open(&self, _agent: &Arc<str>, tags: &HostTags) -> Box<dyn SinkStream> {
        Box::new(OtlpStream { handle: self.handle.clone(), tags: tags.clone() })
    }

    fn metrics(&self) -> Arc<dyn SinkMetrics> {
        self.stats.clone()
    }
}

struct OtlpStream {
    handle: OtlpHandle,
    tags: HostTags,
}

#[async_trait]
impl SinkStream for OtlpStream {
    async fn hello(&self, hello: &Hello) -> Result<Unencodable, SinkStopped> {
        self.handle.hello(&self.tags, hello).await;
        Ok(Unencodable::default())
    }

    async fn write(&self, d: &Delivery<'_>) -> Result<Queued, SinkStopped> {
        let done = self.handle.batch(&self.tags, d.batch, d.budget, d.episodes).await;
        // A required sink completes a job once the receiver stored or refused it. A refused job's
        // points are not in the receiver (it was sent alone: nothing of it was stored), so the
        // Ack counts none of the batch as stored; a stored one leaves the count to the others.
        let receipt = done.map(|rx| {
            Box::pin(async move {
                let outcome = rx.await.map_err(|_| SinkStopped)?;
                Ok(Account { stored: (outcome.refused > 0).then_some(0), ..Account::default() })
            }) as crate::sinks::Receipt
        });
        Ok(Queued { receipt, unencodable: Unencodable::default() })
    }
}

impl SinkMetrics for OtlpStats {
    /// The `wattflip_collector_otlp_*` metrics.
    fn render(&self, t: &mut Text) {
        #[rustfmt::skip]
        const ROWS: &[Row<OtlpStats>] = &[
            ("wattflip_collector_otlp_points_sent_total", "OTLP data points the receiver accepted.", |o| Counter(o.points_sent.load(Relaxed))),
            ("wattflip_collector_otlp_points_dead_lettered_total", "OTLP data points not stored, by reason: queue_full, shutdown, refused (points of agent batches the receiver refused: a request refused for its samples is split until the refusal is one batch's).", |o| ByLabel("reason", &o.points_dead_lettered)),
            ("wattflip_collector_otlp_points_queued", "OTLP data points waiting to be sent.", |o| Gauge(o.points_queued.load(Relaxed))),
            ("wattflip_collector_otlp_requests_total", "OTLP export requests.", |o| Counter(o.requests.load(Relaxed))),
            ("wattflip_collector_otlp_retries_total", "OTLP export requests retried after an error.", |o| Counter(o.retries.load(Relaxed))),
            ("wattflip_collector_otlp_requests_split_total", "OTLP export requests refused for their samples (400, 409) and split in two to find the batch refused.", |o| Counter(o.requests_split.load(Relaxed))),
            ("wattflip_collector_otlp_stale_samples_total", "Energy samples not newer than their series' newest (resent): not added to a counter twice.", |o| Counter(o.stale_samples.load(Relaxed))),
            ("wattflip_collector_otlp_write_seconds", "OTLP export request latency.", |o| Histogram(&o.write_latency)),
            ("wattflip_collector_otlp_ready", "1 unless OTLP exports have failed without an answer for 10 s; while a required sink is 0 the Ingest service is NOT_SERVING on the gRPC health service.", |o| Gauge(u64::from(o.readiness.ready()))),
        ];
        rows::render(t, self, ROWS);
    }
}
