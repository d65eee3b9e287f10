//! The database and retention-policy setup of the rollup and marker tasks, made visible when it
//! fails (issue 40: a refused `ALTER RETENTION POLICY` stopped rollups and markers behind a
//! repeating WARN only). While a task's setup fails: the counter
//! `wattflip_collector_rollup_setup_failures_total` grows, the gauge
//! `wattflip_collector_rollup_setup_pending` counts the tasks waiting, the gRPC health service
//! [`HEALTH_SERVICE`] is NOT_SERVING (a readiness probe sees it), an ERROR is logged and one
//! `event` of kind `rollup_setup_failed` (severity `critical`) is written per failure episode
//! when the database takes writes. A new task that needs the setup calls [`Setup::run`].

use crate::rollup::client::Client;
use crate::rollup::RollupStats;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use wattflip_infra::Backoff;

/// The gRPC health service name that reports whether rollups and markers are set up.
pub const HEALTH_SERVICE: &str = "wattflip.collector.Rollups";

/// Where a setup failure is reported.
#[derive(Clone)]
pub struct Setup {
    pub stats: Arc<RollupStats>,
    pub health: Option<tonic_health::server::HealthReporter>,
}

impl Setup {
    /// Runs `statements` until they succeed (retrying with backoff) or `shutdown`; false on
    /// shutdown. `task` names the waiting task in the log and the event.
    pub(crate) async fn run(&self, db: &Client, task: &str, statements: &[(String, bool)], shutdown: &mut watch::Receiver<bool>) -> bool {
        self.stats.setup_pending.fetch_add(1, Relaxed);
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
        let mut reported = false;
        loop {
            match db.setup(statements.to_vec()).await {
                Ok(()) => break,
                Err(e) => {
                    self.stats.setup_failures.fetch_add(1, Relaxed);
                    tracing::error!(attempt = backoff.attempt(), "{task} stopped: cannot set up the database and retention policies, will retry: {e}");
                    if !reported {
                        self.set_health(false).await;
                        reported = event(db, task, &e).await;
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff.next_delay_or(None)) => {}
                _ = shutdown.changed() => {
                    self.stats.setup_pending.fetch_sub(1, Relaxed);
                    return false;
                }
            }
        }
        if self.stats.setup_pending.fetch_sub(1, Relaxed) == 1 {
            self.set_health(true).await;
        }
        true
    }

    async fn set_health(&self, serving: bool) {
        if let Some(h) = &self.health {
            let status = if serving { tonic_health::ServingStatus::Serving } else { tonic_health::ServingStatus::NotServing };
            h.clone().set_service_status(HEALTH_SERVICE, status).await;
        }
    }
}

/// Writes the `rollup_setup_failed` event; whether it was stored.
async fn event(db: &Client, task: &str, error: &str) -> bool {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0);
    let msg = format!("{task} stopped: cannot set up the database and retention policies (retrying): {error}");
    let line = format!(
        "{},host=collector,kind=rollup_setup_failed,severity=critical message=\"{}\" {now}\n",
        wattflip_proto::schema::EVENT,
        msg.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', " ")
    );
    db.write(line, None).await.is_ok()
}
