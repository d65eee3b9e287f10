//! Cost per sample of the collector's CPU path without the network: protobuf decode, domain
//! conversion, schema points, line encoding. `cargo run --release -p wattflip-collector --example
//! ingest_path [BATCHES]`; run it under `valgrind --tool=callgrind` for instruction counts.

use prost::Message;
use std::time::Instant;
use wattflip_proto::domain::convert_batch;
use wattflip_proto::encoder::BatchEncoder;
use wattflip_proto::schema::HostTags;
use wattflip_proto::v1;

fn batch(seq: u64, n: usize) -> v1::Batch {
    v1::Batch {
        agent_id: "load-0".into(),
        sequence: seq,
        temperature: (0..n)
            .map(|i| v1::TemperatureSample {
                time_ns: 1_700_000_000_000_000_000 + i as i64,
                source: "hwmon".into(),
                device: format!("nvme{}", i % 8),
                sensor: "Composite".into(),
                // m°C readings as hwmon gives them: most are not integers (those print faster).
                celsius: 40.0 + (i % 997) as f64 * 0.013,
            })
            .collect(),
        ..Default::default()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let batches: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(2000);
    let n = 1000;
    let wire = batch(1, n).encode_to_vec();
    let tags = HostTags { host: "load-0".into(), labels: [("rack".to_string(), "r1".to_string())].into() };
    let (mut t_dec, mut t_conv, mut t_pts, mut t_enc, mut bytes) = (0u128, 0u128, 0u128, 0u128, 0usize);
    for _ in 0..batches {
        let t = Instant::now();
        let b = v1::Batch::decode(wire.as_slice())?;
        let t1 = Instant::now();
        let b = convert_batch("load-0", b)?;
        let t2 = Instant::now();
        // The collector builds its encoder once per stream; here that is "points".
        let enc = BatchEncoder::new(&tags);
        let t3 = Instant::now();
        let mut lines = Vec::new();
        assert!(enc.encode(&b, &mut lines).is_empty(), "encodable");
        let t4 = Instant::now();
        bytes += lines.iter().map(String::len).sum::<usize>();
        t_dec += (t1 - t).as_nanos();
        t_conv += (t2 - t1).as_nanos();
        t_pts += (t3 - t2).as_nanos();
        t_enc += (t4 - t3).as_nanos();
    }
    let per = |ns: u128| ns as f64 / (batches * n) as f64;
    println!(
        "ns/sample: decode {:.0}, convert {:.0}, encoder set-up {:.0}, encode {:.0}, total {:.0} ({:.0} k samples/s on one core); {} bytes/line",
        per(t_dec),
        per(t_conv),
        per(t_pts),
        per(t_enc),
        per(t_dec + t_conv + t_pts + t_enc),
        1e6 / per(t_dec + t_conv + t_pts + t_enc),
        bytes / (batches * n)
    );
    Ok(())
}
