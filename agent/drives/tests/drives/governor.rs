//! Governor against the in-process fake nvme-cli (honour, refuse 0x410e, silently ignore,
//! permission denied), the Intel C6h allow-list, and exact argv with recorded QEMU outputs.

use crate::util::fixture;
use std::sync::Arc;
use wattflip_drives::fake::{FakeNvme, ScriptedRunner, SetBehaviour};
use wattflip_drives::nvme_cli::{parse_id_ctrl, FID_INTEL_POWER_GOVERNOR, FID_POWER_MANAGEMENT};
use wattflip_drives::{CommandError, Governor, GovernorError, IntelGovernorMode, NvmeCli, NvmeError, NvmeStatus, SetOutcome};

const FIVE_PS: &str = "nvme/constructed-5ps-nvme-cli-2.11-id-ctrl.json";
const QEMU: &str = "nvme/qemu-nvme-cli-2.3-id-ctrl.json";

fn setup(id_fixture: &str, value: u32, behaviour: SetBehaviour) -> (Arc<FakeNvme>, Governor) {
    let json = fixture(id_fixture);
    let fake = Arc::new(FakeNvme::new().with_controller("/dev/nvme0", &json, value, behaviour));
    let nvme = NvmeCli::new(fake.clone());
    let id = nvme.id_ctrl("/dev/nvme0").expect("id-ctrl");
    let gov = Governor::power_state(nvme, "/dev/nvme0", id.power_states).expect("governor");
    (fake, gov)
}

#[test]
fn applied_keeps_the_workload_hint_and_uses_long_options() {
    // WH = 2 (bits 7:5), PS = 1.
    let (fake, gov) = setup(FIVE_PS, (2 << 5) | 1, SetBehaviour::Honour);
    assert_eq!(gov.current().expect("current"), 1);
    let out = gov.set(2).expect("valid");
    assert!(matches!(out, SetOutcome::Applied { previous: 1, current: 2 }), "{out:?}");
    assert_eq!(fake.feature("/dev/nvme0", FID_POWER_MANAGEMENT), Some((2 << 5) | 2));
    let set: Vec<_> = fake.calls().into_iter().filter(|c| c[1] == "set-feature").collect();
    assert_eq!(set, vec![["nvme", "set-feature", "/dev/nvme0", "--feature-id=2", "--value=66"].map(String::from).to_vec()]);
    assert!(gov.capabilities().expect("caps").changeable());
}

#[test]
fn never_selects_a_non_operational_state() {
    let (fake, gov) = setup(FIVE_PS, 0, SetBehaviour::Honour);
    let err = gov.set(3).expect_err("PS3 is non-operational");
    assert!(matches!(err, GovernorError::NonOperational { state: 3, .. }));
    let text = err.to_string();
    assert!(text.contains("PS3 is non-operational") && text.contains("PS0, PS1, PS2"), "{text}");
    assert!(matches!(gov.set(7), Err(GovernorError::NoSuchState { state: 7, max: 4, .. })));
    assert_eq!(fake.set_calls(), 0, "nothing was sent");
}

#[test]
fn refused_with_feature_not_changeable_like_qemu() {
    let (fake, gov) = setup(QEMU, 0, SetBehaviour::Refuse);
    let out = gov.set(0).expect("PS0 is valid");
    match &out {
        SetOutcome::Refused { requested: 0, status, message } => {
            assert_eq!(*status, NvmeStatus(0x410e));
            assert_eq!(message, "Feature Not Changeable: The Feature Identifier is not able to be changed");
        }
        other => panic!("{other:?}"),
    }
    assert!(out.to_string().contains("0x410e"));
    assert!(!gov.capabilities().expect("caps").changeable());
    assert_eq!(fake.feature("/dev/nvme0", FID_POWER_MANAGEMENT), Some(0));
}

