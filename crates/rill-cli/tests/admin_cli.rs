//! The admin commands as scripts use them, over a server and over a data directory:
//! `--output json` on every family (one JSON object on stdout, the shapes of
//! docs/CLI.md), usage errors for options that cannot mean anything, and the shell
//! completion scripts.

mod common;

use std::process::Output;

use serde_json::Value;

use common::{ServerProcess, rill_in};

/// Where the commands go: a server's URL or a data directory.
enum Target {
    Server(String),
    Data(String),
}

impl Target {
    fn run(&self, args: &[&str], input: &str) -> Output {
        let mut all: Vec<&str> = match self {
            Self::Server(url) => vec!["--server", url.as_str()],
            Self::Data(dir) => vec!["--data", dir.as_str()],
        };
        all.extend_from_slice(args);
        rill_in(&all, &[], input)
    }

    /// Runs a command that must succeed and print one JSON object.
    fn json(&self, args: &[&str]) -> Value {
        let out = self.run(args, "");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(text.lines().count(), 1, "{args:?}: one line: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
    }
}

fn both(check: impl Fn(&Target)) {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(&dir.path().join("served"));
    check(&Target::Server(server.url()));
    let data = dir.path().join("embedded");
    check(&Target::Data(data.to_str().unwrap().to_owned()));
}

#[test]
fn every_admin_family_prints_one_json_object_with_output_json() {
    both(|t| {
        let created = t.json(&["stream", "create", "shop", "--output", "json"]);
        assert_eq!(
            created,
            serde_json::json!({"stream": "shop", "created": true})
        );
        let again = t.json(&["stream", "create", "shop", "--output", "json"]);
        assert_eq!(again["created"], false);

        let topic = t.json(&[
            "topic",
            "create",
            "shop/orders",
            "--partitions",
            "2",
            "--retention",
            "1h",
            "--durability",
            "never",
            "--output",
            "json",
        ]);
        assert_eq!(topic["topic"], "shop/orders");
        assert_eq!(topic["options"]["partitions"], 2);
        assert_eq!(topic["options"]["retention_ms"], 3_600_000);
        assert_eq!(topic["options"]["retention_bytes"], Value::Null);
        assert_eq!(topic["options"]["durability"], "never");

        let out = t.run(&["produce", "shop/orders", "--partition", "1"], "a\nb\nc\n");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );

        // The flag may come before the subcommand's arguments too.
        let listed = t.json(&["topic", "--output", "json", "list"]);
        let topics = listed["topics"].as_array().unwrap();
        assert_eq!(topics.len(), 1, "{listed}");
        assert_eq!(topics[0]["stream"], "shop");
        assert_eq!(topics[0]["topic"], "orders");

        let d = t.json(&["topic", "describe", "shop/orders", "--output", "json"]);
        let parts = d["partitions"].as_array().unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1]["first_offset"], 0);
        assert_eq!(parts[1]["next_offset"], 3);
        assert_eq!(parts[1]["failure"], Value::Null);
        assert!(parts[1]["bytes"].as_u64().unwrap() > 0);
        assert_eq!(d["options"]["durability"], "never");

        // A group that stored its offsets after reading everything: no lag.
        let out = t.run(&["consume", "shop/orders", "--group", "audit"], "");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let g = t.json(&[
            "group",
            "describe",
            "shop/orders",
            "audit",
            "--output",
            "json",
        ]);
        assert_eq!(g["group"], "audit");
        assert_eq!(g["lag"], 0, "{g}");
        assert_eq!(g["members"], serde_json::json!([]), "the member left: {g}");
        let stored: Vec<&Value> = g["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| &p["stored_offset"])
            .collect();
        assert_eq!(stored[1], &serde_json::json!(3), "{g}");

        let streams = t.json(&["stream", "list", "--output", "json"]);
        assert_eq!(
            streams,
            serde_json::json!({"streams": [{"name": "shop", "topics": 1}]})
        );
        let repaired = t.json(&["topic", "repair", "shop/orders", "--output", "json"]);
        assert_eq!(repaired["partitions"].as_array().unwrap().len(), 2);
        let deleted = t.json(&["topic", "delete", "shop/orders", "--output", "json"]);
        assert_eq!(
            deleted,
            serde_json::json!({"topic": "shop/orders", "deleted": true})
        );
        let deleted = t.json(&["stream", "delete", "shop", "--output", "json"]);
        assert_eq!(deleted["deleted"], true);
    });
}

