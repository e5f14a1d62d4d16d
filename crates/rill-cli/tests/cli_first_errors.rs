//! The `rill` command line as a new user meets it, before any command runs: a bad
//! server URL or environment variable named as such, a peer that is not a Rill server
//! named so, data directories that must exist, `serve` that logs one plain listening
//! line, lists only its own flags, runs on the worker threads it is told and leaves
//! nothing behind when it cannot start, and `bench` that shows no progress without a
//! terminal.
//!
//! `RILL_CLI_UNDER_TEST=/path/to/rill` runs the tests against another build (to see
//! that they fail without the changes they test).

mod common;

use common::{ok, runtime_error, stderr, usage_error};

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn bin() -> String {
    std::env::var("RILL_CLI_UNDER_TEST").unwrap_or_else(|_| common::rill_bin().to_owned())
}

#[test]
fn bad_server_urls_are_usage_errors_that_name_their_origin() {
    let run = |server: Option<&str>, env: Option<&str>| {
        let mut c = Command::new(bin());
        c.env_remove("RILL_SERVER");
        if let Some(s) = server {
            c.args(["--server", s]);
        }
        if let Some(e) = env {
            c.env("RILL_SERVER", e);
        }
        c.args(["stream", "list"]).output().unwrap()
    };
    usage_error(&run(Some("http://x"), None), "--server");
    usage_error(&run(Some("http://x"), None), "rill://");
    usage_error(&run(None, Some("zzz")), "RILL_SERVER");
    usage_error(&run(Some("rill:/127.0.0.1:7171"), None), "not a host");
    // A valid URL with nothing behind it is a runtime error that says so.
    let err = runtime_error(&run(Some("rill://127.0.0.1:1"), None), "rill serve");
    assert!(!err.contains("invalid"), "{err}");
}

/// A fake server that answers every connection with `answer`, then closes it.
fn fake_server(answer: &'static [u8]) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 256];
            let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
            let _ = stream.read(&mut request);
            let _ = stream.write_all(answer);
        }
    });
    addr
}

#[test]
fn a_peer_that_is_not_a_rill_server_is_named_so() {
    let http =
        fake_server(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    let out = Command::new(bin())
        .args(["--server", &format!("rill://{http}"), "stream", "list"])
        .env_remove("RILL_SERVER")
        .output()
        .unwrap();
    let err = runtime_error(&out, "not a Rill server");
    assert!(err.contains("HTTP") && !err.contains("1347703880"), "{err}");
    let other = fake_server(b"<!DOCTYPE html><html>nothing to see here</html>");
    let out = Command::new(bin())
        .args(["--server", &format!("rill://{other}"), "stream", "list"])
        .env_remove("RILL_SERVER")
        .output()
        .unwrap();
    runtime_error(&out, "not a Rill server");
}

#[test]
fn data_directories_must_exist_and_be_directories() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("typo");
    let data = |path: &std::path::Path, args: &[&str]| {
        Command::new(bin())
            .arg("--data")
            .arg(path)
            .args(args)
            .env_remove("RILL_SERVER")
            .output()
            .unwrap()
    };
    runtime_error(&data(&typo, &["stream", "list"]), "does not exist");
    runtime_error(&data(&typo, &["consume", "s/t"]), "does not exist");
    assert!(!typo.exists(), "a read command made {}", typo.display());
    let file = dir.path().join("file");
    std::fs::write(&file, "not a directory").unwrap();
    let err = runtime_error(&data(&file, &["stream", "list"]), "is not a directory");
    assert!(!err.contains("File exists"), "{err}");
    // Commands that create something make the directory.
    ok(&data(&typo, &["topic", "create", "s/t"]));
    ok(&data(&typo, &["stream", "list"]));
}

/// Starts `rill serve` with `env` and extra args on free ports; its whole stderr.
fn serve_briefly(data: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> (Child, String) {
    let mut cmd = Command::new(bin());
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--data",
    ])
    .arg(data)
    .args(args)
    .env("RILL_LOG", "info")
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut log = String::new();
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        log.push_str(&line);
        log.push('\n');
        if line.starts_with("rill listening on ") {
            break;
        }
    }
    (child, log)
}

#[test]
fn serve_logs_plain_text_and_says_where_it_listens_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, log) = serve_briefly(&dir.path().join("data"), &[], &[]);
    let _ = child.kill();
    let _ = child.wait();
    let listening = log.lines().last().unwrap().to_owned();
    assert!(listening.starts_with("rill listening on "), "{log}");
    let addr = listening
        .trim_start_matches("rill listening on ")
        .split(' ')
        .next()
        .unwrap();
    assert_eq!(log.matches(addr).count(), 1, "the address once: {log}");
    assert!(!log.contains('\x1b'), "no colours in a pipe: {log:?}");
    assert!(!log.contains("Some("), "{log}");
}

#[test]
fn serve_help_lists_only_its_own_flags() {
    let out = Command::new(bin())
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = ok(&out);
    assert!(
        help.contains("--listen") && help.contains("--data"),
        "{help}"
    );
    assert!(
        !help.contains("--server") && !help.contains("--tls-ca"),
        "{help}"
    );
    let out = Command::new(bin())
        .args(["serve", "--server", "rill://127.0.0.1:1"])
        .output()
        .unwrap();
    usage_error(&out, "--server is for commands that talk to a server");
}

