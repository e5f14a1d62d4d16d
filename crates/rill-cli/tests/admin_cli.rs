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