#[test]
fn zero_partitions_is_a_usage_error_and_an_unknown_output_too() {
    both(|t| {
        let out = t.run(&["topic", "create", "s/t", "--partitions", "0"], "");
        assert_eq!(out.status.code(), Some(2), "usage error");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--partitions"), "{err}");
        let out = t.run(&["topic", "list"], "");
        assert!(
            String::from_utf8_lossy(&out.stdout).trim().is_empty(),
            "nothing was created"
        );
        let out = t.run(&["topic", "list", "--output", "yaml"], "");
        assert_eq!(out.status.code(), Some(2));
    });
}

#[test]
fn completion_scripts_name_the_commands() {
    for (shell, marker) in [
        ("bash", "_rill()"),
        ("zsh", "#compdef rill"),
        ("fish", "complete -c rill"),
    ] {
        let out = rill_in(&["completions", shell], &[], "");
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: {marker}");
        for command in ["consume", "produce", "topic", "group"] {
            assert!(script.contains(command), "{shell} completes {command}");
        }
    }
    let out = rill_in(&["completions", "tcsh"], &[], "");
    assert_eq!(out.status.code(), Some(2));
}

fn ok(t: &Target, args: &[&str], input: &str) -> String {
    let out = t.run(args, input);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs a command that must fail at run time (exit 1); returns its stderr.
fn fails(t: &Target, args: &[&str]) -> String {
    fails_with(t, args, 1)
}

/// Runs a command that must exit with `code`; returns its stderr.
fn fails_with(t: &Target, args: &[&str], code: i32) -> String {
    let out = t.run(args, "");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    err
}

#[test]
fn groups_and_named_consumers_are_listed_reset_and_deleted() {
    both(|t| {
        ok(t, &["topic", "create", "s/t", "--partitions", "2"], "");
        ok(t, &["produce", "s/t", "--partition", "0"], "a\nb\nc\nd\n");
        ok(t, &["produce", "s/t", "--partition", "1"], "e\nf\n");
        ok(t, &["consume", "s/t", "--group", "g"], "");
        ok(
            t,
            &[
                "consume",
                "s/t",
                "--name",
                "n",
                "--partition",
                "0",
                "--count",
                "3",
            ],
            "",
        );

        let groups = t.json(&["group", "list", "s/t", "--output", "json"]);
        assert_eq!(
            groups["groups"],
            serde_json::json!([{"group": "g", "members": 0, "generation": groups["groups"][0]["generation"], "lag": 0}])
        );
        let text = ok(t, &["group", "list", "s/t"], "");
        assert_eq!(text.lines().next(), Some("group\tmembers\tgeneration\tlag"));
        assert!(text.lines().nth(1).unwrap().starts_with("g\t0\t"), "{text}");

        let first = t.json(&[
            "group", "reset", "s/t", "g", "--to", "first", "--output", "json",
        ]);
        assert_eq!(
            first["offsets"],
            serde_json::json!([{"partition": 0, "next_offset": 0}, {"partition": 1, "next_offset": 0}])
        );
        let lag = t.json(&["group", "list", "s/t", "--output", "json"]);
        assert_eq!(lag["groups"][0]["lag"], 6);
        let one = ok(
            t,
            &[
                "group",
                "reset",
                "s/t",
                "g",
                "--to",
                "offset:3",
                "--partition",
                "0",
            ],
            "",
        );
        assert_eq!(one, "partition\tnext_offset\n0\t3\n");
        let err = fails(t, &["group", "reset", "s/t", "g", "--to", "offset:99"]);
        assert!(err.contains("partition"), "names the partition: {err}");
        let g = t.json(&["group", "describe", "s/t", "g", "--output", "json"]);
        assert_eq!(
            g["partitions"][0]["stored_offset"], 3,
            "nothing changed: {g}"
        );
        let end = t.json(&[
            "group", "reset", "s/t", "g", "--to", "last", "--output", "json",
        ]);
        assert_eq!(end["offsets"][0]["next_offset"], 4);
        assert_eq!(end["offsets"][1]["next_offset"], 2);
        let out = t.run(&["group", "reset", "s/t", "g", "--to", "yesterday"], "");
        assert_eq!(out.status.code(), Some(2), "a bad --to is a usage error");

        let consumers = t.json(&["consumer", "list", "s/t", "--output", "json"]);
        assert_eq!(consumers["consumers"][0]["consumer"], "n");
        assert_eq!(
            consumers["consumers"][0]["partitions"],
            serde_json::json!([{"partition": 0, "next_offset": 3, "log_end": 4, "lag": 1}])
        );
        let reset = t.json(&[
            "consumer",
            "reset",
            "s/t",
            "n",
            "--to",
            "first",
            "--partition",
            "0",
            "--output",
            "json",
        ]);
        assert_eq!(
            reset["offsets"],
            serde_json::json!([{"partition": 0, "next_offset": 0}])
        );
        let again = t.json(&["consumer", "list", "s/t", "--output", "json"]);
        assert_eq!(again["consumers"][0]["lag"], 4);

        let deleted = t.json(&["group", "delete", "s/t", "g", "--output", "json"]);
        assert_eq!(deleted["offsets_deleted"], 2);
        let none = t.json(&["group", "list", "s/t", "--output", "json"]);
        assert_eq!(none["groups"], serde_json::json!([]));
        fails(t, &["group", "delete", "s/t", "g"]);
    });
}

#[test]
fn a_group_with_live_members_is_neither_reset_nor_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path());
    let t = Target::Server(server.url());
    ok(&t, &["topic", "create", "s/t"], "");
    ok(&t, &["produce", "s/t"], "a\n");
    let mut member = std::process::Command::new(common::rill_bin())
        .args(["consume", "s/t", "--group", "live", "--follow", "--server"])
        .arg(server.url())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The member printed the record: it has joined.
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(member.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "a\n");
    for args in [
        &["group", "reset", "s/t", "live", "--to", "first"][..],
        &["group", "delete", "s/t", "live"][..],
    ] {
        let err = fails(&t, args);
        assert!(err.contains("member"), "says why: {err}");
    }
    member.kill().unwrap();
    member.wait().unwrap();
}

