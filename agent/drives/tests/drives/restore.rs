//! Restore guard: explicit restore, Drop, error paths, the signal registry, recover().

use crate::util::fixture;
use std::path::Path;
use std::sync::Arc;
use wattflip_drives::fake::{FakeNvme, SetBehaviour};
use wattflip_drives::nvme_cli::FID_POWER_MANAGEMENT;
use wattflip_drives::restore::state_file_path;
use wattflip_drives::{recover, Governor, NvmeCli, RestoreError, RestoreGuard, RestoreRegistry, StateRecord};

const FIVE_PS: &str = "nvme/constructed-5ps-nvme-cli-2.11-id-ctrl.json";
const SERIAL: &str = "S0WATTFLIP5PS0001";

fn fake(value: u32, behaviour: SetBehaviour) -> (Arc<FakeNvme>, NvmeCli, Governor) {
    let fake = Arc::new(FakeNvme::new().with_controller("/dev/nvme0", &fixture(FIVE_PS), value, behaviour));
    let nvme = NvmeCli::new(fake.clone());
    let states = nvme.id_ctrl("/dev/nvme0").expect("id").power_states;
    let gov = Governor::power_state(nvme.clone(), "/dev/nvme0", states).expect("gov");
    (fake, nvme, gov)
}

fn value(fake: &FakeNvme) -> Option<u32> {
    fake.feature("/dev/nvme0", FID_POWER_MANAGEMENT)
}

/// State files (lock files stay: they are empty and deleting them would race).
fn json_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).expect("dir").filter_map(|e| e.ok()).filter(|e| e.path().extension().is_some_and(|x| x == "json")).count()
}

fn read_record(path: &Path) -> StateRecord {
    serde_json::from_str(&std::fs::read_to_string(path).expect("state file")).expect("json")
}

#[test]
fn state_file_then_explicit_restore() {
    let dir = tempfile::tempdir().expect("tmp");
    let (fake, _, gov) = fake((1 << 5) | 1, SetBehaviour::Honour);
    let guard = RestoreGuard::arm(gov, SERIAL, dir.path(), None).expect("arm");
    let path = state_file_path(dir.path(), "/dev/nvme0", 2);
    assert_eq!(guard.state_file(), path);
    assert_eq!(path.file_name().and_then(|n| n.to_str()), Some("wattflip-governor-nvme0-fid02.json"));
    let rec = read_record(&path);
    assert_eq!((rec.device.as_str(), rec.serial.as_str()), ("/dev/nvme0", SERIAL));
    assert_eq!((rec.feature_id, rec.original_value, rec.original_state), (2, 33, 1));
    assert_eq!(rec.pid, std::process::id());
    assert!(rec.created_unix_s > 1_600_000_000);

    assert!(guard.set(0).expect("set").is_applied());
    assert!(guard.set(2).expect("set").is_applied());
    assert_eq!(value(&fake), Some((1 << 5) | 2));
    let report = guard.restore().expect("restore");
    assert!(report.wrote);
    assert_eq!((report.device.as_str(), report.state), ("/dev/nvme0", 1));
    assert_eq!(value(&fake), Some(33), "PS and workload hint are back");
    assert!(!path.exists(), "state file removed after a verified restore");
}

#[test]
fn drop_restores_on_early_return_and_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let (fake, _, gov) = fake(1, SetBehaviour::Honour);
    fn sweep_that_fails(guard: &RestoreGuard) -> Result<(), RestoreError> {
        guard.set(0)?;
        guard.set(3)?; // non-operational: an error, the `?` returns early
        Ok(())
    }
    {
        let guard = RestoreGuard::arm(gov, SERIAL, dir.path(), None).expect("arm");
        let err = sweep_that_fails(&guard).expect_err("PS3 refused");
        assert!(err.to_string().contains("PS3 is non-operational"), "{err}");
        assert_eq!(value(&fake), Some(0));
    } // dropped here
    assert_eq!(value(&fake), Some(1));
    assert_eq!(json_files(dir.path()), 0);
}

