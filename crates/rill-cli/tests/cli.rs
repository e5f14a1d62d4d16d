//! The `rill` command line as scripts use it: the real binary, over a server and over
//! an embedded data directory.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::{ServerProcess, rill_bin};

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

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
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
    let out = rill(
        &["--server".into(), "http://x".into()],
        &["stream", "list"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
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
    let metrics = http_get(&server.http, "/metrics");
    assert!(
        metrics.contains("rill_group_lag{stream=\"s\",topic=\"t\",group=\"g\",partition=\"0\"} 1"),
        "{metrics}"
    );
    // /health answers while serving.
    let health = std::net::TcpStream::connect(&server.http).map(|mut s| {
        use std::io::Read;
        s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
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

fn http_get(addr: &str, path: &str) -> String {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .unwrap();
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}
