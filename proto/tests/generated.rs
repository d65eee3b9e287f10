//! The committed gRPC code (`generated/wattflip.v1.rs`) is what `wattflip/v1/ingest.proto` gives:
//! regenerated here with protox (pure Rust, no `protoc`) and tonic-prost-build, as a build script
//! did before, and compared byte for byte. After changing the .proto, run this test with
//! `WATTFLIP_REGENERATE=1` to rewrite the file, and commit both.

// A panic with a message is the test's failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

const FILES: [&str; 1] = ["wattflip/v1/ingest.proto"];

fn generate(out: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = FILES.map(|f| root.join(f));
    let fds = protox::compile(files, [root]).expect("the .proto compiles");
    // The generated client and server use the lean codec (src/codec.rs): small per-stream buffers.
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .codec_path("crate::codec::LeanCodec")
        .out_dir(out)
        .compile_fds(fds)
        .expect("tonic-prost-build generates the code");
    std::fs::read_to_string(out.join("wattflip.v1.rs")).expect("the generated file")
}

#[test]
fn the_committed_grpc_code_is_what_the_proto_gives() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = generate(dir.path());
    let committed_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("generated/wattflip.v1.rs");
    if std::env::var_os("WATTFLIP_REGENERATE").is_some() {
        std::fs::write(&committed_path, &fresh).unwrap();
    }
    let committed = std::fs::read_to_string(&committed_path).unwrap();
    assert!(
        committed == fresh,
        "{} differs from what wattflip/v1/ingest.proto gives ({} vs {} bytes): run `WATTFLIP_REGENERATE=1 cargo test -p wattflip-proto --test generated` and commit the file",
        committed_path.display(),
        committed.len(),
        fresh.len()
    );
}