#[test]
fn topics_are_altered_while_they_serve() {
    both(|t| {
        ok(
            t,
            &[
                "topic",
                "create",
                "s/t",
                "--partitions",
                "2",
                "--durability",
                "always",
            ],
            "",
        );
        ok(t, &["produce", "s/t", "--partition", "1"], "a\n");
        let out = t.run(
            &[
                "topic",
                "alter",
                "s/t",
                "--retention",
                "1h",
                "--durability",
                "never",
                "--partitions",
                "3",
                "--output",
                "json",
            ],
            "",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let warning = String::from_utf8_lossy(&out.stderr);
        assert!(warning.contains("keyed records"), "{warning}");
        let altered: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(altered["options"]["partitions"], 3);
        assert_eq!(altered["options"]["retention_ms"], 3_600_000);
        assert_eq!(altered["options"]["durability"], "never");
        let d = t.json(&["topic", "describe", "s/t", "--output", "json"]);
        assert_eq!(d["options"], altered["options"], "kept");
        assert_eq!(d["partitions"][1]["next_offset"], 1, "the records stay");
        ok(t, &["produce", "s/t", "--partition", "2"], "b\n");

        let cleared = t.json(&[
            "topic",
            "alter",
            "s/t",
            "--retention",
            "none",
            "--output",
            "json",
        ]);
        assert_eq!(cleared["options"]["retention_ms"], Value::Null);
        assert_eq!(cleared["options"]["partitions"], 3);
        let err = fails(t, &["topic", "alter", "s/t", "--partitions", "2"]);
        assert!(err.contains("partition"), "{err}");
        let err = fails(t, &["topic", "alter", "s/t"]);
        assert!(err.contains("nothing to change"), "{err}");
        let out = t.run(&["topic", "alter", "s/t", "--retention-bytes", "0"], "");
        assert_eq!(out.status.code(), Some(2));
    });
}

#[test]
fn top_shows_topics_with_their_rates_and_groups_with_their_lag() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path());
    let t = Target::Server(server.url());
    ok(&t, &["topic", "create", "s/t", "--partitions", "2"], "");
    ok(&t, &["produce", "s/t", "--partition", "0"], "a\nb\nc\n");
    ok(&t, &["consume", "s/t", "--group", "g", "--count", "1"], "");
    // Records arrive while top looks: its second view has a rate above zero.
    let url = server.url();
    let producer = std::thread::spawn(move || {
        let t = Target::Server(url);
        for _ in 0..20 {
            ok(&t, &["produce", "s/t", "--partition", "1"], "x\ny\n");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    });
    let view = ok(&t, &["top", "--interval", "400ms", "--iterations", "2"], "");
    producer.join().unwrap();
    let blocks: Vec<&str> = view.split("rill top ").filter(|b| !b.is_empty()).collect();
    assert_eq!(blocks.len(), 2, "two views, one per interval: {view}");
    let row = |block: &str, first: &str| -> Vec<String> {
        block
            .lines()
            .find(|l| l.split_whitespace().next() == Some(first))
            .unwrap_or_else(|| panic!("no row {first}: {block}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    for block in &blocks {
        let topic = row(block, "s/t");
        assert_eq!(topic[1], "2", "partitions: {block}");
        let group = row(block, "g");
        assert_eq!(group[1], "s/t");
        assert_eq!(group[2], "0", "no live member");
        let lag: u64 = group[3].parse().unwrap();
        assert!(lag >= 2, "the group stored one of three: {block}");
    }
    let rates: Vec<u64> = blocks
        .iter()
        .map(|b| row(b, "s/t")[3].parse().unwrap())
        .collect();
    assert!(rates.iter().any(|&r| r > 0), "records came in: {view}");
    let out = t.run(&["top", "--interval", "10ms"], "");
    assert_eq!(out.status.code(), Some(2), "too short an interval");
}

#[test]
fn purge_deletes_exactly_the_records_before_the_point() {
    both(|t| {
        ok(t, &["topic", "create", "s/t", "--partitions", "2"], "");
        ok(
            t,
            &["produce", "s/t", "--partition", "0"],
            "a\nb\nc\nd\ne\n",
        );
        ok(t, &["produce", "s/t", "--partition", "1"], "f\ng\nh\n");
        let text = ok(
            t,
            &[
                "topic",
                "purge",
                "s/t",
                "--before",
                "offset:3",
                "--partition",
                "0",
            ],
            "",
        );
        assert_eq!(text, "partition\tfirst_offset\n0\t3\n");
        let read = ok(t, &["consume", "s/t", "--partition", "0"], "");
        assert_eq!(read, "d\ne\n", "the first record left is the one at 3");
        let err = fails(t, &["topic", "purge", "s/t", "--before", "offset:99"]);
        assert!(err.contains("partition"), "names the partition: {err}");
        let old = t.json(&[
            "topic",
            "purge",
            "s/t",
            "--before",
            "time:2000-01-01T00:00:00Z",
            "--output",
            "json",
        ]);
        assert_eq!(
            old["partitions"],
            serde_json::json!([{"partition": 0, "first_offset": 3}, {"partition": 1, "first_offset": 0}]),
            "nothing is older than 2000"
        );
        let all = t.json(&["topic", "purge", "s/t", "--output", "json"]);
        assert_eq!(
            all["partitions"],
            serde_json::json!([{"partition": 0, "first_offset": 5}, {"partition": 1, "first_offset": 3}]),
            "the default is every record"
        );
        let d = t.json(&["topic", "describe", "s/t", "--output", "json"]);
        for p in d["partitions"].as_array().unwrap() {
            assert_eq!(p["first_offset"], p["next_offset"], "{d}");
        }
        assert_eq!(ok(t, &["consume", "s/t"], ""), "", "nothing left to read");
        ok(t, &["produce", "s/t", "--partition", "1"], "i\n");
        assert_eq!(
            ok(t, &["consume", "s/t"], ""),
            "i\n",
            "appends go on after the purge"
        );
        let out = t.run(&["topic", "purge", "s/t", "--before", "yesterday"], "");
        assert_eq!(out.status.code(), Some(2));
    });
}

/// A data directory holding elastic topic s/t: two ranges, the first split.
fn elastic_topic(dir: &std::path::Path) {
    let broker = rill_broker::Broker::open(rill_broker::BrokerConfig::new(dir)).unwrap();
    broker
        .create_topic(
            "s",
            "t",
            &rill_proto::pb::TopicOptions {
                partitions: 2,
                elastic: true,
                ..Default::default()
            },
            false,
            true,
        )
        .unwrap();
    broker.split_range("s", "t", Some(0), None).unwrap();
    broker.shutdown().unwrap();
}

#[test]
fn describe_shows_an_elastic_topics_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let (served, embedded) = (dir.path().join("served"), dir.path().join("embedded"));
    elastic_topic(&served);
    elastic_topic(&embedded);
    let server = ServerProcess::start(&served);
    for t in [
        Target::Server(server.url()),
        Target::Data(embedded.to_str().unwrap().to_owned()),
    ] {
        let text = ok(&t, &["topic", "describe", "s/t"], "");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.contains(&"elastic\ttrue"), "{text}");
        assert!(lines.contains(&"range_epoch\t1"), "{text}");
        assert_eq!(
            range_lines(&t, "s/t"),
            [
                "range\t0\t0x0000000000000000\t0x7fffffffffffffff\tsealed:0\t-",
                "range\t1\t0x8000000000000000\t0xffffffffffffffff\topen\t-",
                "range\t2\t0x0000000000000000\t0x3fffffffffffffff\topen\t0",
                "range\t3\t0x4000000000000000\t0x7fffffffffffffff\topen\t0",
            ],
            "{text}"
        );
        // The partition table has a row per range.
        assert!(lines.iter().any(|l| l.starts_with("3\t")), "{text}");
        let d = t.json(&["topic", "describe", "s/t", "--output", "json"]);
        assert_eq!(d["elastic"], true);
        assert_eq!(d["range_epoch"], 1);
        assert_eq!(d["ranges"][0]["sealed_at"], 0);
        assert_eq!(d["ranges"][3]["parents"], serde_json::json!([0]));
        assert_eq!(d["ranges"][1]["sealed_at"], Value::Null);
        assert_eq!(d["ranges"][0]["bytes_per_s"], Value::Null, "{d}");
        if let Target::Server(_) = t {
            // The server samples each range once a second: records written after it
            // has watched the topic for a second show as a rate of the range that
            // took them, and of no other.
            std::thread::sleep(std::time::Duration::from_millis(1200));
            let lines: String = (0..200)
                .map(|i| format!("{i}:{}\n", "x".repeat(200)))
                .collect();
            ok(&t, &["produce", "s/t", "--key-sep", ":"], &lines);
            std::thread::sleep(std::time::Duration::from_millis(2200));
            let d = t.json(&["topic", "describe", "s/t", "--output", "json"]);
            let rate = |i: usize| d["ranges"][i]["bytes_per_s"].as_u64();
            assert!(
                rate(1).is_some_and(|r| r > 0) || rate(2).is_some_and(|r| r > 0),
                "{d}"
            );
            assert_eq!(rate(0), None, "a sealed range has no rate: {d}");
            let text = ok(&t, &["topic", "describe", "s/t"], "");
            assert!(
                text.lines()
                    .filter(|l| l.starts_with("range\t") && l.contains("\topen\t"))
                    .any(|l| l
                        .rsplit('\t')
                        .next()
                        .unwrap()
                        .parse::<u64>()
                        .is_ok_and(|r| r > 0)),
                "{text}"
            );
        }
        // A plain topic shows none of it.
        ok(&t, &["topic", "create", "s/plain"], "");
        let text = ok(&t, &["topic", "describe", "s/plain"], "");
        assert!(
            !text.contains("elastic") && !text.contains("range"),
            "{text}"
        );
        let d = t.json(&["topic", "describe", "s/plain", "--output", "json"]);
        assert!(
            d.get("ranges").is_none() && d.get("elastic").is_none(),
            "{d}"
        );
    }
}

