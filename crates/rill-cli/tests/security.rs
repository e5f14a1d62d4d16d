//! Security with the real binary (docs/SECURITY.md): the refusal to serve the network
//! without `--auth`, the first admin, and the CLI's credentials from the URL and the
//! environment. Wrong or missing ones say `unauthenticated`. No clear password reaches
//! the server's log or its data directory.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::rill_bin;

const ADMIN_PASSWORD: &str = "first-admin-Pa55";

/// A `rill serve` with extra arguments and environment; its whole stderr is kept.
struct Served {
    child: Child,
    addr: String,
    log: Arc<Mutex<String>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Served {
    let mut cmd = Command::new(rill_bin());
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
    .env_remove("RILL_ADMIN_PASSWORD")
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn rill serve");
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let kept = Arc::clone(&log);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("rill listening on ") {
                let _ = tx.send(rest.split_once(" (http ").unwrap().0.to_owned());
            }
            let mut log = kept.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("rill serve did not start: {}", log.lock().unwrap()));
    Served { child, addr, log }
}

/// `rill serve` that is expected to refuse to start: its exit code and stderr.
fn refused(data: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = Command::new(rill_bin());
    cmd.args(["serve", "--http", "127.0.0.1:0", "--data"])
        .arg(data)
        .args(args)
        .env_remove("RILL_ADMIN_PASSWORD")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn rill(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(rill_bin());
    cmd.args(args)
        .env_remove("RILL_USER")
        .env_remove("RILL_PASSWORD")
        .env_remove("RILL_TOKEN")
        .env_remove("RILL_SERVER");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_network_address_without_auth_is_refused_unless_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = refused(dir.path(), &["--listen", "0.0.0.0:0"], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("refusing to serve 0.0.0.0:0 to the network without --auth"),
        "{err}"
    );
    // --insecure serves it all the same (checked by the start alone; the test binds
    // loopback for the client).
    let mut cmd = Command::new(rill_bin());
    let mut child = cmd
        .args([
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--http",
            "127.0.0.1:0",
            "--insecure",
            "--data",
        ])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines: Vec<String> = BufReader::new(child.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .take_while(|l| !l.starts_with("rill listening on "))
        .chain(std::iter::once(String::new()))
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    let log = lines.join("\n");
    assert!(
        log.contains("without authentication (--insecure)"),
        "it serves, and warns: {log}"
    );
}

#[test]
fn auth_without_a_user_or_a_password_to_make_one_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = refused(dir.path(), &["--listen", "127.0.0.1:0", "--auth"], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--auth needs a user"), "{err}");
    assert!(err.contains("--admin-password-file"), "{err}");
}

#[test]
fn the_cli_authenticates_from_the_url_or_the_environment_and_says_unauthenticated_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let password_file = dir.path().join("admin-password");
    std::fs::write(&password_file, format!("{ADMIN_PASSWORD}\n")).unwrap();
    let data = dir.path().join("data");
    let server = serve(
        &data,
        &[
            "--auth",
            "--admin-password-file",
            password_file.to_str().unwrap(),
        ],
        &[],
    );
    let plain = format!("rill://{}", server.addr);
    let with_password = format!("rill://admin:{ADMIN_PASSWORD}@{}", server.addr);
    let wrong = format!("rill://admin:not-the-password@{}", server.addr);

    // No credential: exit 1 and `unauthenticated`.
    let o = rill(&["stream", "create", "shop", "--server", &plain], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("unauthenticated"), "{}", stderr(&o));
    // A wrong password: the same, and the message does not echo it.
    let o = rill(&["stream", "create", "shop", "--server", &wrong], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("unauthenticated"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("not-the-password"), "{}", stderr(&o));
    // Credentials in the URL.
    let o = rill(
        &["stream", "create", "shop", "--server", &with_password],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // From the environment, for every command.
    let env = [("RILL_USER", "admin"), ("RILL_PASSWORD", ADMIN_PASSWORD)];
    let o = rill(
        &["topic", "create", "shop/orders", "--server", &plain],
        &env,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = rill(
        &["produce", "shop/orders", "hello", "--server", &plain],
        &env,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = rill(
        &[
            "consume",
            "shop/orders",
            "--from",
            "first",
            "--count",
            "1",
            "--server",
            &plain,
        ],
        &env,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "hello");
    // Without a credential, reading is refused too.
    let o = rill(
        &[
            "consume",
            "shop/orders",
            "--from",
            "first",
            "--count",
            "1",
            "--server",
            &plain,
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("unauthenticated"), "{}", stderr(&o));

    // The password is nowhere in the server's log or its data directory.
    let log = server.log.lock().unwrap().clone();
    assert!(
        log.contains("authentication failed"),
        "the failures are logged: {log}"
    );
    assert!(!log.contains(ADMIN_PASSWORD), "{log}");
    drop(server);
    for file in walk(&data) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(ADMIN_PASSWORD),
            "{} holds the password",
            file.display()
        );
    }
    assert!(data.join("auth.json").exists());
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
