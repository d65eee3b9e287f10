//! The layout gate of `proto/src` (the checks: `tests/layout/gate.rs`, shared by every crate of
//! the workspace): no import cycle among files or modules, imports down the layers, no source
//! file over 600 lines, no function over 80.
//!
//! The layers, from the top: the encoder (a batch to line protocol), the schema (what points a
//! batch makes), the domain types checked from the wire, line protocol itself and the gRPC codec
//! (which the generated code names). A new top-level
//! module goes in at its layer.

#[macro_use]
#[path = "../../tests/layout/gate.rs"]
mod gate;

use gate::Policy;

const POLICY: Policy = Policy {
    dir: env!("CARGO_MANIFEST_DIR"),
    lib: "wattflip_proto",
    layers: &[("encoder", 1), ("schema", 2), ("domain", 3), ("lineproto", 4), ("codec", 4)],
    max_upward: 0,
    min_imports: 5,
    tables: &[],
    allow: &[],
};

layout_tests!(POLICY);
