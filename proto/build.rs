//! Compiles `proto/ozone.proto` with protox (pure Rust; no system `protoc`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/ozone.proto");
    let fds = protox::compile(["proto/ozone.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .bytes(".ozone.v1.WriteChunkRequest.data")
        .bytes(".ozone.v1.ReadChunkResponse.data")
        .bytes(".ozone.v1.SidecarReadResponse.data")
        .bytes(".ozone.v1.SidecarWriteRequest.data")
        .compile_fds(fds)?;
    Ok(())
}
