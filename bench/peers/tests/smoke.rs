//! Smoke test of `rill-peers compare`: the smoke set (every workload shape, a few
//! thousand records each), one round, against real `rill`, `redis-server` and
//! `nats-server` processes; then checks the files it writes.
//!
//! Needs `redis-server` and `nats-server` (`bench/peers/install`) and the `rill` binary
//! next to `rill-peers` in the same target directory (`cargo nextest run --workspace`
//! builds both).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The whole smoke comparison must finish within this (a debug build takes seconds).
const DEADLINE: Duration = Duration::from_secs(100);

/// Where `name` is installed: in `PATH` or in the sbin directories.
fn installed(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("compare did not write {}: {e}", path.display()))
}

#[test]
fn compare_smoke_set_on_every_system() {
    for server in ["redis-server", "nats-server"] {
        assert!(
            installed(server).is_some(),
            "{server} is not installed: run bench/peers/install (it installs redis-server \
             and nats-server)"
        );
    }
    let peers = Path::new(env!("CARGO_BIN_EXE_rill-peers"));
    let rill = peers.with_file_name(format!("rill{}", std::env::consts::EXE_SUFFIX));
    assert!(
        rill.is_file(),
        "no rill binary at {}: build rill-cli into the same target directory \
         (`cargo build -p rill-cli`; `cargo nextest run --workspace` builds it)",
        rill.display()
    );

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let stdout = std::fs::File::create(dir.path().join("stdout")).unwrap();
    let stderr = std::fs::File::create(dir.path().join("stderr")).unwrap();
    let mut child = Command::new(peers)
        .args([
            "compare",
            "--set",
            "smoke",
            "--rounds",
            "1",
            "--no-warmup",
            "--settle",
            "0",
            "--out",
        ])
        .arg(&out)
        .arg("--rill")
        .arg(&rill)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "compare took over {DEADLINE:?}; stderr:\n{}",
                read(&dir.path().join("stderr"))
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = read(&dir.path().join("stdout"));
    let stderr = read(&dir.path().join("stderr"));
    assert!(
        status.success(),
        "compare failed ({status}); stdout:\n{stdout}\nstderr:\n{stderr}"
    );

    // latest.json: a result for every (workload, system) pair that runs; n/a for NATS
    // on fsync workloads.
    let json: Value = serde_json::from_str(&read(&out.join("latest.json"))).unwrap();
    let workloads = json["workloads"].as_array().unwrap();
    assert_eq!(workloads.len(), 10, "the smoke set has ten workloads");
    let mut results = 0;
    for w in workloads {
        let name = w["name"].as_str().unwrap();
        let messages = w["workload"]["messages"].as_u64().unwrap();
        let fsync = w["workload"]["durability"] == "fsync";
        let systems = w["systems"].as_array().unwrap();
        let names: Vec<&str> = systems
            .iter()
            .map(|s| s["system"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["rill", "redis", "nats"], "{name}");
        for s in systems {
            let system = s["system"].as_str().unwrap();
            if system == "nats" && fsync {
                assert_eq!(s["status"], "n/a", "{name} {system}");
                assert!(s["reason"].as_str().unwrap().contains("fsync"));
                assert!(s["runs"].as_array().unwrap().is_empty());
                continue;
            }
            assert_eq!(s["status"], "ok", "{name} {system}: {}", s["reason"]);
            assert!(s["setting"].is_string(), "{name} {system}");
            let runs = s["runs"].as_array().unwrap();
            assert_eq!(runs.len(), 1, "{name} {system}");
            let r = &runs[0]["result"];
            assert_eq!(r["records"].as_u64(), Some(messages), "{name} {system}");
            assert!(
                r["records_per_s"].as_f64().unwrap() > 0.0,
                "{name} {system}"
            );
            assert!(
                s["summary"]["records_per_s"]["median"].as_f64().unwrap() > 0.0,
                "{name} {system}"
            );
            results += 1;
        }
        assert!(w["ratios"]["throughput_vs_best_peer"].as_f64().unwrap() > 0.0);
    }
    // Ten workloads on three systems, less NATS on the two fsync workloads.
    assert_eq!(results, 28);
    assert!(json["machine"]["versions"]["redis-server"].is_string());
    assert!(json["machine"]["versions"]["nats-server"].is_string());

    // latest.svg: a bar per result, latency curves; latest.md: the tables.
    let svg = read(&out.join("latest.svg"));
    assert!(svg.contains("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches(r#"class="bar""#).count(), results);
    assert!(svg.matches(r#"class="curve""#).count() >= 3);
    let md = read(&out.join("latest.md"));
    assert!(md.len() > 1000, "latest.md is too short:\n{md}");
    assert!(md.contains("| `produce-1k` |"));
    assert!(stdout.contains("rill/redis"), "stdout:\n{stdout}");
}
