//! `rill bench` end to end: the real binary against an embedded data directory, with
//! tiny workloads. Checks the JSON contract, not speed.

use std::process::{Command, Output};

fn rill(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rill"))
        .args(args)
        .env_remove("RILL_SERVER")
        .output()
        .expect("run rill")
}

fn bench_json(workload: &str, extra: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let mut args = vec![
        "bench",
        workload,
        "--data",
        data,
        "--messages",
        "2000",
        "--size",
        "100",
        "--batch",
        "100",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = rill(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "rill bench {workload} failed: {:?}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    assert_eq!(stdout.lines().count(), 1, "one JSON object: {stdout}");
    let v: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout}"));
    assert_eq!(v["workload"], workload);
    assert_eq!(v["records"], 2000, "{v}");
    assert_eq!(v["bytes"], 200_000, "{v}");
    assert!(v["seconds"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["records_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["mb_per_s"].as_f64().unwrap() > 0.0, "{v}");
    for k in ["p50", "p90", "p99", "p999", "max"] {
        assert!(v["latency_us"][k].is_number(), "latency_us.{k} in {v}");
    }
    v
}

#[test]
fn produce_json() {
    let v = bench_json("produce", &[]);
    assert_eq!(v["transport"], "embedded");
    assert_eq!(v["durability"], "never");
}

#[test]
fn produce_with_publish_batch_and_many_partitions() {
    let v = bench_json(
        "produce",
        &[
            "--api",
            "publish-batch",
            "--producers",
            "3",
            "--partitions",
            "4",
        ],
    );
    assert_eq!(v["partitions"], 4);
    assert_eq!(v["producers"], 3);
}

#[test]
fn consume_json() {
    let v = bench_json("consume", &["--partitions", "3", "--consumers", "2"]);
    assert_eq!(v["partitions"], 3);
}

#[test]
fn e2e_json() {
    let v = bench_json(
        "e2e",
        &["--partitions", "2", "--producers", "2", "--consumers", "2"],
    );
    assert!(v["produce_request_latency_us"]["p50"].is_number(), "{v}");
}

/// Received through consumer-group members: every record once, whatever member got it.
#[test]
fn e2e_through_group_members_json() {
    let v = bench_json(
        "e2e",
        &[
            "--group",
            "--partitions",
            "3",
            "--consumers",
            "2",
            "--rate",
            "4000",
        ],
    );
    assert_eq!(v["group"], true, "{v}");
    assert_eq!(v["consumers"], 2, "{v}");
}

#[test]
fn e2e_durability_always_without_warmup() {
    bench_json("e2e", &["--durability", "always", "--warmup", "0"]);
}

#[test]
fn fixed_rate_keyed_e2e_json() {
    let v = bench_json(
        "e2e",
        &[
            "--rate",
            "4000",
            "--keyed",
            "--partitions",
            "2",
            "--producers",
            "2",
            "--consumers",
            "2",
        ],
    );
    assert_eq!(v["rate"], 4000, "{v}");
    assert_eq!(v["keyed"], true, "{v}");
    let kind = v["latency_kind"].as_str().unwrap();
    assert!(kind.contains("intended"), "{kind}");
}

#[test]
fn fixed_rate_produce_measures_from_the_intended_time() {
    let v = bench_json("produce", &["--rate", "5000"]);
    assert_eq!(v["rate"], 5000, "{v}");
    let kind = v["latency_kind"].as_str().unwrap();
    assert!(kind.contains("intended"), "{kind}");
    // One sample per record at a fixed rate (per request otherwise).
    assert_eq!(v["latency_us"]["samples"], 2000, "{v}");
}

/// A keyed `rill bench produce` of 2,000 records into `data` (the topic kept), with
/// `extra` options; its JSON, its stderr, and the partition every key's records went to
/// (each key's all to one; 2,000 records read back).
fn keyed_run(
    data: &str,
    extra: &[&str],
) -> (
    serde_json::Value,
    String,
    std::collections::HashMap<String, u64>,
) {
    let mut args = vec![
        "bench",
        "produce",
        "--data",
        data,
        "--messages",
        "2000",
        "--warmup",
        "0",
        "--size",
        "10",
        "--batch",
        "100",
        "--keyed",
        "--keep",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = rill(&args);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let topic = v["topic"].as_str().unwrap();
    let consumed = rill(&["consume", topic, "--data", data, "--format", "json"]);
    assert!(consumed.status.success(), "{consumed:?}");
    let mut partition_of = std::collections::HashMap::new();
    let mut records = 0;
    for line in String::from_utf8_lossy(&consumed.stdout).lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = r["key"].as_str().unwrap().to_owned();
        let p = r["partition"].as_u64().unwrap();
        assert_eq!(*partition_of.entry(key.clone()).or_insert(p), p, "{key}");
        records += 1;
    }
    assert_eq!(records, 2000);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (v, stderr, partition_of)
}

/// Keyed records land in more than one partition, and every key in exactly one.
#[test]
fn keyed_records_are_routed_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (_, _, partition_of) = keyed_run(data.to_str().unwrap(), &["--partitions", "4"]);
    for key in partition_of.keys() {
        assert!(key.starts_with('k') && key.len() == 6, "{key}");
    }
    let partitions: std::collections::BTreeSet<u64> = partition_of.values().copied().collect();
    assert_eq!(partitions.len(), 4, "{partitions:?}");
}

/// An elastic bench topic: keyed records go to the ranges covering their keys, each key
/// to exactly one range, and the topic is elastic.
#[test]
fn keyed_records_over_an_elastic_topic_are_routed_by_range() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let (v, stderr, range_of) = keyed_run(data, &["--partitions", "3", "--elastic"]);
    assert_eq!(v["elastic"], true, "{v}");
    assert!(stderr.contains("3 open range(s) of 3"), "{stderr}");
    let topic = v["topic"].as_str().unwrap();
    let described = rill(&[
        "topic", "describe", topic, "--data", data, "--output", "json",
    ]);
    let d: serde_json::Value = serde_json::from_slice(&described.stdout).unwrap();
    assert_eq!(d["elastic"], true, "{d}");
    // And the hash of each key is in its range's bounds.
    for (key, p) in &range_of {
        let hash = rill_client::key_hash(key.as_bytes());
        let r = &d["ranges"][*p as usize];
        assert!(
            r["lo"].as_u64().unwrap() <= hash && hash <= r["hi"].as_u64().unwrap(),
            "{key} in range {p}: {r}"
        );
    }
    // Plain publishes do not route by range.
    let refused = rill(&[
        "bench",
        "produce",
        "--data",
        data,
        "--keyed",
        "--elastic",
        "--api",
        "publish-batch",
    ]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
}

#[test]
fn human_output_and_keep() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let out = rill(&[
        "bench",
        "produce",
        "--data",
        data,
        "--messages",
        "500",
        "--size",
        "10",
        "--batch",
        "50",
        "--keep",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("records/s"), "{stdout}");
    assert!(stdout.contains("MB/s"), "{stdout}");
    assert!(stdout.contains("p99.9"), "{stdout}");
    // The kept topic is still there.
    let list = rill(&["topic", "list", "bench", "--data", data]);
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(listed.contains("bench-produce-"), "{listed}");
}

#[test]
fn bad_numbers_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    for bad in [
        &["produce", "--messages", "0"][..],
        &["produce", "--size", "0"],
        &["produce", "--batch", "0"],
        &["produce", "--producers", "0"],
        &["produce", "--partitions", "0"],
        &["consume", "--consumers", "0"],
        &["e2e", "--size", "4"],
        &["produce", "--size", "1000000", "--batch", "1000"],
        &["produce", "--durability", "sometimes"],
        &["consume", "--rate", "100"],
        &["produce", "--group"],
        &["e2e", "--commit-policy", "disabled"],
        &["produce", "--rate", "0"],
        &["produce", "--in-flight", "0"],
        &["produce", "--read", "subscribe"],
        &["e2e", "--group", "--read", "subscribe"],
        &["consume", "--read", "push"],
        &["produce", "--in-flight", "65"],
        // A producer without idempotence keeps one batch per partition in flight.
        &["produce", "--in-flight", "2"],
        &["produce", "--api", "publish-batch", "--idempotent"],
        &["produce", "--limits", "--limits-seconds", "0"],
        &["limits", "--limits-seconds", "nan"],
        &["limits"],
        &["sideways"],
    ] {
        let mut args = vec!["bench", "--data", data];
        args.extend_from_slice(bad);
        let out = rill(&args);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{bad:?}");
        assert!(!out.stderr.is_empty(), "{bad:?}");
    }
    // Nothing was created.
    assert!(!dir.path().join("data").exists());
}

#[test]
fn pipelined_produce_with_the_limits_measured_first() {
    let v = bench_json(
        "produce",
        &[
            "--idempotent",
            "--in-flight",
            "4",
            "--limits",
            "--limits-seconds",
            "0.05",
        ],
    );
    assert_eq!(v["in_flight"], 4, "{v}");
    assert_eq!(v["idempotent"], true, "{v}");
    for k in [
        "loopback_mb_per_s",
        "disk_sync_mb_per_s",
        "disk_syncs_per_s",
        "page_cache_mb_per_s",
        "memcpy_mb_per_s",
    ] {
        assert!(v["limits"][k].as_f64().unwrap() > 0.0, "limits.{k} in {v}");
    }
    assert_eq!(v["limits"]["disk_sync_write_bytes"], 100 * 100, "{v}");
    // Embedded: no socket on the path, a memory copy bounds it.
    let f = &v["fraction_of_limits"];
    assert_eq!(f["bound"], "memcpy", "{v}");
    let expected =
        v["mb_per_s"].as_f64().unwrap() / v["limits"]["memcpy_mb_per_s"].as_f64().unwrap();
    assert!(
        (f["of_bound"].as_f64().unwrap() - expected).abs() < 0.01,
        "{v}"
    );
    // Far below a gigabyte: no rates per gigabyte.
    assert!(v.get("per_gb_mb_per_s").is_none(), "{v}");
}

/// `rill bench limits`: every figure measured, on the disk of the directory given, whose
/// scratch files are removed afterwards.
#[test]
fn limits_json() {
    let dir = tempfile::tempdir().unwrap();
    let out = rill(&[
        "bench",
        "limits",
        "--limits-dir",
        dir.path().to_str().unwrap(),
        "--limits-seconds",
        "0.05",
        "--batch",
        "10",
        "--size",
        "4096",
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["workload"], "limits");
    assert_eq!(v["disk_sync_write_bytes"], 40960);
    assert_eq!(v["dir"], dir.path().to_str().unwrap());
    assert!(v["loopback_mb_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["memcpy_mb_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["page_cache_mb_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["loopback_rtt_us"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["host"]["free_page_reporting"].is_boolean(), "{v}");
    assert!(
        v["host"]["guest_halt_poll_ns"].is_null() || v["host"]["guest_halt_poll_ns"].is_u64(),
        "{v}"
    );
    assert!(
        v["disk_direct_mb_per_s"].is_null() || v["disk_direct_mb_per_s"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // A directory that does not exist is a usage error that names it.
    let out = rill(&[
        "bench",
        "limits",
        "--limits-dir",
        "/nonexistent/rill-limits",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/rill-limits"),
        "{out:?}"
    );
}

/// `rill bench events`: the JSON contract of docs/CLI.md, every event handled, the
/// sequential consumer and the raw read measured in the same run, and the stream of the
/// run deleted afterwards.
#[test]
fn events_json() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let out = rill(&[
        "bench",
        "events",
        "--data",
        data,
        "--events",
        "3000",
        "--keys",
        "100",
        "--partitions",
        "2",
        "--handler-us",
        "200",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["workload"], "events");
    assert_eq!(v["events"], 3000);
    assert_eq!(
        v["raw_consume_records"], 3000,
        "the raw read saw every record"
    );
    for k in [
        "events_per_s",
        "sequential_events_per_s",
        "speedup",
        "raw_consume_records_per_s",
    ] {
        assert!(v[k].as_f64().is_some_and(|x| x > 0.0), "{k} in {v}");
    }
    let speedup =
        v["events_per_s"].as_f64().unwrap() / v["sequential_events_per_s"].as_f64().unwrap();
    assert!(
        (speedup - v["speedup"].as_f64().unwrap()).abs() < 1e-6 * speedup,
        "{v}"
    );
    assert!(v["sequential_events"].as_u64().unwrap() > 0, "{v}");
    let list = rill(&["stream", "list", "--data", data]);
    assert!(
        !String::from_utf8_lossy(&list.stdout).contains("bench-events"),
        "the run's stream is deleted"
    );
    // Its flags are its own.
    let out = rill(&["bench", "produce", "--data", data, "--handler-us", "5"]);
    assert_eq!(out.status.code(), Some(2));
}
