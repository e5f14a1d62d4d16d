//! The `rill` command line as a new user meets it: the real binary, over a server and
//! over a data directory. Produce streams its input (lines, delimited bytes, JSON) and
//! spreads unkeyed records; consume starts and stops where asked, prints every format,
//! says when `--from` does not apply, and ends quietly on a closed stdout; a server's
//! errors read without code names or debug text. (Errors before any command runs, and
//! `serve`'s start: `cli_first_errors.rs`.)
//!
//! `RILL_CLI_UNDER_TEST=/path/to/rill` runs the tests against another build (to see
//! that they fail without the changes they test).

mod common;

use common::{ServerProcess, ok, runtime_error, stderr, usage_error};

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn bin() -> String {
    std::env::var("RILL_CLI_UNDER_TEST").unwrap_or_else(|_| common::rill_bin().to_owned())
}

/// Where commands go: a server, or a data directory.
struct Target {
    args: Vec<String>,
    server: bool,
    _server: Option<ServerProcess>,
    _dir: tempfile::TempDir,
}

impl Target {
    fn server() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let server = ServerProcess::start(&dir.path().join("data"));
        Self {
            args: vec!["--server".into(), server.url()],
            server: true,
            _server: Some(server),
            _dir: dir,
        }
    }

    fn data() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data").display().to_string();
        Self {
            args: vec!["--data".into(), data],
            server: false,
            _server: None,
            _dir: dir,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.args(&self.args)
            .args(args)
            .env_remove("RILL_SERVER")
            .env_remove("RILL_LOG")
            .env_remove("RILL_USER")
            .env_remove("RILL_PASSWORD")
            .env_remove("RILL_TOKEN");
        c
    }

    /// Runs `rill ARGS` with `input` on stdin.
    fn run(&self, args: &[&str], input: &[u8]) -> Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let input = input.to_vec();
        // Fed from a thread, so a command that writes a lot before reading all of its
        // input cannot block on a full pipe.
        let feeder = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let out = child.wait_with_output().unwrap();
        feeder.join().unwrap();
        out
    }

    /// Runs `rill ARGS` and returns its stdout, asserting success.
    fn ok(&self, args: &[&str]) -> String {
        ok(&self.run(args, b""))
    }

    fn ok_in(&self, args: &[&str], input: &[u8]) -> String {
        ok(&self.run(args, input))
    }

    /// The records of `topic` as `consume --format json` prints them.
    fn records(&self, topic: &str, extra: &[&str]) -> Vec<Value> {
        let mut args = vec!["consume", topic, "--format", "json"];
        args.extend_from_slice(extra);
        self.ok(&args)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}

fn values(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| r["value"].as_str().unwrap().to_owned())
        .collect()
}

