//! Revoking an agent without restarting the collector (issue 38): `tls.crl_file` (a CRL of the
//! agents' CA) and `tls.deny_file` (agent ids) are reloaded while the collector runs. A revoked
//! certificate's open stream ends at its next batch, and its next handshake fails; a denied id's
//! stream ends too; each refusal names its reason and is counted; a bystander is untouched.

use std::time::Duration;
use tokio_stream::StreamExt as _;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, ingest_client::IngestClient, Ack, AgentMessage};

const DB: &str = "wf_revocation";

fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
}

/// An open stream of agent `id`: sends its Hello, then one batch per call of `send`.
struct Stream {
    id: String,
    tx: tokio::sync::mpsc::Sender<AgentMessage>,
    acks: tonic::Streaming<Ack>,
    seq: u64,
}

impl Stream {
    async fn open(url: &str, id: &str, cert: (std::path::PathBuf, std::path::PathBuf)) -> Result<Stream, tonic::Status> {
        let ch = pki().channel(url, Some(cert)).await.map_err(|e| tonic::Status::unavailable(format!("connect: {e:?}")))?;
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        tx.send(AgentMessage { kind: Some(Kind::Hello(v1::Hello { agent_id: id.into(), time_ns: now_ns(), ..Default::default() })) }).await.unwrap();
        let acks = IngestClient::new(ch).stream(tokio_stream::wrappers::ReceiverStream::new(rx)).await?.into_inner();
        Ok(Stream { id: id.into(), tx, acks, seq: 0 })
    }

    /// Sends the next batch; its Ack's sequence, or the status that ended the stream.
    async fn send(&mut self) -> Result<u64, tonic::Status> {
        self.seq += 1;
        let _ = self.tx.send(temperature_batch(&self.id, self.seq, 2, now_ns() - 1_000_000_000)).await;
        match tokio::time::timeout(Duration::from_secs(10), self.acks.next()).await.expect("an answer within 10 s") {
            Some(Ok(a)) => Ok(a.durable_sequence),
            Some(Err(s)) => Err(s),
            None => Err(tonic::Status::unknown("the stream ended without a status")),
        }
    }
}

#[test]
fn revoked_and_denied_agents_are_refused_without_a_restart() {
    let influx = Influx::start();
    let dir = tempfile::tempdir().unwrap();
    let (crl, deny) = (dir.path().join("agents.crl"), dir.path().join("denied-agents"));
    std::fs::write(&crl, pki().crl(1, &[])).unwrap();
    std::fs::write(&deny, "# nobody yet\n").unwrap();
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let extra =
        format!("{}crl_file = \"{}\"\ndeny_file = \"{}\"\n[metrics]\nlisten = \"{metrics_addr}\"\n", pki().collector_tls(), crl.display(), deny.display());
    let collector = Collector::start_with(free_port(), &influx.url, DB, &extra);
    let revokee = pki().issue_serial("agent-revokee", &["revokee"], 1001);
    let denied = pki().issue("agent-denied", &["denied"], None);
    let bystander = pki().issue("agent-bystander", &["bystander"], None);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = collector.url.clone();
    rt.block_on(async {
        let mut r = Stream::open(&url, "revokee", revokee.clone()).await.unwrap();
        let mut d = Stream::open(&url, "denied", denied.clone()).await.unwrap();
        let mut b = Stream::open(&url, "bystander", bystander.clone()).await.unwrap();
        assert_eq!((r.send().await.unwrap(), d.send().await.unwrap(), b.send().await.unwrap()), (1, 1, 1));
        // Revoke serial 1001 and deny `denied`; the collector looks every 2 s.
        std::fs::write(&crl, pki().crl(2, &[1001])).unwrap();
        std::fs::write(&deny, "denied  # a stolen key\n").unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let e = r.send().await.unwrap_err();
        assert_eq!((e.code(), e.message()), (tonic::Code::PermissionDenied, "the certificate of agent `revokee` is revoked (tls.crl_file)"));
        let e = d.send().await.unwrap_err();
        assert_eq!((e.code(), e.message()), (tonic::Code::PermissionDenied, "agent `denied` is on the collector's deny list (tls.deny_file)"));
        assert_eq!(b.send().await.unwrap(), 2, "the bystander goes on");
        // New connections: the revoked certificate fails its handshake, the denied id its stream.
        let again = match Stream::open(&url, "revokee", revokee).await {
            Ok(mut s) => s.send().await.map(|_| ()),
            Err(e) => Err(e),
        };
        assert!(again.is_err(), "a revoked certificate connected again");
        let e = match Stream::open(&url, "denied", denied).await {
            Ok(mut s) => s.send().await.unwrap_err(),
            Err(e) => e,
        };
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    });
    let m = reqwest::blocking::get(format!("http://{metrics_addr}/metrics")).unwrap().text().unwrap();
    let count = |r: &str| metric(&m, &format!("wattflip_collector_agents_rejected_total{{reason=\"{r}\"}}")).unwrap_or(0.0);
    // The open stream at its batch, then at least one refused handshake (the client may try
    // again); the deny list: the open stream and the new one.
    assert!(count("certificate_revoked") >= 2.0, "{m}");
    assert_eq!(count("denied"), 2.0, "{m}");
    let log = collector.log();
    // Loaded at start, and again once after the change (the log's fields carry colour codes).
    assert_eq!(log.matches("revocation lists loaded").count(), 2, "{log}");
}
