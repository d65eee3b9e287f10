//! The collector's gRPC boundary over a real socket: health service, field-naming rejections, and
//! the config checks of both binaries.

use std::process::Command;
use std::time::Duration;
use tokio_stream::StreamExt as _;
use wattflip_e2e::*;
use wattflip_proto::v1::{self, agent_message::Kind, ingest_client::IngestClient, AgentMessage};

fn now_ns() -> i64 {
    wattflip_proto::units::UnixNanos::now().0
}

fn hello(id: &str) -> AgentMessage {
    AgentMessage { kind: Some(Kind::Hello(v1::Hello { agent_id: id.into(), time_ns: now_ns(), ..Default::default() })) }
}

fn batch(id: &str, seq: u64, watts: f64) -> AgentMessage {
    AgentMessage {
        kind: Some(Kind::Batch(v1::Batch {
            agent_id: id.into(),
            sequence: seq,
            power: vec![v1::PowerSample {
                time_ns: now_ns(),
                source: "hwmon".into(),
                zone: "psu/pin".into(),
                scope: "psu_in".into(),
                method: v1::Method::Measured as i32,
                watts: Some(watts),
                joules: None,
                interval_ns: 0,
                ..Default::default()
            }],
            ..Default::default()
        })),
    }
}

#[test]
fn health_acks_and_rejections_naming_the_field() {
    let influx = Influx::start();
    let collector = Collector::start(&influx.url, "wf_grpc");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let id = pki().issue("grpc-1", &["grpc-1"], None);
        let channel = pki().channel(&collector.url, Some(id)).await.unwrap();
        let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
        let h = health.check(tonic_health::pb::HealthCheckRequest { service: "wattflip.v1.Ingest".into() }).await.unwrap().into_inner();
        assert_eq!(h.status, tonic_health::pb::health_check_response::ServingStatus::Serving as i32);

        let mut client = IngestClient::new(channel);
        let msgs = vec![hello("grpc-1"), batch("grpc-1", 1, 230.5), batch("grpc-1", 2, 231.0), batch("grpc-1", 3, f64::NAN)];
        let mut acks = client.stream(tokio_stream::iter(msgs)).await.unwrap().into_inner();
        let a1 = acks.next().await.unwrap().unwrap();
        let a2 = acks.next().await.unwrap().unwrap();
        assert_eq!((a1.durable_sequence, a2.durable_sequence), (1, 2));
        assert_eq!((a1.points_stored, a2.points_stored), (1, 1));
        // A bad point is left out alone and counted: its batch is acknowledged, not refused.
        let a3 = tokio::time::timeout(Duration::from_secs(10), acks.next()).await.unwrap().unwrap().unwrap();
        assert_eq!((a3.durable_sequence, a3.points_stored), (3, 0));
        assert_eq!(a3.points_rejected, [("not_finite".to_string(), 1)].into_iter().collect());
    });
    let events = influx.rows("wf_grpc", "SELECT message FROM event WHERE host = 'grpc-1' AND kind = 'point_rejected'");
    assert_eq!(
        events[0][1].as_str().unwrap(),
        "batch 3: power[0].watts = NaN: NaN is not a finite number; the point was left out, the rest of the batch stored"
    );
    // Acknowledged means stored.
    let rows = influx.rows("wf_grpc", "SELECT watts FROM power WHERE host = 'grpc-1'");
    let watts: Vec<f64> = rows.iter().map(|r| r[1].as_f64().unwrap()).collect();
    assert_eq!(watts, vec![230.5, 231.0]);
}

#[test]
fn check_config_reports_every_problem_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    std::fs::write(&cfg, "agent_id = \"a b\"\n[collector]\nurl = \"ftp://x\"\nurll = 1\n[sampling]\ninterval = \"often\"\n").unwrap();
    let out = Command::new(bin("wattflip-agent", "wattflip-agent")).args(["check-config", "--config"]).arg(&cfg).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("agent.toml: 7 problem(s):"), "{err}");
    for key in [
        "tls.ca_file: is required: mutual TLS is on by default",
        "tls.key_file: is required",
        "collector.urll: unknown key",
        "agent_id: `a b` may contain only",
        "collector.url: `ftp://x` must start",
        "sampling.interval: `often` is not a duration",
    ] {
        assert!(err.contains(key), "missing {key:?} in:\n{err}");
    }
    let ccfg = dir.path().join("collector.toml");
    std::fs::write(&ccfg, "[influx]\nurl = \"http://127.0.0.1:1\"\nbatch_lines = 0\napi = \"v3\"\n[limit]\n[tls]\ninsecure_plaintext_loopback_only = true\n")
        .unwrap();
    let out = Command::new(bin("wattflip-collector", "wattflip-collector")).args(["--config"]).arg(&ccfg).arg("check-config").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for key in ["influx.api: `v3` is not", "influx.batch_lines: 0 is outside", "limit: unknown key"] {
        assert!(err.contains(key), "missing {key:?} in:\n{err}");
    }
}

#[test]
fn rapl_permission_denied_names_the_file_and_the_fix() {
    // Root reads any file, so as root the check runs the agent as `nobody` through setpriv.
    let is_root = std::fs::read_to_string("/proc/self/status").unwrap().lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    let (tmp, sys) = sysfs_tree(&["permission-denied"]);
    let energy = sys.join("class/powercap/intel-rapl:0/energy_uj");
    let chmod = |flag: &str, paths: &[&std::path::Path], mode: &str| {
        let mut c = Command::new("chmod");
        if !flag.is_empty() {
            c.arg(flag);
        }
        assert!(c.arg(mode).args(paths).status().unwrap().success());
    };
    let agent = bin("wattflip-agent", "wattflip-agent");
    // nobody must be able to walk the tree; only the counter itself is closed.
    chmod("-R", &[tmp.path()], "a+rX");
    chmod("", &[&energy], "0000");
    let mut cmd = if is_root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(&agent);
        c
    } else {
        Command::new(&agent)
    };
    let out = cmd.args(["inventory", "--json", "--sysfs-root"]).arg(&sys).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let src = &v["power_sources"][0];
    assert_eq!(src["zone"], "package-0");
    assert_eq!(src["usable"], false);
    let note = src["note"].as_str().unwrap();
    assert!(note.starts_with(&format!("permission denied reading {}", energy.display())), "{note}");
    assert!(note.contains("CAP_DAC_READ_SEARCH"), "{note}");
}
