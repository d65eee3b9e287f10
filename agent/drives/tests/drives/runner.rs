//! The real SystemRunner: LC_ALL=C, exit codes, deadline with process-group kill, missing
//! programs; and the fake `nvme` script driven through it.

use crate::util::FakeScript;
use std::time::{Duration, Instant};
use wattflip_drives::{CommandError, CommandRunner, Exit, Governor, SetOutcome, SystemRunner};

fn argv(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

#[test]
fn captures_stdout_stderr_exit_and_sets_lc_all() {
    let out = SystemRunner::new().run(&argv(&["sh", "-c", "printf '%s' \"$LC_ALL\"; printf err >&2; exit 3"]), Duration::from_secs(10)).expect("run");
    assert_eq!(out.stdout, "C");
    assert_eq!(out.stderr, "err");
    assert_eq!(out.exit, Exit::Code(3));
    let err = out.into_success().expect_err("exit 3");
    let text = err.to_string();
    assert!(text.contains("failed with exit status 3: err"), "{text}");
}

#[test]
fn permission_error_names_the_capability() {
    let out = SystemRunner::new().run(&argv(&["sh", "-c", "echo 'get-feature: Permission denied' >&2; exit 1"]), Duration::from_secs(10)).expect("run");
    let text = out.into_success().expect_err("exit 1").to_string();
    assert!(text.contains("needs CAP_SYS_ADMIN: run as root or grant the capability"), "{text}");
}

#[test]
fn timeout_kills_the_child_and_its_process_group() {
    let start = Instant::now();
    let err = SystemRunner::new().run(&argv(&["sh", "-c", "sleep 30"]), Duration::from_millis(300)).expect_err("timeout");
    assert!(matches!(err, CommandError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains("sh -c 'sleep 30'"));
    assert!(start.elapsed() < Duration::from_secs(5));

    // The shell exits at once but a background grandchild keeps the pipes open.
    let start = Instant::now();
    let err = SystemRunner::new().run(&argv(&["sh", "-c", "sleep 30 & exit 0"]), Duration::from_millis(300)).expect_err("grandchild holds the pipe");
    assert!(matches!(err, CommandError::Timeout { .. }), "{err:?}");
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn missing_program() {
    let err = SystemRunner::new().run(&argv(&["/nonexistent/nvme", "list"]), Duration::from_secs(1)).expect_err("missing");
    assert!(matches!(err, CommandError::NotFound { .. }));
    assert!(err.to_string().contains("install it"));
    assert!(matches!(SystemRunner::new().run(&[], Duration::from_secs(1)), Err(CommandError::EmptyArgv)));
}

#[test]
fn fake_nvme_script_through_the_real_runner() {
    let fake = FakeScript::new("nvme/constructed-5ps-nvme-cli-2.3-id-ctrl.json", "nvme/constructed-nvme-cli-2.13-list.json", 1, "honour");
    let nvme = fake.nvme();
    assert_eq!(nvme.version().expect("version").to_string(), "2.3");
    let id = nvme.id_ctrl("/dev/nvme0").expect("id-ctrl");
    assert_eq!(id.serial, "S0WATTFLIP5PS0001");
    let gov = Governor::power_state(nvme.clone(), "/dev/nvme0", id.power_states).expect("gov");
    assert!(matches!(gov.set(0).expect("set"), SetOutcome::Applied { previous: 1, current: 0 }));
    assert_eq!(fake.power_value_file(), "0\n");
    fake.set_mode("ignore");
    assert!(matches!(gov.set(2).expect("set"), SetOutcome::Ignored { requested: 2, previous: 0, observed: 0 }));
    fake.set_mode("refuse");
    let out = gov.set(2).expect("set");
    assert!(matches!(out, SetOutcome::Refused { .. }), "{out:?}");
    assert!(!gov.capabilities().expect("caps").changeable());
    assert_eq!(fake.power_value_file(), "0\n");
    let _ = fake.program();
}