#[test]
fn ignored_when_read_back_shows_the_old_state() {
    let (fake, gov) = setup(FIVE_PS, 1, SetBehaviour::Ignore);
    let out = gov.set(2).expect("valid");
    assert!(matches!(out, SetOutcome::Ignored { requested: 2, previous: 1, observed: 1 }), "{out:?}");
    assert_eq!(fake.set_calls(), 1);
}

#[test]
fn failed_without_cap_sys_admin_says_so() {
    let json = fixture(FIVE_PS);
    let fake = Arc::new(FakeNvme::new().with_controller("/dev/nvme0", &json, 0, SetBehaviour::PermissionDenied));
    let nvme = NvmeCli::new(fake);
    let states = parse_id_ctrl(&json).expect("parse").power_states;
    let gov = Governor::power_state(nvme, "/dev/nvme0", states).expect("governor");
    let out = gov.set(1).expect("valid");
    let SetOutcome::Failed { requested: 1, error } = &out else { panic!("{out:?}") };
    let text = error.to_string();
    assert!(text.contains("needs CAP_SYS_ADMIN: run as root or grant the capability"), "{text}");
    assert!(text.contains("nvme get-feature /dev/nvme0 --feature-id=2"), "{text}");
}

#[test]
fn exact_argv_with_recorded_qemu_outputs() {
    let runner = Arc::new(ScriptedRunner::new());
    let get = fixture("nvme/qemu-nvme-cli-2.3-get-feature-f2-H.stdout.txt");
    runner
        .expect(&["nvme", "get-feature", "/dev/nvme0", "--feature-id=2"], 0, &get, "")
        .expect(&["nvme", "set-feature", "/dev/nvme0", "--feature-id=2", "--value=0"], 1, "", &fixture("nvme/qemu-nvme-cli-2.3-set-feature-f2-v1.stderr.txt"))
        .expect_timeout(&["nvme", "get-feature", "/dev/nvme0", "--feature-id=2"]);
    let states = parse_id_ctrl(&fixture(QEMU)).expect("parse").power_states;
    let gov = Governor::power_state(NvmeCli::new(runner.clone()), "/dev/nvme0", states).expect("governor");
    let out = gov.set(0).expect("valid");
    assert!(matches!(out, SetOutcome::Refused { status: NvmeStatus(0x410e), .. }), "{out:?}");
    let out = gov.set(0).expect("valid");
    assert!(matches!(out, SetOutcome::Failed { error: NvmeError::Command(CommandError::Timeout { .. }), .. }), "{out:?}");
    assert_eq!(runner.remaining(), 0);
}

#[test]
fn intel_power_governor_only_on_allow_listed_models() {
    let p3700 = fixture("nvme/constructed-intel-p3700-nvme-cli-2.3-id-ctrl.json");
    let fake = Arc::new(FakeNvme::new().with_controller("/dev/nvme0", &p3700, 0, SetBehaviour::Honour).with_feature("/dev/nvme0", FID_INTEL_POWER_GOVERNOR, 0));
    let nvme = NvmeCli::new(fake.clone());
    let id = nvme.id_ctrl("/dev/nvme0").expect("id");
    assert!(Governor::intel_supported(&id));
    let gov = Governor::intel_power_governor(nvme.clone(), "/dev/nvme0", &id).expect("allow-listed");
    let out = gov.set(IntelGovernorMode::Watts10.value()).expect("valid");
    assert!(matches!(out, SetOutcome::Applied { previous: 0, current: 2 }), "{out:?}");
    assert_eq!(IntelGovernorMode::from_value(gov.current().expect("current")), Some(IntelGovernorMode::Watts10));
    assert!(fake.calls().iter().any(|c| c.iter().any(|a| a == "--feature-id=0xc6")));
    assert!(matches!(gov.set(3), Err(GovernorError::BadIntelMode { value: 3, .. })));

    let qemu = parse_id_ctrl(&fixture(QEMU)).expect("parse");
    let err = Governor::intel_power_governor(nvme, "/dev/nvme0", &qemu).expect_err("QEMU is not Intel");
    assert!(err.to_string().contains("use FID 02h power states instead"));
}
