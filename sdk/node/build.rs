//! Links the addon as Node expects a `.node` file to be linked.

fn main() {
    napi_build::setup();
}