#[test]
fn refuses_to_arm_twice_or_from_a_non_operational_state() {
    let dir = tempfile::tempdir().expect("tmp");
    let (_, _, gov) = fake(0, SetBehaviour::Honour);
    let first = RestoreGuard::arm(gov.clone(), SERIAL, dir.path(), None).expect("arm");
    // A live guard (here our own) holds the drive: a second arm names its owner.
    let err = RestoreGuard::arm(gov.clone(), SERIAL, dir.path(), None).expect_err("armed twice");
    assert!(matches!(&err, RestoreError::HeldByLiveOwner { pid: Some(p), .. } if *p == std::process::id()), "{err}");
    assert!(err.to_string().contains("kill -TERM"), "{err}");
    // A state file whose owner is gone must be recovered before arming again.
    let path = first.state_file();
    let leftover = std::fs::read(&path).expect("state file");
    first.restore().expect("restore");
    std::fs::write(&path, leftover).expect("write");
    let err = RestoreGuard::arm(gov, SERIAL, dir.path(), None).expect_err("leftover");
    assert!(matches!(err, RestoreError::AlreadyArmed { .. }), "{err}");
    assert!(err.to_string().contains("call recover()"));

    let dir2 = tempfile::tempdir().expect("tmp");
    let (_, _, gov) = fake(3, SetBehaviour::Honour);
    let err = RestoreGuard::arm(gov, SERIAL, dir2.path(), None).expect_err("PS3 original");
    assert!(matches!(err, RestoreError::OriginalNotRestorable { state: 3, .. }));
}

#[test]
fn registry_restores_on_signal_and_blocks_further_changes() {
    let dir = tempfile::tempdir().expect("tmp");
    let registry = RestoreRegistry::new();
    let (fake, _, gov) = fake(1, SetBehaviour::Honour);
    let guard = RestoreGuard::arm(gov, SERIAL, dir.path(), Some(&registry)).expect("arm");
    guard.set(2).expect("set");
    assert_eq!(registry.pending(), 1);

    // What the agent's SIGTERM/SIGINT task does, from another thread.
    let handle = registry.clone();
    let results = std::thread::spawn(move || handle.restore_all()).join().expect("thread");
    assert_eq!(results.len(), 1);
    assert!(results[0].as_ref().is_ok_and(|r| r.state == 1 && r.wrote));
    assert_eq!(value(&fake), Some(1));
    assert_eq!(registry.pending(), 0);

    let err = guard.set(0).expect_err("shutdown in progress");
    assert!(matches!(err, RestoreError::Finished { .. }));
    let sets = fake.set_calls();
    drop(guard);
    assert_eq!(fake.set_calls(), sets, "drop does not restore twice");
    assert_eq!(json_files(dir.path()), 0);
}

#[test]
fn failed_restore_keeps_the_file_and_recover_finishes_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let (fake, nvme, gov) = fake(1, SetBehaviour::Honour);
    let guard = RestoreGuard::arm(gov, SERIAL, dir.path(), None).expect("arm");
    guard.set(0).expect("set");
    let path = guard.state_file();

    fake.set_behaviour("/dev/nvme0", SetBehaviour::Ignore);
    let err = guard.restore().expect_err("drive ignores the restore");
    assert!(matches!(err, RestoreError::NotVerified { expected: 1, observed: 0, .. }), "{err:?}");
    assert!(err.to_string().contains("recover() will retry"));
    assert!(path.exists());

    fake.set_behaviour("/dev/nvme0", SetBehaviour::Refuse);
    let rec = recover(dir.path(), &nvme).expect("recover");
    assert!(matches!(rec[0].result, Err(RestoreError::Refused { .. })), "{:?}", rec[0].result);
    assert!(path.exists());

    fake.set_behaviour("/dev/nvme0", SetBehaviour::Honour);
    let rec = recover(dir.path(), &nvme).expect("recover");
    assert_eq!(rec.len(), 1);
    let report = rec[0].result.as_ref().expect("restored");
    assert!(report.wrote);
    assert_eq!(value(&fake), Some(1));
    assert!(!path.exists());
    assert!(recover(dir.path(), &nvme).expect("again").is_empty());
}

