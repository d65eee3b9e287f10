//! Compiles `wattflip/v1/*.proto` with protox (pure Rust), so no system `protoc` is needed.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["wattflip/v1/ingest.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["."])?;
    // The generated client and server use the lean codec (src/codec.rs): small per-stream buffers.
    tonic_prost_build::configure().build_client(true).build_server(true).codec_path("crate::codec::LeanCodec").compile_fds(fds)?;
    Ok(())
}
