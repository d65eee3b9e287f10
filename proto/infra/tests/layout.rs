//! The layout gate of `proto/infra/src` (the checks: `tests/layout/gate.rs`, shared by every
//! crate of the workspace): no import cycle among files or modules, imports down the layers, no
//! source file over 600 lines, no function over 80.
//!
//! The layers, from the top: the command-line helpers and the config edge values (test support), TLS (which reads its files through the
//! TOML loader) and bounded durations (which record problems in it), then the pieces that import nothing of the crate. A new module goes in at its
//! layer.

#[macro_use]
#[path = "../../../tests/layout/gate.rs"]
mod gate;

use gate::Policy;

const POLICY: Policy = Policy {
    dir: env!("CARGO_MANIFEST_DIR"),
    lib: "wattflip_infra",
    layers: &[("cli", 1), ("edge", 1), ("tls", 2), ("duration", 2), ("tomlcfg", 3), ("backoff", 3), ("telemetry", 3), ("limits", 3), ("ratelimit", 3)],
    max_upward: 0,
    min_imports: 2,
    tables: &[],
    allow: &[],
};

layout_tests!(POLICY);
