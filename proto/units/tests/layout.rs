//! The layout gate of `proto/units/src` (the checks: `tests/layout/gate.rs`, shared by every
//! crate of the workspace): one file today, so no layers; no source file over 600 lines, no
//! function over 80, and no import cycle once it has more files.

#[macro_use]
#[path = "../../../tests/layout/gate.rs"]
mod gate;

use gate::Policy;

const POLICY: Policy = Policy { dir: env!("CARGO_MANIFEST_DIR"), lib: "wattflip_units", layers: &[], max_upward: 0, min_imports: 0, tables: &[], allow: &[] };

layout_tests!(POLICY);
