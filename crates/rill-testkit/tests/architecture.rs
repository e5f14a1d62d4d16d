//! Architecture invariants from ARCHITECTURE.md, checked against `cargo metadata` and the
//! sources, so a forbidden dependency fails the build's tests rather than a review.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// For each workspace crate, the Rill crates it may depend on (normal dependencies).
const ALLOWED: &[(&str, &[&str])] = &[
    ("rill-format", &[]),
    ("rill-storage", &["rill-format"]),
    ("rill-proto", &[]),
    // Credentials and the SCRAM exchange: pure functions, no I/O, no Rill crate
    // (docs/SECURITY.md); the broker, server and client will stand on it.
    ("rill-auth", &[]),
    (
        "rill-broker",
        &["rill-format", "rill-storage", "rill-proto", "rill-auth"],
    ),
    // The HTTP port's application: every API request goes through the broker.
    ("rill-http", &["rill-format", "rill-proto", "rill-broker"]),
    // The network front serves the HTTP port with rill-http's application.
    (
        "rill-server",
        &["rill-format", "rill-proto", "rill-broker", "rill-http"],
    ),
    // The embedded transport (feature `embedded`, on by default) runs a broker in-process.
    (
        "rill-client",
        &["rill-format", "rill-proto", "rill-broker", "rill-auth"],
    ),
    // `rill serve --peers` starts a cluster node (rill-cluster) with its disk
    // (rill-storage) and opens the broker on it.
    (
        "rill-cli",
        &[
            "rill-client",
            "rill-events",
            "rill-server",
            "rill-broker",
            "rill-cluster",
            "rill-storage",
            "rill-auth",
        ],
    ),
    ("rill", &["rill-client", "rill-events"]),
    // Typed events stand on the client only; the derive macros on nothing.
    ("rill-events", &["rill-client", "rill-events-derive"]),
    ("rill-events-derive", &[]),
    // Test tools drive Rill from outside: the soak runs `rill serve` and talks to it
    // through the SDK. Dev-only (see `testkit_is_only_a_dev_dependency`).
    (
        "rill-testkit",
        &["rill-format", "rill-storage", "rill-client"],
    ),
    // The peer harness drives Rill only through the `rill` binary.
    ("rill-peers", &[]),
    // Replication (docs/REPLICATION.md): the metadata group and the partition groups on
    // the Raft library, the storage engine and the batch format; it implements the
    // broker's cluster seam (§11.1).
    (
        "rill-cluster",
        &["rill-broker", "rill-format", "rill-storage"],
    ),
];

fn metadata() -> serde_json::Value {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("metadata is JSON")
}

#[test]
fn crates_depend_only_on_allowed_rill_crates() {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let meta = metadata();
    for package in meta["packages"].as_array().unwrap() {
        let name = package["name"].as_str().unwrap();
        let Some(allowed) = allowed.get(name) else {
            panic!(
                "{name} is not in the ALLOWED table: add it with the edges ARCHITECTURE.md permits"
            );
        };
        for dep in package["dependencies"].as_array().unwrap() {
            let dep_name = dep["name"].as_str().unwrap();
            let normal = dep["kind"].is_null();
            if normal && dep_name.starts_with("rill") {
                assert!(
                    allowed.contains(&dep_name),
                    "{name} must not depend on {dep_name} (see ARCHITECTURE.md)"
                );
            }
        }
    }
}

/// The broker appends through the partition-log seam and never imports the Raft
/// library (docs/REPLICATION.md §11): only `rill-cluster` depends on it.
#[test]
fn only_rill_cluster_depends_on_the_raft_library() {
    let meta = metadata();
    for package in meta["packages"].as_array().unwrap() {
        let name = package["name"].as_str().unwrap();
        if !name.starts_with("rill") || name == "rill-cluster" {
            continue;
        }
        for dep in package["dependencies"].as_array().unwrap() {
            let dep_name = dep["name"].as_str().unwrap();
            assert!(
                !dep_name.starts_with("openraft") && dep_name != "raft",
                "{name} must not depend on {dep_name}: the Raft library stays in rill-cluster"
            );
        }
    }
}

#[test]
fn testkit_is_only_a_dev_dependency() {
    let meta = metadata();
    for package in meta["packages"].as_array().unwrap() {
        let name = package["name"].as_str().unwrap();
        for dep in package["dependencies"].as_array().unwrap() {
            if dep["name"] == "rill-testkit" {
                assert_eq!(
                    dep["kind"].as_str(),
                    Some("dev"),
                    "{name} depends on rill-testkit other than as a dev-dependency"
                );
            }
        }
    }
}

#[test]
fn fault_injection_is_only_for_tests() {
    let meta = metadata();
    for package in meta["packages"].as_array().unwrap() {
        let name = package["name"].as_str().unwrap();
        for dep in package["dependencies"].as_array().unwrap() {
            if dep["name"] == "rill-storage" && dep["kind"].is_null() {
                let features = dep["features"].as_array().unwrap();
                assert!(
                    !features.iter().any(|f| f == "fault-injection"),
                    "{name} enables rill-storage's fault injection outside its dev-dependencies"
                );
            }
        }
        if name == "rill-storage" {
            let default = &package["features"]["default"];
            assert!(
                default.is_null() || !default.to_string().contains("fault-injection"),
                "fault injection is off by default"
            );
        }
    }
}

#[test]
fn the_embedded_transport_is_an_optional_default_feature() {
    let meta = metadata();
    let client = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "rill-client")
        .expect("rill-client is in the workspace");
    let broker = client["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "rill-broker" && d["kind"].is_null())
        .expect("the embedded transport depends on rill-broker");
    assert_eq!(
        broker["optional"], true,
        "rill-broker is optional in rill-client"
    );
    let features = &client["features"];
    assert_eq!(features["embedded"], serde_json::json!(["dep:rill-broker"]));
    assert!(
        features["default"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "embedded"),
        "embedded is a default feature"
    );
}

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push((
                path.display().to_string(),
                std::fs::read_to_string(&path).unwrap(),
            ));
        }
    }
}

#[test]
fn lower_crates_have_no_network_code_and_format_no_io() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (krate, forbidden) in [
        (
            "rill-format/src",
            &["std::net", "tokio::", "std::fs", "std::io::"][..],
        ),
        (
            "rill-storage/src",
            &["std::net", "tokio::", "rill_proto"][..],
        ),
        ("rill-proto/src", &["std::net", "tokio::", "std::fs"][..]),
        // The broker names a connection's address (the failed-attempt limiter keys on
        // it) but opens no socket.
        (
            "rill-broker/src",
            &[
                "std::net::Tcp",
                "std::net::Udp",
                "tokio::net",
                "TcpStream",
                "TcpListener",
                "UdpSocket",
                "ToSocketAddrs",
            ][..],
        ),
        // The HTTP application serves streams the server accepted: it binds nothing
        // and opens no socket (the listener, its limit and TLS are rill-server's).
        (
            "rill-http/src",
            &[
                "TcpListener",
                "TcpStream",
                "tokio::net",
                "std::net::Tcp",
                "UdpSocket",
            ][..],
        ),
        // Credentials are pure functions: no file, no socket, no runtime.
        (
            "rill-auth/src",
            &[
                "std::fs",
                "tokio::",
                "TcpStream",
                "TcpListener",
                "UdpSocket",
            ][..],
        ),
    ] {
        let mut files = Vec::new();
        sources(&root.join(krate), &mut files);
        assert!(!files.is_empty());
        for (path, text) in files {
            for word in forbidden {
                assert!(!text.contains(word), "{path} uses {word}");
            }
        }
    }
}