/// The `range` lines of `topic describe`, without their rate (it depends on when the
/// server last sampled): checked to be `-` for a sealed range, `-` or a number for an
/// open one.
fn range_lines(t: &Target, topic: &str) -> Vec<String> {
    ok(t, &["topic", "describe", topic], "")
        .lines()
        .filter(|l| l.starts_with("range\t"))
        .map(|l| {
            let (line, rate) = l.rsplit_once('\t').unwrap();
            if line.contains("sealed:") {
                assert_eq!(rate, "-", "{l}");
            } else {
                assert!(rate == "-" || rate.parse::<u64>().is_ok(), "{l}");
            }
            line.to_owned()
        })
        .collect()
}

#[test]
fn elastic_topics_are_created_split_and_merged_from_the_cli() {
    both(|t| {
        let created = ok(
            t,
            &["topic", "create", "s/e", "--elastic", "--ranges", "2"],
            "",
        );
        assert_eq!(created, "s/e\t2 ranges\telastic\n");
        // Again with the same options: fine. As a plain topic: refused, saying why.
        ok(
            t,
            &["topic", "create", "s/e", "--elastic", "--ranges", "2"],
            "",
        );
        let err = fails(t, &["topic", "create", "s/e", "--partitions", "2"]);
        assert!(err.contains("elastic"), "{err}");
        let split = ok(t, &["topic", "split", "s/e", "--range", "0"], "");
        assert_eq!(
            split,
            "sealed\t0\t0\nopened\t2\nopened\t3\nrange_epoch\t1\n"
        );
        let err = fails(t, &["topic", "merge", "s/e", "--ranges", "2,1"]);
        assert!(err.contains("adjacent"), "{err}");
        let split = ok(
            t,
            &[
                "topic",
                "split",
                "s/e",
                "--range",
                "3",
                "--at",
                "0x6000000000000000",
            ],
            "",
        );
        assert_eq!(
            split,
            "sealed\t3\t0\nopened\t4\nopened\t5\nrange_epoch\t2\n"
        );
        let merged = ok(t, &["topic", "merge", "s/e", "--ranges", "5,4"], "");
        assert_eq!(
            merged,
            "sealed\t4\t0\nsealed\t5\t0\nopened\t6\nrange_epoch\t3\n"
        );
        let merged = t.json(&[
            "topic", "merge", "s/e", "--ranges", "6,1", "--output", "json",
        ]);
        assert_eq!(
            merged,
            serde_json::json!({
                "topic": "s/e",
                "sealed": [{"range": 1, "sealed_at": 0}, {"range": 6, "sealed_at": 0}],
                "opened": [7],
                "range_epoch": 4,
            })
        );
        assert_eq!(
            range_lines(t, "s/e"),
            [
                "range\t0\t0x0000000000000000\t0x7fffffffffffffff\tsealed:0\t-",
                "range\t1\t0x8000000000000000\t0xffffffffffffffff\tsealed:0\t-",
                "range\t2\t0x0000000000000000\t0x3fffffffffffffff\topen\t0",
                "range\t3\t0x4000000000000000\t0x7fffffffffffffff\tsealed:0\t0",
                "range\t4\t0x4000000000000000\t0x5fffffffffffffff\tsealed:0\t3",
                "range\t5\t0x6000000000000000\t0x7fffffffffffffff\tsealed:0\t3",
                "range\t6\t0x4000000000000000\t0x7fffffffffffffff\tsealed:0\t4,5",
                "range\t7\t0x4000000000000000\t0xffffffffffffffff\topen\t1,6",
            ]
        );
        // Refusals name what is wrong; nothing changes.
        for (args, says) in [
            (&["topic", "split", "s/e", "--range", "0"][..], "sealed"),
            (&["topic", "split", "s/e", "--range", "99"][..], "99"),
            (
                &["topic", "split", "s/e", "--range", "2", "--at", "0"][..],
                "0",
            ),
        ] {
            let err = fails(t, args);
            assert!(err.contains(says), "{args:?}: {err}");
        }
        // Produce and consume go by the ranges: keyed lines land in the open ranges
        // covering their keys, a split without --range takes the busiest, and a reader
        // reads every record once.
        let lines: String = (0..40).map(|i| format!("k{}:v{i}\n", i % 7)).collect();
        ok(t, &["produce", "s/e", "--key-sep", ":"], &lines);
        let split = ok(t, &["topic", "split", "s/e"], "");
        assert!(split.starts_with("sealed\t"), "{split}");
        assert!(split.contains("opened\t8\nopened\t9\n"), "{split}");
        ok(t, &["produce", "s/e", "--key-sep", ":"], &lines);
        // Each key's records in the order produced: both runs, one after the other.
        let in_key_order = |read: &str, what: &str| {
            for key in 0..7 {
                let got: Vec<&str> = read
                    .lines()
                    .filter(|v| v[1..].parse::<u32>().unwrap() % 7 == key)
                    .collect();
                let once: Vec<String> = (0..40)
                    .filter(|i| i % 7 == key)
                    .map(|i| format!("v{i}"))
                    .collect();
                let twice: Vec<&str> = once.iter().chain(&once).map(String::as_str).collect();
                assert_eq!(got, twice, "{what}: key k{key}");
            }
        };
        in_key_order(&ok(t, &["consume", "s/e"], ""), "a reader");
        // A named consumer and a group read every range, parents first, and store
        // per range: a second run reads nothing.
        in_key_order(&ok(t, &["consume", "s/e", "--name", "n"], ""), "--name");
        assert_eq!(ok(t, &["consume", "s/e", "--name", "n"], ""), "");
        in_key_order(&ok(t, &["consume", "s/e", "--group", "g"], ""), "--group");
        assert_eq!(ok(t, &["consume", "s/e", "--group", "g"], ""), "");
        // Offsets and partitions name places in one range: refused as usage errors.
        for args in [
            &["consume", "s/e", "--name", "n", "--partition", "1"][..],
            &["consume", "s/e", "--group", "g", "--from", "offset:3"][..],
            &["consume", "s/e", "--name", "n", "--until", "offset:3"][..],
        ] {
            let err = fails_with(t, args, 2);
            assert!(err.contains("elastic topic"), "{args:?}: {err}");
        }
        // The automatic policy: shown with its window and cooldown, turned off by alter.
        ok(
            t,
            &[
                "topic",
                "create",
                "s/auto",
                "--elastic",
                "--auto-split",
                "1000",
                "--auto-split-window",
                "2s",
            ],
            "",
        );
        let lines = |topic: &str| -> Vec<String> {
            ok(t, &["topic", "describe", topic], "")
                .lines()
                .filter(|l| l.starts_with("auto_split"))
                .map(str::to_owned)
                .collect()
        };
        assert_eq!(
            lines("s/auto"),
            [
                "auto_split\t1000",
                "auto_split_window\t2s",
                "auto_split_cooldown\t5m"
            ]
        );
        let d = t.json(&["topic", "describe", "s/auto", "--output", "json"]);
        assert_eq!(
            d["options"]["auto_split"],
            serde_json::json!({"bytes_per_s": 1000, "window_ms": 2000, "cooldown_ms": 300000})
        );
        ok(t, &["topic", "alter", "s/auto", "--auto-split", "none"], "");
        assert_eq!(lines("s/auto"), ["auto_split\tnone"]);
        ok(t, &["topic", "alter", "s/auto", "--auto-split", "5000"], "");
        assert_eq!(lines("s/auto")[0], "auto_split\t5000");
        ok(t, &["topic", "create", "s/plain"], "");
        let err = fails(t, &["topic", "alter", "s/plain", "--auto-split", "5000"]);
        assert!(err.contains("elastic"), "{err}");
        let err = fails(t, &["topic", "split", "s/plain"]);
        assert!(err.contains("not an elastic topic"), "{err}");
        assert_eq!(range_lines(t, "s/e").len(), 10);
        // Usage errors: a hash that is not one, one range to merge, --ranges alone.
        for args in [
            &["topic", "split", "s/e", "--at", "0xg"][..],
            &["topic", "merge", "s/e", "--ranges", "2"][..],
            &["topic", "merge", "s/e", "--ranges", "2,2"][..],
            &["topic", "create", "s/x", "--ranges", "2"][..],
            &["topic", "create", "s/x", "--auto-split", "10"][..],
            &[
                "topic",
                "create",
                "s/x",
                "--elastic",
                "--auto-split-window",
                "2s",
            ][..],
            &["topic", "create", "s/x", "--elastic", "--auto-split", "0"][..],
            &[
                "topic",
                "create",
                "s/x",
                "--elastic",
                "--ranges",
                "2",
                "--partitions",
                "2",
            ][..],
        ] {
            let out = t.run(args, "");
            assert_eq!(out.status.code(), Some(2), "{args:?}");
        }
    });
}
