//! Security with the real binary (docs/SECURITY.md): the refusal to serve the network
//! without `--auth`, the first admin, and the CLI's credentials from the URL and the
//! environment. Wrong or missing ones say `unauthenticated`. No clear password reaches
//! the server's log or its data directory.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{rill_bin, rill_in, serve};

const ADMIN_PASSWORD: &str = "first-admin-Pa55";

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
    rill_in(args, env, "")
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
    for file in common::walk(&data) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(ADMIN_PASSWORD),
            "{} holds the password",
            file.display()
        );
    }
    assert!(data.join("auth.json").exists());
}

/// `rill` with `input` on standard input.
#[test]
fn users_acls_and_tokens_from_the_cli_decide_what_each_may_do() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_arg = data.to_str().unwrap();
    // The first admin, made on the data directory before the first start.
    let o = rill_in(
        &[
            "user",
            "create",
            "admin",
            "--role",
            "admin",
            "--password-stdin",
            "--data",
            data_arg,
        ],
        &[],
        &format!("{ADMIN_PASSWORD}\n"),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let server = serve(&data, &["--auth"], &[]);
    let url = format!("rill://{}", server.addr);
    let admin = [("RILL_USER", "admin"), ("RILL_PASSWORD", ADMIN_PASSWORD)];
    let alice = [("RILL_USER", "alice"), ("RILL_PASSWORD", "alice-password")];
    let ok = |o: Output| {
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    ok(rill(
        &["topic", "create", "shop/orders", "--server", &url],
        &admin,
    ));
    ok(rill(
        &["produce", "shop/orders", "one", "--server", &url],
        &admin,
    ));
    ok(rill_in(
        &[
            "user",
            "create",
            "alice",
            "--password-stdin",
            "--server",
            &url,
        ],
        &admin,
        "alice-password\n",
    ));
    // alice exists but may do nothing on shop yet.
    let o = rill(
        &[
            "consume",
            "shop/orders",
            "--from",
            "first",
            "--count",
            "1",
            "--server",
            &url,
        ],
        &alice,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("permission denied"), "{}", stderr(&o));
    ok(rill(
        &[
            "acl", "grant", "alice", "--stream", "shop", "--allow", "read", "--server", &url,
        ],
        &admin,
    ));
    let read = ok(rill(
        &[
            "consume",
            "shop/orders",
            "--from",
            "first",
            "--count",
            "1",
            "--server",
            &url,
        ],
        &alice,
    ));
    assert_eq!(read.trim(), "one");
    // Reading does not let her write, or make topics, or see other users.
    for args in [
        &["produce", "shop/orders", "two", "--server", &url][..],
        &["topic", "create", "shop/other", "--server", &url][..],
        &["user", "list", "--server", &url][..],
    ] {
        let o = rill(args, &alice);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&o).contains("permission denied"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    let users = ok(rill(&["user", "list", "--server", &url], &admin));
    assert!(
        users
            .lines()
            .any(|l| l.starts_with("alice\tuser\t") && l.ends_with("\tshop:read\t-")),
        "{users}"
    );
    assert!(
        users.lines().any(|l| l.starts_with("admin\tadmin\t")),
        "{users}"
    );

    // alice's token: printed once, works alone, and stops when revoked.
    let token = ok(rill(&["token", "create", "ci", "--server", &url], &alice));
    let token = token.trim().to_owned();
    assert!(token.starts_with("rill_"), "{token}");
    let by_token = [("RILL_TOKEN", token.as_str())];
    let read = ok(rill(
        &[
            "consume",
            "shop/orders",
            "--from",
            "first",
            "--count",
            "1",
            "--server",
            &url,
        ],
        &by_token,
    ));
    assert_eq!(read.trim(), "one");
    let tokens = ok(rill(&["token", "list", "--server", &url], &alice));
    assert!(tokens.starts_with("ci\talice\t"), "{tokens}");
    assert!(!tokens.contains(&token), "a listing never shows a token");
    ok(rill(&["token", "revoke", "ci", "--server", &url], &alice));
    let o = rill(
        &[
            "consume",
            "shop/orders",
            "--from",
            "first",
            "--count",
            "1",
            "--server",
            &url,
        ],
        &by_token,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("unauthenticated"), "{}", stderr(&o));

    // A changed password: the old one stops working.
    ok(rill_in(
        &[
            "user",
            "passwd",
            "alice",
            "--password-stdin",
            "--server",
            &url,
        ],
        &alice,
        "alice-new-password\n",
    ));
    let o = rill(&["stream", "list", "--server", &url], &alice);
    assert!(stderr(&o).contains("unauthenticated"), "{}", stderr(&o));
    let streams = ok(rill(
        &["stream", "list", "--server", &url],
        &[
            ("RILL_USER", "alice"),
            ("RILL_PASSWORD", "alice-new-password"),
        ],
    ));
    assert!(streams.starts_with("shop\t"), "{streams}");
    // Revoked, she sees nothing; deleted, she cannot log in.
    ok(rill(
        &[
            "acl", "revoke", "alice", "--stream", "shop", "--server", &url,
        ],
        &admin,
    ));
    let streams = ok(rill(
        &["stream", "list", "--server", &url],
        &[
            ("RILL_USER", "alice"),
            ("RILL_PASSWORD", "alice-new-password"),
        ],
    ));
    assert_eq!(streams.trim(), "", "{streams}");
    ok(rill(&["user", "delete", "alice", "--server", &url], &admin));
    let o = rill(
        &["stream", "list", "--server", &url],
        &[
            ("RILL_USER", "alice"),
            ("RILL_PASSWORD", "alice-new-password"),
        ],
    );
    assert!(stderr(&o).contains("unauthenticated"), "{}", stderr(&o));
    // A bad permission is a usage error.
    let o = rill(
        &[
            "acl",
            "grant",
            "admin",
            "--stream",
            "shop",
            "--allow",
            "read,delete",
            "--server",
            &url,
        ],
        &admin,
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let log = server.log.lock().unwrap().clone();
    for secret in [
        ADMIN_PASSWORD,
        "alice-password",
        "alice-new-password",
        token.as_str(),
    ] {
        assert!(!log.contains(secret), "the log holds a secret: {log}");
    }
}

#[test]
fn quotas_from_the_cli_are_stored_listed_and_counted_in_the_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let password_file = dir.path().join("admin-password");
    std::fs::write(&password_file, format!("{ADMIN_PASSWORD}\n")).unwrap();
    let server = serve(
        &data,
        &[
            "--auth",
            "--admin-password-file",
            password_file.to_str().unwrap(),
        ],
        &[],
    );
    let url = format!("rill://{}", server.addr);
    let admin = [("RILL_USER", "admin"), ("RILL_PASSWORD", ADMIN_PASSWORD)];
    let bob = [("RILL_USER", "bob"), ("RILL_PASSWORD", "bob-password")];
    let ok = |o: Output| {
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    ok(rill(
        &["topic", "create", "shop/orders", "--server", &url],
        &admin,
    ));
    ok(rill_in(
        &[
            "user",
            "create",
            "bob",
            "--password-stdin",
            "--produce-rate",
            "64KiB/s",
            "--server",
            &url,
        ],
        &admin,
        "bob-password\n",
    ));
    ok(rill(
        &[
            "acl",
            "grant",
            "bob",
            "--stream",
            "shop",
            "--allow",
            "read,write",
            "--server",
            &url,
        ],
        &admin,
    ));
    let users = ok(rill(&["user", "list", "--server", &url], &admin));
    assert!(
        users
            .lines()
            .any(|l| l.starts_with("bob\tuser\t") && l.ends_with("\tproduce=65536B/s")),
        "{users}"
    );
    // A rate left out is kept; none removes one.
    let now = ok(rill(
        &[
            "user",
            "alter",
            "bob",
            "--fetch-rate",
            "1MiB/s",
            "--server",
            &url,
        ],
        &admin,
    ));
    assert_eq!(now.trim(), "produce=65536B/s,fetch=1048576B/s");
    // Bad rates are usage errors; an alter with nothing to change says so.
    for bad in ["fast", "10", "5XB/s"] {
        let o = rill(
            &[
                "user",
                "alter",
                "bob",
                "--produce-rate",
                bad,
                "--server",
                &url,
            ],
            &admin,
        );
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
    }
    let o = rill(&["user", "alter", "bob", "--server", &url], &admin);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("nothing to change"), "{}", stderr(&o));
    // Only an admin sets quotas.
    let o = rill(
        &[
            "user",
            "alter",
            "bob",
            "--produce-rate",
            "none",
            "--server",
            &url,
        ],
        &bob,
    );
    assert!(stderr(&o).contains("permission denied"), "{}", stderr(&o));

    for v in ["one", "two", "three"] {
        ok(rill(&["produce", "shop/orders", v, "--server", &url], &bob));
    }
    let read = ok(rill(
        &[
            "consume",
            "shop/orders",
            "--from",
            "first",
            "--count",
            "3",
            "--server",
            &url,
        ],
        &bob,
    ));
    assert_eq!(read.lines().count(), 3, "{read}");
    let metrics = common::http_get(&server.http, "/metrics");
    let value = |name: &str, kind: &str| -> f64 {
        let prefix = format!("{name}{{user=\"bob\",kind=\"{kind}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {metrics}"))
            .parse()
            .unwrap()
    };
    assert!(value("rill_quota_bytes_total", "produce") > 0.0);
    assert!(value("rill_quota_bytes_total", "fetch") > 0.0);
    // Three small records are far within 64 KiB/s: nothing was held back.
    assert_eq!(value("rill_quota_throttle_seconds_total", "produce"), 0.0);
    assert!(
        !metrics.contains("user=\"admin\""),
        "a user without a quota has no series"
    );

    let now = ok(rill(
        &[
            "user",
            "alter",
            "bob",
            "--produce-rate",
            "none",
            "--fetch-rate",
            "none",
            "--server",
            &url,
        ],
        &admin,
    ));
    assert_eq!(now.trim(), "-");
}
