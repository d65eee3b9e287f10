//! The layout gate of `agent/drives/src` (the checks: `tests/layout/gate.rs`, shared by every
//! crate of the workspace): no import cycle among files or modules, imports down the layers, no
//! source file over 600 lines, no function over 80.
//!
//! The layers, from the top: what changes a drive and puts it back (restore, and the test
//! doubles); what reads or sets a drive through the tools (governor, inventory, cross-check,
//! thermal view, sweep plans, smartctl's checked read); the tool wrappers (nvme-cli, smartctl and
//! its NVMe capabilities, sysfs); the command runner they share; the leaves (JSON helpers, the NVMe
//! status, units, smartctl's power-mode words). A new top-level module goes in at its layer.

#[macro_use]
#[path = "../../../tests/layout/gate.rs"]
mod gate;

use gate::{Allow, Policy};

/// Breaks in files another helper is changing now; each entry goes when that change is merged
/// (the gate fails on an entry that no longer names a break). None now.
const OWNED_BY_OTHERS: &[Allow] = &[];

const POLICY: Policy = Policy {
    dir: env!("CARGO_MANIFEST_DIR"),
    lib: "wattflip_drives",
    layers: &[
        ("restore", 1),
        ("fake", 1),
        ("governor", 2),
        ("inventory", 2),
        ("crosscheck", 2),
        ("thermal", 2),
        ("sweep", 2),
        ("powermode", 2),
        ("smartctl", 3),
        ("smartctl_nvme", 3),
        ("nvme_cli", 3),
        ("sysfs", 3),
        ("command", 4),
        ("jsonutil", 5),
        ("nvme_status", 5),
        ("units", 5),
        ("smartctl_mode", 5),
        ("smartctl_exit", 5),
    ],
    max_upward: 0,
    min_imports: 30,
    tables: &[],
    allow: OWNED_BY_OTHERS,
};

layout_tests!(POLICY);
