//! Sweep planner.

use crate::util::fixture;
use wattflip_drives::nvme_cli::parse_id_ctrl;
use wattflip_drives::{plan_sweep, StepPurpose, SweepError, SweepOrder, Watts};

fn five_states() -> Vec<wattflip_drives::PowerState> {
    parse_id_ctrl(&fixture("nvme/constructed-5ps-nvme-cli-2.3-id-ctrl.json")).expect("parse").power_states
}

#[test]
fn visits_operational_states_and_ends_with_the_original() {
    let ps = five_states();
    let plan = plan_sweep(&ps, 1, SweepOrder::IndexAscending).expect("plan");
    assert_eq!(plan.states(), vec![0, 1, 2, 1]);
    let purposes: Vec<_> = plan.steps.iter().map(|s| s.purpose).collect();
    assert_eq!(purposes, vec![StepPurpose::Measure, StepPurpose::Measure, StepPurpose::Measure, StepPurpose::Restore]);
    assert_eq!(plan.steps[2].max_power, Some(Watts(3.6)));
    assert_eq!(plan_sweep(&ps, 1, SweepOrder::IndexDescending).expect("plan").states(), vec![2, 1, 0, 1]);
    assert_eq!(plan_sweep(&ps, 2, SweepOrder::MaxPowerDescending).expect("plan").states(), vec![0, 1, 2, 2]);
}

#[test]
fn single_state_drive_and_errors() {
    let qemu = parse_id_ctrl(&fixture("nvme/qemu-nvme-cli-2.3-id-ctrl.json")).expect("parse").power_states;
    assert_eq!(plan_sweep(&qemu, 0, SweepOrder::default()).expect("plan").states(), vec![0, 0]);
    let ps = five_states();
    assert_eq!(plan_sweep(&ps, 3, SweepOrder::default()), Err(SweepError::OriginalNonOperational(3)));
    assert_eq!(plan_sweep(&ps, 9, SweepOrder::default()), Err(SweepError::OriginalUnknown(9)));
    let only_nonop: Vec<_> = ps.into_iter().filter(|p| !p.operational).collect();
    assert_eq!(plan_sweep(&only_nonop, 3, SweepOrder::default()), Err(SweepError::NoOperationalStates));
}