/// The one line produce prints at the end, and nothing else (no progress: stderr is
/// not a terminal).
fn assert_summary_only(out: &Output, records: u64) {
    let err = stderr(out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    let prefix = format!("{records} records sent in ");
    assert!(
        lines[0].starts_with(&prefix) && lines[0].ends_with(" records/s)"),
        "{err}"
    );
}

/// Runs each scenario twice: over a server (`server::NAME`) and over a data directory
/// (`data::NAME`).
macro_rules! over_both_targets {
    ($($name:ident),* $(,)?) => {
        mod server {
            $(#[test] fn $name() { super::$name(&super::Target::server()); })*
        }
        mod data {
            $(#[test] fn $name() { super::$name(&super::Target::data()); })*
        }
    };
}

over_both_targets!(
    produce_sends_records_as_they_arrive,
    unkeyed_records_are_spread_over_partitions,
    delimited_input_is_taken_byte_for_byte,
    json_lines_copy_records_faithfully,
    from_end_reads_only_new_records,
    from_says_where_a_group_does_not_apply_it,
    formats_templates_and_until,
    a_closed_stdout_ends_quietly,
    server_errors_read_as_sentences,
);

/// `tail -f app.log | rill produce …`: a line goes out while the input stays open.
fn produce_sends_records_as_they_arrive(t: &Target) {
    t.ok(&["topic", "create", "s/t"]);
    let mut producer = t
        .command(&["produce", "s/t"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = producer.stdin.take().unwrap();
    input.write_all(b"first\n").unwrap();
    input.flush().unwrap();
    // A data directory is one process's at a time: only a server can be read meanwhile.
    if t.server {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let read = t.ok(&["consume", "s/t"]);
            if read == "first\n" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the first line was not sent while the input stayed open: {read:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(producer.try_wait().unwrap().is_none(), "still reading");
    }
    input.write_all(b"second\r\n").unwrap();
    drop(input);
    let out = producer.wait_with_output().unwrap();
    ok(&out);
    assert_summary_only(&out, 2);
    assert_eq!(t.ok(&["consume", "s/t"]), "first\nsecond\n");
}

/// Unkeyed records go round-robin over the partitions, one by one; keyed ones to their
/// key's partition, in order.
fn unkeyed_records_are_spread_over_partitions(t: &Target) {
    t.ok(&["topic", "create", "s/t", "--partitions", "3"]);
    t.ok_in(&["produce", "s/t"], b"a\nb\nc\nd\ne\nf\n");
    let mut per_partition = [0; 3];
    for r in t.records("s/t", &[]) {
        per_partition[r["partition"].as_u64().unwrap() as usize] += 1;
    }
    assert_eq!(per_partition, [2, 2, 2]);

    t.ok(&["topic", "create", "s/k", "--partitions", "3"]);
    t.ok_in(&["produce", "s/k", "--key-sep", ":"], b"k:1\nk:2\nk:3\n");
    let records = t.records("s/k", &[]);
    assert_eq!(values(&records), ["1", "2", "3"]);
    assert!(
        records
            .iter()
            .all(|r| r["partition"] == records[0]["partition"])
    );
}

/// `--null` and `--delimiter` cut records at any bytes, and take them as they are.
fn delimited_input_is_taken_byte_for_byte(t: &Target) {
    t.ok(&["topic", "create", "s/t"]);
    let out = t.run(&["produce", "s/t", "--null"], b"one\0t\xffo\0");
    ok(&out);
    assert_summary_only(&out, 2);
    assert_eq!(
        t.ok(&["consume", "s/t", "--format", "hex"]),
        "6f6e65\n74ff6f\n"
    );
    t.ok_in(&["produce", "s/t", "--delimiter", "\\x1e"], b"x\r\ny\x1ez");
    let records = t.records("s/t", &["--from", "offset:2"]);
    assert_eq!(values(&records), ["x\r\ny", "z"]);
    let out = t.run(&["produce", "s/t", "--delimiter", ""], b"");
    usage_error(&out, "must not be empty");
    let out = t.run(&["produce", "s/t", "--null", "--format", "json"], b"");
    usage_error(&out, "--format json");
}

/// `consume --format json | produce --format json` copies keys, values and every typed
/// header; `headers` keeps its object shape beside the lossless `header_list`.
fn json_lines_copy_records_faithfully(t: &Target) {
    t.ok(&["topic", "create", "s/src"]);
    t.ok(&["topic", "create", "s/dst"]);
    let typed = serde_json::json!({
        "key_b64": "/wA=", "value_b64": "AAEC/w==",
        "header_list": [
            {"name": "s", "type": "str", "value": "text"},
            {"name": "b", "type": "bytes", "value": "AP8="},
            {"name": "t", "type": "bool", "value": true},
            {"name": "i8", "type": "i8", "value": -8},
            {"name": "i16", "type": "i16", "value": -16},
            {"name": "i32", "type": "i32", "value": -32},
            {"name": "i64", "type": "i64", "value": "-9223372036854775808"},
            {"name": "i128", "type": "i128", "value": "-170141183460469231731687303715884105728"},
            {"name": "u8", "type": "u8", "value": 255},
            {"name": "u16", "type": "u16", "value": 65535},
            {"name": "u32", "type": "u32", "value": 4294967295u32},
            {"name": "big", "type": "u64", "value": "18446744073709551615"},
            {"name": "u128", "type": "u128", "value": "340282366920938463463374607431768211455"},
            {"name": "f32", "type": "f32", "value": 0.1},
            {"name": "f64", "type": "f64", "value": "NaN"},
            {"name": "dup", "type": "str", "value": "first"},
            {"name": "dup", "type": "str", "value": "second"}
        ]
    });
    let input = format!(
        "{typed}\n{}\n\n{}\n",
        r#"{"key":"k","value":"v","headers":{"a":"x","n":7}}"#, r#"{"key":null,"value":"plain"}"#
    );
    let out = t.run(&["produce", "s/src", "--format", "json"], input.as_bytes());
    ok(&out);
    assert_summary_only(&out, 3);
    let source = t.records("s/src", &[]);
    assert_eq!(source.len(), 3);
    let first = &source[0];
    assert_eq!(first["key_b64"], "/wA=");
    assert_eq!(first["value_b64"], "AAEC/w==");
    // The object form, as scripts have always read it: the last of a repeated name.
    assert_eq!(first["headers"]["dup"], "second");
    assert_eq!(first["headers"]["big"], u64::MAX);
    let list = first["header_list"].as_array().unwrap();
    assert_eq!(list.len(), 17);
    assert_eq!(
        list[11],
        serde_json::json!({"name": "big", "type": "u64", "value": "18446744073709551615"})
    );
    assert_eq!(list[14]["value"], "NaN");
    assert_eq!(list[16]["value"], "second");
    assert_eq!(source[1]["header_list"][1]["type"], "i64");

    // The copy: one command's output is the other's input.
    let printed = t.ok(&["consume", "s/src", "--format", "json"]);
    let out = t.run(
        &["produce", "s/dst", "--format", "json"],
        printed.as_bytes(),
    );
    ok(&out);
    let copy = t.records("s/dst", &[]);
    assert_eq!(copy.len(), source.len());
    for (a, b) in source.iter().zip(&copy) {
        for field in [
            "key",
            "key_b64",
            "value",
            "value_b64",
            "headers",
            "header_list",
        ] {
            assert_eq!(a.get(field), b.get(field), "{field}: {a} vs {b}");
        }
    }

    // A bad line stops the command, naming it, after the lines before it were sent.
    let out = t.run(
        &["produce", "s/dst", "--format", "json"],
        b"{\"value\":\"ok\"}\nnot json\n{\"value\":\"never\"}\n",
    );
    let err = runtime_error(&out, "line 2");
    assert!(err.contains("the 1 records before it were sent"), "{err}");
    let after = values(&t.records("s/dst", &["--from", "offset:3"]));
    assert_eq!(after, ["ok"]);
}

/// `--from end` reads only what comes after the start; `last` is still the last
/// record; `next` without a name is a usage error; `--count 0` too.
fn from_end_reads_only_new_records(t: &Target) {
    t.ok(&["topic", "create", "s/t", "--partitions", "2"]);
    t.ok_in(&["produce", "s/t"], b"a\nb\nc\nd\n");
    usage_error(
        &t.run(&["consume", "s/t", "--from", "next"], b""),
        "--from next needs --name or --group",
    );
    usage_error(&t.run(&["consume", "s/t", "--count", "0"], b""), "--count");
    assert_eq!(t.ok(&["consume", "s/t", "--from", "end"]), "");
    assert_eq!(
        t.ok(&["consume", "s/t", "--from", "last"]).lines().count(),
        2
    );

    // A group or a name that starts at the end keeps that place.
    assert_eq!(
        t.ok(&["consume", "s/t", "--group", "g", "--from", "end"]),
        ""
    );
    assert_eq!(
        t.ok(&["consume", "s/t", "--name", "n", "--from", "end"]),
        ""
    );
    t.ok(&["produce", "s/t", "new"]);
    assert_eq!(t.ok(&["consume", "s/t", "--group", "g"]), "new\n");
    assert_eq!(t.ok(&["consume", "s/t", "--name", "n"]), "new\n");

    if t.server {
        // A follower from the end: what it prints came after it started.
        let mut follower = t
            .command(&["consume", "s/t", "--from", "end", "--follow"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let stdout = follower.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(15);
        let first = loop {
            t.ok(&["produce", "s/t", "later"]);
            if let Ok(line) = rx.recv_timeout(Duration::from_millis(300)) {
                break line;
            }
            assert!(Instant::now() < deadline, "the follower printed nothing");
        };
        let _ = follower.kill();
        let _ = follower.wait();
        assert_eq!(first, "later");
    }
}

/// `--from` with `--group` applies where the group stored nothing: the command says so
/// where it does not, and `--replay` applies it everywhere.
fn from_says_where_a_group_does_not_apply_it(t: &Target) {
    t.ok(&["topic", "create", "s/t"]);
    t.ok_in(&["produce", "s/t"], b"a\nb\nc\n");
    assert_eq!(t.ok(&["consume", "s/t", "--group", "g"]), "a\nb\nc\n");
    let out = t.run(&["consume", "s/t", "--group", "g", "--from", "first"], b"");
    assert_eq!(ok(&out), "");
    let err = stderr(&out);
    assert!(
        err.contains("--from applies only to partitions without a stored offset of group g")
            && err.contains("--replay"),
        "{err}"
    );
    let out = t.run(
        &[
            "consume", "s/t", "--group", "g", "--from", "first", "--replay",
        ],
        b"",
    );
    assert_eq!(ok(&out), "a\nb\nc\n");
    assert_eq!(stderr(&out), "");
    usage_error(
        &t.run(&["consume", "s/t", "--from", "first", "--replay"], b""),
        "--replay goes with --group or --name",
    );
    // A named consumer honours an explicit --from, as documented.
    assert_eq!(t.ok(&["consume", "s/t", "--name", "n"]), "a\nb\nc\n");
    assert_eq!(
        t.ok(&["consume", "s/t", "--name", "n", "--from", "first"]),
        "a\nb\nc\n"
    );
}

/// `--format hex`, `--format template`, and `--until` (exclusive) for every reader.
fn formats_templates_and_until(t: &Target) {
    t.ok(&["topic", "create", "s/t"]);
    let batch = |range: std::ops::Range<u32>| -> String {
        range
            .map(|i| {
                format!(
                    "{{\"key\":\"k{i}\",\"value\":\"v{i}\",\"header_list\":[{{\"name\":\"h\",\"type\":\"u8\",\"value\":{i}}}]}}\n"
                )
            })
            .collect()
    };
    t.ok_in(
        &["produce", "s/t", "--format", "json"],
        batch(0..3).as_bytes(),
    );
    std::thread::sleep(Duration::from_millis(20));
    t.ok_in(
        &["produce", "s/t", "--format", "json"],
        batch(3..5).as_bytes(),
    );

    assert_eq!(
        t.ok(&["consume", "s/t", "--format", "hex", "--count", "2"]),
        "7630\n7631\n"
    );
    let out = t.run(&["consume", "s/t", "--count", "3"], b"");
    assert_eq!(ok(&out).lines().count(), 3);
    assert_eq!(stderr(&out), "", "no progress without a terminal");
    let lines = t.ok(&[
        "consume",
        "s/t",
        "--template",
        "{partition}/{offset} {key}={value} h={header.h}\\t{timestamp}",
    ]);
    let first = lines.lines().next().unwrap();
    let (text, time) = first.split_once('\t').unwrap();
    assert_eq!(text, "0/0 k0=v0 h=0");
    assert!(time.starts_with("20") && time.ends_with('Z'), "{time}");
    usage_error(
        &t.run(&["consume", "s/t", "--template", "{nope}"], b""),
        "unknown placeholder {nope}",
    );
    usage_error(
        &t.run(&["consume", "s/t", "--format", "template"], b""),
        "--template",
    );
    usage_error(
        &t.run(
            &["consume", "s/t", "--format", "json", "--template", "{key}"],
            b"",
        ),
        "--format template",
    );

    let read = |extra: &[&str]| values(&t.records("s/t", extra));
    assert_eq!(read(&["--until", "offset:2"]), ["v0", "v1"]);
    assert!(read(&["--until", "offset:0"]).is_empty());
    let all = t.records("s/t", &[]);
    let fourth = all[3]["timestamp_us"].as_u64().unwrap();
    assert!(fourth > all[2]["timestamp_us"].as_u64().unwrap());
    let at =
        humantime::format_rfc3339_micros(std::time::UNIX_EPOCH + Duration::from_micros(fourth));
    assert_eq!(
        read(&["--until", &format!("time:{at}")]),
        ["v0", "v1", "v2"]
    );
    usage_error(
        &t.run(&["consume", "s/t", "--until", "last"], b""),
        "offset:N",
    );
    // A group and a name store only what they printed: the next run goes on at the stop.
    assert_eq!(
        read(&["--group", "g", "--until", "offset:3"]),
        ["v0", "v1", "v2"]
    );
    assert_eq!(read(&["--group", "g"]), ["v3", "v4"]);
    assert_eq!(read(&["--name", "n", "--until", "offset:2"]), ["v0", "v1"]);
    assert_eq!(read(&["--name", "n"]), ["v2", "v3", "v4"]);
}

/// `rill consume … | head -1` and `rill stream list | head -0`: exit 0, nothing on
/// stderr.
fn a_closed_stdout_ends_quietly(t: &Target) {
    t.ok(&["topic", "create", "s/t"]);
    let lines: String = (0..20_000).map(|i| format!("record {i}\n")).collect();
    t.ok_in(&["produce", "s/t"], lines.as_bytes());
    let mut child = t
        .command(&["consume", "s/t"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first, "record 0\n");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");

    let child = t
        .command(&["stream", "list"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    closed_stdout(child);
}

/// Closes the child's stdout before it writes, then expects exit 0 and a quiet stderr.
fn closed_stdout(mut child: Child) {
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
}

/// The server's explanation, without the SDK's code names or Rust debug text.
fn server_errors_read_as_sentences(t: &Target) {
    t.ok(&["topic", "create", "s/t", "--retention", "7d"]);
    let out = t.run(&["topic", "create", "s/t", "--retention", "8d"], b"");
    let err = runtime_error(&out, "retention_ms is 604800000, not 691200000");
    assert!(
        !err.contains("Some(") && !err.contains("TopicExists"),
        "{err}"
    );
    let err = runtime_error(&t.run(&["consume", "s/missing"], b""), "does not exist");
    assert!(!err.contains("TopicNotFound"), "{err}");
    let err = runtime_error(
        &t.run(&["produce", "s/t", "--partition", "7", "x"], b""),
        "no partition 7",
    );
    assert!(!err.contains("PartitionNotFound"), "{err}");
}
