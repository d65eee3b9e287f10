//! A Hello above `limits.max_message_bytes`, refused in words (issue 32 §3). tonic's decoder
//! refuses any message above the limit with `out_of_range` ("decoded message length too large:
//! found N bytes, the limit is: M bytes"); before a Hello, a stream used to end with a DEBUG line.
//! [`refuse_hello`] ends it with `resource_exhausted` naming the size and the limit, counts it in
//! `agents_rejected_total{reason="oversized_hello"}`, logs it at WARN, and puts the limit and what
//! was refused into the status metadata ([`LIMIT_BYTES`], [`REFUSED_MESSAGE`]) so the agent sends a
//! smaller Hello instead of the same one again.
//!
//! To refuse another message kind in words, add its sibling of [`refuse_hello`] here.

use tonic::{Code, Status};
use wattflip_infra::telemetry::LabelledCounter;

/// Status metadata: the collector's message size limit in bytes.
pub const LIMIT_BYTES: &str = "wattflip-limit-bytes";
/// Status metadata: which message was refused (`hello`).
pub const REFUSED_MESSAGE: &str = "wattflip-refused-message";

/// Whether a stream error is tonic's refusal of a message above the size limit.
pub fn is_oversized(e: &Status) -> bool {
    e.code() == Code::OutOfRange
}

/// (size, limit) in bytes from tonic's refusal text; `None` if its wording changed.
fn sizes(msg: &str) -> Option<(u64, u64)> {
    let number_after = |key: &str| -> Option<u64> { msg.split(key).nth(1)?.split(' ').next()?.parse().ok() };
    Some((number_after("found ")?, number_after("the limit is: ")?))
}

/// Counts, logs and answers a Hello that tonic refused as too large (`e`), from `peer`.
pub fn refuse_hello(rejected: &LabelledCounter, peer: &str, e: &Status) -> Status {
    rejected.inc("oversized_hello");
    let (text, limit) = match sizes(e.message()) {
        Some((size, limit)) => (format!("the Hello of {size} bytes is above the collector's limit of {limit} bytes (limits.max_message_bytes)"), Some(limit)),
        None => (format!("the Hello is above the collector's limit (limits.max_message_bytes): {}", e.message()), None),
    };
    tracing::warn!(%peer, "refused a stream: {text}");
    let mut status =
        Status::resource_exhausted(format!("{text}; send a smaller Hello (fewer inventory entries) or raise the collector's limits.max_message_bytes"));
    if let Ok(v) = "hello".parse() {
        status.metadata_mut().insert(REFUSED_MESSAGE, v);
    }
    if let Some(v) = limit.and_then(|l| l.to_string().parse().ok()) {
        status.metadata_mut().insert(LIMIT_BYTES, v);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tonic 0.14.9's wording (tonic/src/codec/decode.rs, the decoder's length check).
    const TONIC: &str = "Error, decoded message length too large: found 4712305 bytes, the limit is: 4194304 bytes";

    #[test]
    fn names_size_and_limit_counts_and_tells_the_agent() {
        let c = LabelledCounter::default();
        let s = refuse_hello(&c, "127.0.0.1:5", &Status::out_of_range(TONIC));
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert!(
            s.message().starts_with("the Hello of 4712305 bytes is above the collector's limit of 4194304 bytes (limits.max_message_bytes)"),
            "{}",
            s.message()
        );
        assert_eq!(s.metadata().get(LIMIT_BYTES).and_then(|v| v.to_str().ok()), Some("4194304"));
        assert_eq!(s.metadata().get(REFUSED_MESSAGE).and_then(|v| v.to_str().ok()), Some("hello"));
        assert_eq!(c.get("oversized_hello"), 1);
        assert!(is_oversized(&Status::out_of_range(TONIC)) && !is_oversized(&Status::cancelled("x")));
    }
}
