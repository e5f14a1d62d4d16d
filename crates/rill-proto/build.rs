//! Compiles `proto/rill.proto` with a pure-Rust protobuf compiler (protox), so a fresh
//! machine builds without `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/rill.proto");
    let descriptors = protox::compile(["rill.proto"], ["proto"])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
