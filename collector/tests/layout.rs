//! The layout gate of `collector/src` (the checks: `tests/layout/gate.rs`, shared by every crate
//! of the workspace): no import cycle among files or modules, imports down the layers, no source
//! file over 600 lines, no function over 80.
//!
//! The layers, from the top: the binary; the service (gRPC ingest, TLS, guards, metrics server),
//! which the binary starts with the configuration; the configuration, which composes the parts'
//! own configuration types; the parts the service drives (analyses, the plan's queries, the
//! sinks); the telemetry they all count into. A new top-level module goes in at its layer.

#[macro_use]
#[path = "../../tests/layout/gate.rs"]
mod gate;

use gate::{Allow, Policy, Rule};

/// Breaks that wait for their owner; each entry goes when its owner's fix is merged (the gate
/// fails on an entry that no longer names a break).
const OWNED_BY_THE_LEAD: &[Allow] = &[
    // Issue 25 items 1-2 (incremental throttling, no global lock): the lead rewrites these files.
    Allow { file: "analysis/throttle.rs", rule: Rule::Lines, owner: "the lead, issue 25 items 1-2" },
    Allow { file: "service/ingest.rs", rule: Rule::Functions, owner: "the lead, issue 25 items 1-2" },
    // The service cycles ingest <-> tls and server <-> telemetry (issue 25 item 6).
    Allow { file: "service/tls.rs", rule: Rule::Import("service/ingest.rs"), owner: "the lead, issue 25 item 6" },
    Allow { file: "telemetry.rs", rule: Rule::Import("service/server.rs"), owner: "the lead, issue 25 item 6" },
];

const POLICY: Policy = Policy {
    dir: env!("CARGO_MANIFEST_DIR"),
    lib: "wattflip_collector",
    layers: &[("service", 1), ("config", 2), ("analysis", 3), ("plan", 3), ("sinks", 3), ("telemetry", 4)],
    max_upward: 0,
    min_imports: 20,
    tables: &[],
    allow: OWNED_BY_THE_LEAD,
};

layout_tests!(POLICY);