#[test]
fn bad_environment_variables_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let serve = |env: &[(&str, &str)]| {
        let mut c = Command::new(bin());
        c.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--data",
        ])
        .arg(&data)
        .env("RILL_LOG", "error");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let out = Command::new(bin())
        .args(["serve", "--data"])
        .arg(&data)
        .env("RILL_LISTEN", "nowhere")
        .output()
        .unwrap();
    usage_error(&out, "RILL_LISTEN");
    runtime_error(
        &serve(&[("RILL_DEFAULT_DURABILITY", "sometimes")]),
        "RILL_DEFAULT_DURABILITY",
    );
    assert!(!data.exists(), "a failed start left {}", data.display());
    let out = Command::new(bin())
        .args(["--data"])
        .arg(dir.path().join("other"))
        .args(["topic", "create", "s/t"])
        .env("RILL_LOG", "info,[broken")
        .output()
        .unwrap();
    ok(&out);
    assert!(stderr(&out).contains("RILL_LOG"), "{}", stderr(&out));
}

/// The worker threads a started server logged it runs on (from its runtime's own count).
fn logged_workers(args: &[&str], env: &[(&str, &str)]) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, log) = serve_briefly(&dir.path().join("data"), args, env);
    let _ = child.kill();
    let _ = child.wait();
    let line = log
        .lines()
        .find(|l| l.contains("worker threads"))
        .unwrap_or_else(|| panic!("no worker-threads line: {log}"));
    line.rsplit("workers=")
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{line}"))
}

#[test]
fn serve_runs_on_the_worker_threads_it_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rill.toml");
    let config_arg = config.to_str().unwrap();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(logged_workers(&[], &[]), cpus, "one per CPU by default");
    assert_eq!(logged_workers(&["--workers", "3"], &[]), 3);
    std::fs::write(&config, "workers = 2\n").unwrap();
    assert_eq!(logged_workers(&["--config", config_arg], &[]), 2);
    // The environment wins over the file, the flag over both.
    assert_eq!(
        logged_workers(&["--config", config_arg], &[("RILL_WORKERS", "1")]),
        1
    );
    assert_eq!(
        logged_workers(
            &["--config", config_arg, "--workers", "4"],
            &[("RILL_WORKERS", "1")]
        ),
        4
    );

    let data = dir.path().join("data");
    let serve = |args: &[&str], env: &[(&str, &str)]| {
        let mut c = Command::new(bin());
        c.args(["serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(args)
            .arg("--data")
            .arg(&data)
            .env("RILL_LOG", "error");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    usage_error(&serve(&["--workers", "0"], &[]), "--workers");
    usage_error(&serve(&["--workers", "1025"], &[]), "1..=1024");
    usage_error(&serve(&[], &[("RILL_WORKERS", "many")]), "RILL_WORKERS");
    for bad in ["0", "100000"] {
        std::fs::write(&config, format!("workers = {bad}\n")).unwrap();
        let err = runtime_error(&serve(&["--config", config_arg], &[]), "workers");
        assert!(err.contains("1 to 1024"), "{err}");
    }
    std::fs::write(&config, "workers = -1\n").unwrap();
    runtime_error(
        &serve(&["--config", config_arg], &[]),
        "invalid config file",
    );
    assert!(!data.exists(), "a failed start left {}", data.display());
}

/// A cluster node's start that fails after the node joined its metadata group keeps
/// the directory it made: the node may already have granted a vote there, which a node
/// started again from nothing would forget (and could vote twice in one term). Found
/// by the nemesis: "Write Vote: No such file or directory" from a node whose client
/// port was taken, its directory removed under its running metadata group.
#[test]
fn a_cluster_node_that_cannot_listen_keeps_the_directory_it_made() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    let peer = common::free_port();
    let peers = format!("1=127.0.0.1:{peer},2=127.0.0.1:1,3=127.0.0.1:2");
    let data = dir.path().join("data");
    let out = Command::new(bin())
        .args(["serve", "--listen", &port, "--http", "127.0.0.1:0"])
        .args(["--node-id", "1", "--peers", &peers, "--data"])
        .arg(&data)
        .env("RILL_LOG", "error")
        .output()
        .unwrap();
    // The node's banner line, then the error.
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.trim_end()
            .lines()
            .last()
            .is_some_and(|l| l.contains("cannot start the server")),
        "{err}"
    );
    assert!(
        data.join("cluster").join("meta").join("meta.log").exists(),
        "the failed start removed {}",
        data.display()
    );
}

#[test]
fn a_serve_that_cannot_listen_leaves_no_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    let data = dir.path().join("data");
    let out = Command::new(bin())
        .args([
            "serve",
            "--listen",
            &port,
            "--http",
            "127.0.0.1:0",
            "--data",
        ])
        .arg(&data)
        .env("RILL_LOG", "error")
        .output()
        .unwrap();
    runtime_error(&out, "cannot start the server");
    assert!(!data.exists(), "a failed start left {}", data.display());
    // A directory that was there stays.
    std::fs::create_dir(&data).unwrap();
    let out = Command::new(bin())
        .args([
            "serve",
            "--listen",
            &port,
            "--http",
            "127.0.0.1:0",
            "--data",
        ])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(data.exists());
}

#[test]
fn bench_prints_no_progress_without_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin())
        .arg("--data")
        .arg(dir.path().join("data"))
        .args([
            "bench",
            "produce",
            "--messages",
            "3000",
            "--warmup",
            "0",
            "--size",
            "10",
            "--json",
        ])
        .env_remove("RILL_LOG")
        .output()
        .unwrap();
    ok(&out);
    let err = stderr(&out);
    assert!(err.lines().all(|l| l.starts_with("rill bench: ")), "{err}");
}
