//! The `rill` command line as scripts use it: the real binary, over a server and over
//! an embedded data directory.

mod common;

use common::{ServerProcess, ok, rill_bin};

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs `rill ARGS` against a target, feeding `stdin`.
fn rill(target: &[String], args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(rill_bin())
        .args(target)
        .args(args)
        .env_remove("RILL_SERVER")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

/// Produce N lines from stdin, consume them back as JSON, compare.
fn produce_and_consume_round_trip(target: &[String]) {
    ok(&rill(target, &["stream", "create", "shop"], None));
    ok(&rill(
        target,
        &["topic", "create", "shop/orders", "--partitions", "3"],
        None,
    ));
    // Creating it again with the same options succeeds.
    ok(&rill(
        target,
        &["topic", "create", "shop/orders", "--partitions", "3"],
        None,
    ));
    let lines: Vec<String> = (0..2500).map(|i| format!("order-{i} \u{00e9}")).collect();
    let out = rill(
        target,
        &["produce", "shop/orders"],
        Some(&(lines.join("\n") + "\n")),
    );
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("2500 records sent"), "{stderr}");

    let out = ok(&rill(
        target,
        &["consume", "shop/orders", "--format", "json"],
        None,
    ));
    let mut values: Vec<String> = out
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            for field in [
                "partition",
                "offset",
                "timestamp_us",
                "key",
                "headers",
                "value",
            ] {
                assert!(v.get(field).is_some(), "{field} missing in {l}");
            }
            v["value"].as_str().unwrap().to_owned()
        })
        .collect();
    values.sort();
    let mut expected = lines;
    expected.sort();
    assert_eq!(values, expected);

    // Keys, headers and key separators.
    ok(&rill(
        target,
        &[
            "produce",
            "shop/orders",
            "--key",
            "k1",
            "--header",
            "source=cli",
            "hello",
        ],
        None,
    ));
    ok(&rill(
        target,
        &["produce", "shop/orders", "--key-sep", ":"],
        Some("a:1\nb:2\n"),
    ));
    // A record takes a key or a partition, and a key is never empty.
    // (No standard input: the arguments are refused before it would be read.)
    let refused = |args: &[&str], says: &str| {
        let out = rill(target, args, None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(says),
            "{args:?}: {stderr}"
        );
    };
    refused(
        &[
            "produce",
            "shop/orders",
            "--partition",
            "1",
            "--key-sep",
            ":",
        ],
        "cannot be used with",
    );
    refused(
        &["produce", "shop/orders", "--key", "", "x"],
        "must not be empty",
    );
    let out = ok(&rill(
        target,
        &[
            "consume",
            "shop/orders",
            "--format",
            "json",
            "--from",
            "first",
        ],
        None,
    ));
    let records: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let hello = records.iter().find(|r| r["value"] == "hello").unwrap();
    assert_eq!(hello["key"], "k1");
    assert_eq!(hello["headers"]["source"], "cli");
    let a = records.iter().find(|r| r["value"] == "1").unwrap();
    assert_eq!(a["key"], "a");

    // --from: an offset, the last record, a time.
    let out = ok(&rill(
        target,
        &[
            "consume",
            "shop/orders",
            "--partition",
            "0",
            "--from",
            "offset:5",
            "--format",
            "json",
        ],
        None,
    ));
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["offset"], 5);
    let out = ok(&rill(
        target,
        &[
            "consume",
            "shop/orders",
            "--partition",
            "0",
            "--from",
            "last",
        ],
        None,
    ));
    assert_eq!(out.lines().count(), 1, "{out}");
    let out = ok(&rill(
        target,
        &[
            "consume",
            "shop/orders",
            "--from",
            "time:2000-01-01T00:00:00Z",
            "--count",
            "3",
        ],
        None,
    ));
    assert_eq!(out.lines().count(), 3);
    let out = ok(&rill(
        target,
        &[
            "consume",
            "shop/orders",
            "--from",
            "time:2999-01-01T00:00:00Z",
        ],
        None,
    ));
    assert_eq!(out.lines().count(), 0, "nothing is that recent: {out}");

    // --count and --partition.
    let out = ok(&rill(
        target,
        &["consume", "shop/orders", "--count", "7"],
        None,
    ));
    assert_eq!(out.lines().count(), 7);
    let out = ok(&rill(
        target,
        &[
            "consume",
            "shop/orders",
            "--partition",
            "1",
            "--format",
            "json",
        ],
        None,
    ));
    assert!(out.lines().all(|l| l.contains("\"partition\":1")));

    // A named consumer stores its offsets: a second run only sees new records.
    let first = ok(&rill(
        target,
        &["consume", "shop/orders", "--name", "billing"],
        None,
    ));
    assert_eq!(first.lines().count(), 2503);
    let again = ok(&rill(
        target,
        &["consume", "shop/orders", "--name", "billing"],
        None,
    ));
    assert_eq!(again.lines().count(), 0, "{again}");
    ok(&rill(target, &["produce", "shop/orders", "late"], None));
    let later = ok(&rill(
        target,
        &["consume", "shop/orders", "--name", "billing"],
        None,
    ));
    assert_eq!(later.trim(), "late");

    // A consumer group: the first run reads everything, the next only what is new, and
    // `group describe` shows stored offsets and lag.
    let first = ok(&rill(
        target,
        &["consume", "shop/orders", "--group", "audit"],
        None,
    ));
    assert_eq!(first.lines().count(), 2504);
    let described = ok(&rill(
        target,
        &["group", "describe", "shop/orders", "audit"],
        None,
    ));
    assert!(
        described.contains("partition\towner\tstored_offset\tlog_end\tlag"),
        "{described}"
    );
    let lags: Vec<u64> = described
        .lines()
        .skip_while(|l| !l.starts_with("partition\t"))
        .skip(1)
        .map(|l| l.rsplit('\t').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(lags, vec![0, 0, 0], "{described}");
    ok(&rill(
        target,
        &["produce", "shop/orders", "--partition", "2", "later"],
        None,
    ));
    let described = ok(&rill(
        target,
        &["group", "describe", "shop/orders", "audit"],
        None,
    ));
    assert!(
        described
            .lines()
            .any(|l| l.starts_with("2\t") && l.ends_with("\t1")),
        "{described}"
    );
    let again = ok(&rill(
        target,
        &["consume", "shop/orders", "--group", "audit"],
        None,
    ));
    assert_eq!(again.trim(), "later");
    let out = rill(
        target,
        &["group", "describe", "shop/orders", "nobody"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));

    // Describe and list.
    let out = ok(&rill(target, &["topic", "describe", "shop/orders"], None));
    assert!(out.contains("partitions\t3"), "{out}");
    let out = ok(&rill(target, &["topic", "list"], None));
    assert!(out.contains("shop/orders"));
    let out = ok(&rill(target, &["stream", "list"], None));
    assert!(out.contains("shop"));

    // Errors: runtime errors exit 1 with one line on stderr; usage errors exit 2.
    let out = rill(target, &["consume", "shop/missing"], None);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("does not exist"), "{err}");
    let out = rill(
        target,
        &["topic", "create", "shop/orders", "--partitions", "4"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let out = rill(target, &["topic", "create", "no-slash"], None);
    assert_eq!(out.status.code(), Some(1));
    let out = rill(
        target,
        &["topic", "create", "shop/x", "--durability", "sometimes"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    let out = rill(
        target,
        &["consume", "shop/orders", "--from", "yesterday"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    let out = rill(
        target,
        &[
            "produce",
            "shop/orders",
            "--key",
            "a",
            "--partition",
            "1",
            "v",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    ok(&rill(target, &["topic", "delete", "shop/orders"], None));
    let out = rill(target, &["topic", "describe", "shop/orders"], None);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn cli_over_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(&dir.path().join("data"));
    produce_and_consume_round_trip(&["--server".into(), server.url()]);
}

#[test]
fn cli_over_an_embedded_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data").display().to_string();
    produce_and_consume_round_trip(&["--data".into(), data]);
}

#[test]
fn unreachable_server_is_a_clear_runtime_error() {
    let out = rill(
        &["--server".into(), "rill://127.0.0.1:1".into()],
        &["stream", "list"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rill serve"), "{err}");
    // A URL that is not one is a bad value (a usage error), not an unreachable server.
    let out = rill(
        &["--server".into(), "http://x".into()],
        &["stream", "list"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid server URL") && !err.contains("rill serve"),
        "{err}"
    );
}

#[test]
fn serve_stops_cleanly_on_sigterm_and_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut server = ServerProcess::start(&data);
    let target = vec!["--server".to_string(), server.url()];
    ok(&rill(&target, &["topic", "create", "s/t"], None));
    ok(&rill(&target, &["produce", "s/t", "kept"], None));
    // /metrics reports consumer-group lag.
    ok(&rill(&target, &["consume", "s/t", "--group", "g"], None));
    ok(&rill(&target, &["produce", "s/t", "unread"], None));
    let metrics = common::http_get(&server.http, "/metrics");
    assert!(
        metrics.contains("rill_group_lag{stream=\"s\",topic=\"t\",group=\"g\",partition=\"0\"} 1"),
        "{metrics}"
    );
    // /health answers while serving.
    let health = std::net::TcpStream::connect(&server.http).map(|mut s| {
        use std::io::Read;
        s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut body = String::new();
        let _ = s.read_to_string(&mut body);
        body
    });
    assert!(health.unwrap().contains("200"), "health endpoint");
    assert_eq!(server.terminate(), Some(0), "SIGTERM exits 0");
    let server = ServerProcess::start(&data);
    let out = ok(&rill(
        &["--server".into(), server.url()],
        &["consume", "s/t"],
        None,
    ));
    assert_eq!(out.trim(), "kept\nunread");
}

/// Issue 9, as an operator meets it: a partition whose sealed segment lost its end.
/// `topic describe` shows why it refuses appends and the damaged range, `consume` reads
/// past the damage and names it on stderr, `topic repair --accept-data-loss` makes it
/// take appends again. `start` opens the data directory (a server, or embedded).
fn damaged_partition_is_described_read_past_and_repaired(
    data: &std::path::Path,
    start: &dyn Fn() -> (Vec<String>, Option<ServerProcess>),
) {
    let (target, server) = start();
    ok(&rill(
        &target,
        &[
            "topic",
            "create",
            "s/t",
            "--partitions",
            "2",
            "--segment-bytes",
            "1024",
        ],
        None,
    ));
    // Seven batches of three records, one batch per segment.
    for b in 0..7 {
        let lines: String = (0..3)
            .map(|i| format!("{:02}{}\n", b * 3 + i, "x".repeat(200)))
            .collect();
        ok(&rill(
            &target,
            &["produce", "s/t", "--partition", "0"],
            Some(&lines),
        ));
    }
    if let Some(mut server) = server {
        assert_eq!(server.terminate(), Some(0));
    }
    let part = data.join("streams/s/t/0");
    let mut logs: Vec<_> = std::fs::read_dir(&part)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    assert_eq!(logs.len(), 7, "{logs:?}");
    let len = std::fs::metadata(&logs[1]).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&logs[1])
        .unwrap()
        .set_len(len - 10)
        .unwrap();

    let (target, _server) = start();
    let described = ok(&rill(&target, &["topic", "describe", "s/t"], None));
    let lines: Vec<&str> = described.lines().collect();
    // The table scripts parse is unchanged: a header and five columns per partition.
    let table = lines
        .iter()
        .position(|l| *l == "partition\tfirst_offset\tnext_offset\tbytes\tsegments")
        .expect(&described);
    assert!(lines[table + 1].starts_with("0\t0\t21\t"), "{described}");
    assert_eq!(lines[table + 1].split('\t').count(), 5, "{described}");
    assert!(lines[table + 2].starts_with("1\t0\t0\t"), "{described}");
    let failure0 = lines
        .iter()
        .find(|l| l.starts_with("failure\t0\t"))
        .expect(&described);
    assert!(failure0.contains("damaged"), "{described}");
    assert!(
        lines.contains(&"failure\t1\t"),
        "healthy: empty\n{described}"
    );
    let damaged: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("damaged\t"))
        .collect();
    assert_eq!(damaged.len(), 1, "{described}");
    let fields: Vec<&str> = damaged[0].split('\t').collect();
    assert_eq!(
        &fields[..5],
        ["damaged", "0", "3", "6", "unaccepted"],
        "{described}"
    );
    assert!(fields[5].ends_with(".log"), "{described}");

    // Appends are refused until the loss is accepted; the message says how.
    let refused = rill(&target, &["produce", "s/t", "--partition", "0", "no"], None);
    assert_eq!(refused.status.code(), Some(1));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("repair"), "{err}");
    // The other partition is fine.
    ok(&rill(
        &target,
        &["produce", "s/t", "--partition", "1", "p1"],
        None,
    ));

    // Reading goes past the damage and says so, once, on stderr.
    let expected: Vec<String> = (0..21)
        .filter(|i| !(3..6).contains(i))
        .map(|i| format!("{i:02}{}", "x".repeat(200)))
        .collect();
    let read = rill(&target, &["consume", "s/t", "--partition", "0"], None);
    let stdout = ok(&read);
    assert_eq!(stdout.lines().collect::<Vec<_>>(), expected);
    let err = String::from_utf8_lossy(&read.stderr);
    // (An embedded broker also logs what recovery found.)
    let reports: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("rill: ") && l.contains("3..6"))
        .collect();
    assert_eq!(reports.len(), 1, "{err}");
    assert!(reports[0].contains("partition 0"), "{err}");

    // A named consumer stores past the damage: its next run meets it no more.
    let first = rill(&target, &["consume", "s/t", "--name", "n"], None);
    assert_eq!(ok(&first).lines().count(), expected.len() + 1);
    let reported = |out: &Output| {
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| l.starts_with("rill: ") && l.contains("3..6"))
            .count()
    };
    assert_eq!(reported(&first), 1);
    let again = rill(&target, &["consume", "s/t", "--name", "n"], None);
    assert_eq!(ok(&again), "");
    assert_eq!(reported(&again), 0);
    // A group member too.
    let grouped = rill(&target, &["consume", "s/t", "--group", "g"], None);
    assert_eq!(ok(&grouped).lines().count(), expected.len() + 1);
    assert_eq!(reported(&grouped), 1);
    let again = rill(&target, &["consume", "s/t", "--group", "g"], None);
    assert_eq!(ok(&again), "");
    assert_eq!(reported(&again), 0);

    // Accepting the loss: the partition takes appends again after it.
    let repaired = ok(&rill(
        &target,
        &[
            "topic",
            "repair",
            "s/t",
            "--partition",
            "0",
            "--accept-data-loss",
        ],
        None,
    ));
    let lines: Vec<&str> = repaired.lines().collect();
    assert!(lines.contains(&"failure\t0\t"), "{repaired}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("damaged\t0\t3\t6\taccepted\t")),
        "{repaired}"
    );
    ok(&rill(
        &target,
        &["produce", "s/t", "--partition", "0", "new"],
        None,
    ));
    let out = ok(&rill(
        &target,
        &["consume", "s/t", "--partition", "0", "--from", "offset:21"],
        None,
    ));
    assert_eq!(out.trim(), "new");
    // Every partition, without the flag: a reopen; healthy partitions stay healthy.
    let repaired = ok(&rill(&target, &["topic", "repair", "s/t"], None));
    assert!(repaired.contains("failure\t0\t\n"), "{repaired}");
    assert!(repaired.contains("failure\t1\t\n"), "{repaired}");
    let missing = rill(
        &target,
        &["topic", "repair", "s/t", "--partition", "9"],
        None,
    );
    assert_eq!(missing.status.code(), Some(1));
}

#[test]
fn a_damaged_partition_over_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    damaged_partition_is_described_read_past_and_repaired(&data, &|| {
        let server = ServerProcess::start(&data);
        (vec!["--server".into(), server.url()], Some(server))
    });
}

#[test]
fn a_damaged_partition_in_an_embedded_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let target = vec!["--data".to_string(), data.display().to_string()];
    damaged_partition_is_described_read_past_and_repaired(&data, &|| (target.clone(), None));
}
