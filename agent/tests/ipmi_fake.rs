//! The DCMI source against a fake `ipmitool` (tests/fixtures/ipmi/fake-ipmitool) run as a real
//! child process: it fails with real captured errors, hangs past the timeout, then answers with
//! real captured outputs. The source must come back, never stall its reader, and say what happened
//! once per change.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wattflip_agent::sensors::{ipmi, Discovered};
use wattflip_proto::units::Watts;

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/ipmi")
}

#[test]
fn fake_ipmitool_fails_transiently_hangs_then_answers() {
    let dir = tempfile::tempdir().unwrap();
    for f in [
        "fake-ipmitool",
        "lan-session-failure.stderr",
        "dell-r750-unspecified-error.stderr",
        "openbmc-witherspoon-deactivated-319w.txt",
        "rabe-zabbix-activated-197w.txt",
    ] {
        std::fs::copy(fixtures().join(f), dir.path().join(f)).unwrap();
    }
    std::fs::write(
        dir.path().join("plan"),
        "fail lan-session-failure.stderr\nfail dell-r750-unspecified-error.stderr\nhang 30\nok openbmc-witherspoon-deactivated-319w.txt\nok rabe-zabbix-activated-197w.txt\n",
    )
    .unwrap();
    let program = dir.path().join("fake-ipmitool").display().to_string();
    let runner: Arc<dyn wattflip_drives::CommandRunner> = Arc::new(wattflip_drives::SystemRunner::new());
    let mut d = Discovered::default();
    // A 1 s command timeout, and a 1 s read period once it answers.
    ipmi::discover_with_period(runner, &program, Duration::from_secs(1), Duration::from_millis(200), &mut d);
    assert!(d.unavailable.is_empty(), "{:?}", d.unavailable);
    assert_eq!(d.power.len(), 1);
    let s = &mut d.power[0];
    let mut got = Vec::new();
    let mut slowest = Duration::ZERO;
    let end = Instant::now() + Duration::from_secs(25);
    while got.len() < 2 && Instant::now() < end {
        let t = Instant::now();
        let r = s.read(0).unwrap();
        slowest = slowest.max(t.elapsed());
        if let Some(r) = r {
            got.push(r.watts);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Backoff 0.5–1 s, 1–2 s, the 1 s timeout, 2–4 s: the BMC's answers arrive, in order.
    assert_eq!(got, vec![Watts(319.0), Watts(197.0)]);
    // The hung child never held up a read: reads only take the worker's newest answer.
    assert!(slowest < Duration::from_millis(100), "a read took {slowest:?}");
    let notices: Vec<(&str, String)> = s.take_notices().into_iter().map(|n| (n.kind, n.message)).collect();
    assert_eq!(
        notices,
        vec![
            ("sensor_unavailable", "the BMC did not answer: Get Session Challenge command failed (exit status 1)".to_string()),
            ("sensor_unavailable", "the BMC did not answer: DCMI request failed because: Unspecified error (ff) (exit status 1)".into()),
            ("sensor_unavailable", format!("the BMC did not answer: `{program} dcmi power reading` gave no answer within 1s and was killed")),
            ("sensor_available", "DCMI power readings are answered again".into()),
            (
                "sensor_flagged",
                "power reading state is deactivated but the BMC reports 319 W: kept as a plausible reading (flagged); \
                 `ipmitool dcmi power activate` may set the state"
                    .into()
            ),
            ("sensor_available", "power reading state is activated".into()),
        ]
    );
    let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
    assert!(calls.starts_with("1 dcmi power reading\n2 dcmi power reading\n3 dcmi power reading\n4 dcmi power reading\n5 dcmi power reading\n"), "{calls}");
}
