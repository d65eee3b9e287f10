//! Agent events (`v1::Event`): the one constructor every component uses for what it reports
//! besides samples (sensor errors, power-state changes, spool recovery, probe failures). A new
//! event kind needs no code here: pick a `kind` name, document it in docs/schema.md, and add
//! attributes to the returned event.

use wattflip_proto::v1;

/// An event at `time_ns` (UTC ns) without attributes.
pub fn event(time_ns: i64, kind: &str, severity: v1::Severity, device: &str, message: String) -> v1::Event {
    v1::Event { time_ns, kind: kind.into(), severity: severity as i32, device: device.into(), message, attributes: Default::default() }
}