#[test]
fn recover_follows_the_serial_after_a_controller_rename() {
    let dir = tempfile::tempdir().expect("tmp");
    // After a reboot the 5-PS drive is nvme0 and QEMU's drive took nvme1.
    let fake = Arc::new(
        FakeNvme::new()
            .with_controller("/dev/nvme0", &fixture(FIVE_PS), 0, SetBehaviour::Honour)
            .with_controller("/dev/nvme1", &fixture("nvme/qemu-nvme-cli-2.3-id-ctrl.json"), 0, SetBehaviour::Refuse)
            .with_list(&fixture("nvme/constructed-nvme-cli-2.13-list.json")),
    );
    let nvme = NvmeCli::new(fake.clone());
    let record = StateRecord {
        format: 1,
        device: "/dev/nvme1".into(),
        serial: SERIAL.into(),
        feature_id: 2,
        original_value: 2,
        original_state: 2,
        created_unix_s: 1_700_000_000,
        pid: 1,
        pid_start_ticks: 0,
    };
    let path = state_file_path(dir.path(), "/dev/nvme1", 2);
    std::fs::write(&path, serde_json::to_string(&record).expect("json")).expect("write");
    let rec = recover(dir.path(), &nvme).expect("recover");
    let report = rec[0].result.as_ref().expect("restored");
    assert_eq!(report.device, "/dev/nvme0");
    assert_eq!(fake.feature("/dev/nvme0", 2), Some(2));
    assert_eq!(fake.feature("/dev/nvme1", 2), Some(0), "the other drive is untouched");
    assert!(!path.exists());

    // The serial is nowhere: keep the file.
    std::fs::write(&path, serde_json::to_string(&StateRecord { serial: "GONE".into(), ..record }).expect("json")).expect("write");
    let rec = recover(dir.path(), &nvme).expect("recover");
    assert!(matches!(rec[0].result, Err(RestoreError::SerialMismatch { .. })), "{:?}", rec[0].result);
    assert!(path.exists());
}

#[test]
fn recover_edge_cases() {
    let (fake, nvme, _) = fake(1, SetBehaviour::Honour);
    let missing = tempfile::tempdir().expect("tmp").path().join("never-created");
    assert!(recover(&missing, &nvme).expect("missing dir is fine").is_empty());

    let dir = tempfile::tempdir().expect("tmp");
    let corrupt = dir.path().join("wattflip-governor-nvme0-fid02.json");
    std::fs::write(&corrupt, "{ half").expect("write");
    std::fs::write(dir.path().join("wattflip-governor-nvme9-fid02.json.tmp"), "{").expect("write");
    std::fs::write(dir.path().join("unrelated.json"), "{}").expect("write");
    let rec = recover(dir.path(), &nvme).expect("recover");
    assert_eq!(rec.len(), 1);
    assert!(matches!(rec[0].result, Err(RestoreError::Corrupt { .. })));
    assert!(corrupt.exists(), "a corrupt file is left for a human");
    assert!(!dir.path().join("wattflip-governor-nvme9-fid02.json.tmp").exists());

    // Already in the original state (e.g. after a power cycle): verified without a write.
    std::fs::remove_file(&corrupt).expect("rm");
    let record = StateRecord {
        format: 1,
        device: "/dev/nvme0".into(),
        serial: String::new(),
        feature_id: 2,
        original_value: 1,
        original_state: 1,
        created_unix_s: 0,
        pid: 1,
        pid_start_ticks: 0,
    };
    std::fs::write(&corrupt, serde_json::to_string(&record).expect("json")).expect("write");
    let rec = recover(dir.path(), &nvme).expect("recover");
    assert!(rec[0].result.as_ref().is_ok_and(|r| !r.wrote));
    assert_eq!(fake.set_calls(), 0);
    assert!(!corrupt.exists());
}
