//! The collector's ingest path on arbitrary bytes: protobuf decode of an `AgentMessage`, conversion
//! to domain types, schema points and line encoding. Invariant beyond "no panic": whatever the
//! domain checks accept must encode, one line per point, because the collector acknowledges a
//! batch only after writing it and an unencodable point would be acknowledged yet lost. And the
//! collector's fast encoder (`BatchEncoder`) must write exactly the lines of the reference path.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use wattflip_proto::domain::{convert_batch, Hello};
use wattflip_proto::encoder::{reference_lines, BatchEncoder};
use wattflip_proto::lineproto::Point;
use wattflip_proto::schema::{batch_points, hello_points, HostTags};
use wattflip_proto::v1::{agent_message::Kind, AgentMessage};

fn encode_all_or_panic(points: &[Point]) {
    for p in points {
        let mut line = String::new();
        if let Err(e) = p.write_line(&mut line) {
            panic!("accepted by the domain checks but not encodable: {e}: {p:?}");
        }
        assert!(line.ends_with('\n') && line.matches('\n').count() == 1, "not one line: {line:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(msg) = AgentMessage::decode(data) else { return };
    match msg.kind {
        Some(Kind::Hello(h)) => {
            if let Ok(h) = Hello::try_from(h) {
                let tags = HostTags { host: h.agent_id.clone(), labels: h.labels.clone() };
                encode_all_or_panic(&hello_points(&h, &tags));
            }
        }
        Some(Kind::Batch(b)) => {
            let agent = b.agent_id.clone();
            if let Ok(b) = convert_batch(&agent, b) {
                let tags = HostTags { host: agent.clone(), labels: [("rack".to_string(), "r1".to_string())].into() };
                encode_all_or_panic(&batch_points(&b, &tags));
                let mut fast = Vec::new();
                let errors = BatchEncoder::new(&tags).encode(&b, &mut fast);
                assert!(errors.is_empty(), "fast encoder refused what the domain accepted: {errors:?}");
                assert_eq!(fast, reference_lines(&b, &tags).0, "fast encoder differs from the reference");
            }
        }
        None => {}
    }
});
