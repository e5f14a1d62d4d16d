//! TLS with the real binary (docs/SECURITY.md §5), with certificates made here by rcgen:
//! the CLI over `rills://` trusting a private CA; a client that does not trust the
//! certificate, a plaintext client on the TLS port and a TLS client on a plaintext port,
//! each with a message that says what is wrong (and the server unharmed); HTTPS on the
//! admin port; client certificates that authenticate as their common name; and a
//! certificate reloaded on SIGHUP.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{rill_in, serve};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};

/// A certificate authority made for the test.
struct Ca {
    cert: rcgen::Certificate,
    issuer: rcgen::Issuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.clone().self_signed(&key).unwrap();
        let issuer = rcgen::Issuer::new(params, key);
        Self { cert, issuer }
    }

    /// A leaf for `localhost` and 127.0.0.1, with `common_name` as its subject.
    fn leaf(&self, common_name: &str) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![
            SanType::DnsName("localhost".try_into().unwrap()),
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        ];
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn write(&self, dir: &Path, name: &str) -> PathBuf {
        write(dir, name, &self.cert.pem())
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn failed(o: Output) -> String {
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `GET path` over TLS, trusting `ca`.
fn https_get(addr: &str, path: &str, ca: &Ca) -> String {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert.der().clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let socket = std::net::TcpStream::connect(addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(connection, socket);
    tls.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn plain_http_get(addr: &str, path: &str) -> String {
    common::http_get(addr, path)
}

#[test]
fn the_cli_speaks_tls_and_wrong_setups_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("test CA");
    let ca_path = ca.write(dir.path(), "ca.pem");
    let (cert, key) = ca.leaf("rill server");
    let cert_path = write(dir.path(), "cert.pem", &cert);
    let key_path = write(dir.path(), "key.pem", &key);
    let data = dir.path().join("data");
    let server = serve(
        &data,
        &["--tls-cert", s(&cert_path), "--tls-key", s(&key_path)],
        &[],
    );
    let port = server.addr.rsplit_once(':').unwrap().1.to_owned();
    let url = format!("rills://127.0.0.1:{port}");
    let by_name = format!("rills://localhost:{port}");
    let tls = |args: &[&str]| {
        let mut all = vec!["--server", &url, "--tls-ca", s(&ca_path)];
        all.extend_from_slice(args);
        rill_in(&all, &[], "")
    };

    ok(tls(&[
        "topic",
        "create",
        "shop/orders",
        "--partitions",
        "2",
    ]));
    ok(rill_in(
        &[
            "--server",
            &url,
            "--tls-ca",
            s(&ca_path),
            "produce",
            "shop/orders",
        ],
        &[],
        "one\ntwo\nthree\n",
    ));
    let read = ok(tls(&[
        "consume",
        "shop/orders",
        "--from",
        "first",
        "--count",
        "3",
    ]));
    for value in ["one", "two", "three"] {
        assert!(read.contains(value), "{read}");
    }
    // The CA from the environment, and the host by name.
    ok(rill_in(
        &["--server", &by_name, "stream", "list"],
        &[("RILL_TLS_CA", s(&ca_path))],
        "",
    ));

    // Not trusting the certificate: said so, naming the host.
    let err = failed(rill_in(&["--server", &url, "stream", "list"], &[], ""));
    assert!(err.contains("not trusted"), "{err}");
    assert!(err.contains("127.0.0.1"), "{err}");
    assert!(err.contains("--tls-ca"), "{err}");
    let other = Ca::new("another CA");
    let other_path = other.write(dir.path(), "other-ca.pem");
    let err = failed(rill_in(
        &[
            "--server",
            &url,
            "--tls-ca",
            s(&other_path),
            "stream",
            "list",
        ],
        &[],
        "",
    ));
    assert!(err.contains("not trusted"), "{err}");

    // Plaintext on the TLS port: a message, and the server carries on.
    let plain = format!("rill://127.0.0.1:{port}");
    let started = Instant::now();
    let err = failed(rill_in(&["--server", &plain, "stream", "list"], &[], ""));
    assert!(
        err.contains("this port requires TLS; connect with rills://"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the refusal is not retried for long"
    );
    // HTTPS on the admin port; plaintext HTTP there is told to use https.
    let health = https_get(&server.http, "/health", &ca);
    assert!(health.starts_with("HTTP/1.1 200 "), "{health}");
    let metrics = https_get(&server.http, "/metrics", &ca);
    assert!(metrics.contains("rill_requests_total"), "{metrics}");
    let plain_http = plain_http_get(&server.http, "/health");
    assert!(
        plain_http.contains("400") && plain_http.contains("https://"),
        "{plain_http}"
    );
    assert!(ok(tls(&["stream", "list"])).contains("shop"));

    // A TLS client on a plaintext port.
    let plain_data = dir.path().join("plain");
    let plain_server = serve(&plain_data, &[], &[]);
    let tls_to_plain = format!("rills://{}", plain_server.addr);
    let err = failed(rill_in(
        &[
            "--server",
            &tls_to_plain,
            "--tls-ca",
            s(&ca_path),
            "stream",
            "list",
        ],
        &[],
        "",
    ));
    assert!(err.contains("did not answer with TLS"), "{err}");
    assert!(err.contains("rill://"), "{err}");

    // Bad TLS files stop the start with words.
    let garbage = write(dir.path(), "garbage.pem", "garbage\n");
    let out = std::process::Command::new(common::rill_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args([
            "--tls-cert",
            s(&garbage),
            "--tls-key",
            s(&key_path),
            "--data",
        ])
        .arg(dir.path().join("bad"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("holds no certificate"), "{err}");
    drop(server);
}

const ADMIN_PASSWORD: &str = "tls-admin-Pa55";

#[test]
fn client_certificates_authenticate_as_their_common_name() {
    let dir = tempfile::tempdir().unwrap();
    let server_ca = Ca::new("server CA");
    let server_ca_path = server_ca.write(dir.path(), "server-ca.pem");
    let (cert, key) = server_ca.leaf("rill server");
    let cert_path = write(dir.path(), "cert.pem", &cert);
    let key_path = write(dir.path(), "key.pem", &key);
    let client_ca = Ca::new("client CA");
    let client_ca_path = client_ca.write(dir.path(), "client-ca.pem");
    let identity = |name: &str, ca: &Ca| {
        let (cert, key) = ca.leaf(name);
        (
            write(dir.path(), &format!("{name}-cert.pem"), &cert),
            write(dir.path(), &format!("{name}-key.pem"), &key),
        )
    };
    let admin = identity("admin", &client_ca);
    let alice = identity("alice", &client_ca);
    let stranger = identity("stranger", &client_ca);
    let forged = {
        let rogue = Ca::new("rogue CA");
        let (cert, key) = rogue.leaf("admin");
        (
            write(dir.path(), "forged-cert.pem", &cert),
            write(dir.path(), "forged-key.pem", &key),
        )
    };
    let data = dir.path().join("data");
    let server = serve(
        &data,
        &[
            "--auth",
            "--tls-cert",
            s(&cert_path),
            "--tls-key",
            s(&key_path),
            "--tls-client-ca",
            s(&client_ca_path),
        ],
        &[("RILL_ADMIN_PASSWORD", ADMIN_PASSWORD)],
    );
    let url = format!("rills://{}", server.addr);
    let as_ =
        |who: Option<&(PathBuf, PathBuf)>, args: &[&str], env: &[(&str, &str)], input: &str| {
            let mut all = vec!["--server", url.as_str(), "--tls-ca", s(&server_ca_path)];
            all.extend_from_slice(args);
            let mut vars: Vec<(&str, &str)> = env.to_vec();
            if let Some((cert, key)) = who {
                vars.push(("RILL_TLS_CLIENT_CERT", s(cert)));
                vars.push(("RILL_TLS_CLIENT_KEY", s(key)));
            }
            rill_in(&all, &vars, input)
        };

    // The admin's certificate is the admin: no password given.
    ok(as_(
        Some(&admin),
        &["user", "create", "alice", "--password-stdin"],
        &[],
        "alice-Pa55word\n",
    ));
    ok(as_(
        Some(&admin),
        &["topic", "create", "shop/orders"],
        &[],
        "",
    ));
    assert!(ok(as_(Some(&admin), &["user", "list"], &[], "")).contains("alice"));

    // Alice's certificate is alice: a user without the admin role or an ACL.
    let err = failed(as_(Some(&alice), &["user", "list"], &[], ""));
    assert!(err.contains("permission denied"), "{err}");
    let err = failed(as_(
        Some(&alice),
        &["topic", "create", "shop/more"],
        &[],
        "",
    ));
    assert!(err.contains("permission denied"), "{err}");

    // A certificate naming no user passes TLS only; a password then authenticates.
    let err = failed(as_(Some(&stranger), &["stream", "list"], &[], ""));
    assert!(err.contains("unauthenticated"), "{err}");
    let listed = ok(as_(
        Some(&stranger),
        &["user", "list"],
        &[("RILL_USER", "admin"), ("RILL_PASSWORD", ADMIN_PASSWORD)],
        "",
    ));
    assert!(listed.contains("alice"), "{listed}");

    // No certificate, or one from another CA: the handshake is refused.
    for who in [None, Some(&forged)] {
        let err = failed(as_(who, &["stream", "list"], &[], ""));
        assert!(err.to_lowercase().contains("certificate"), "{err}");
    }
    // The server is unharmed.
    ok(as_(Some(&admin), &["stream", "list"], &[], ""));
}

#[test]
fn sighup_reloads_the_certificate_and_keeps_it_if_the_new_files_are_bad() {
    let dir = tempfile::tempdir().unwrap();
    let first = Ca::new("first CA");
    let second = Ca::new("second CA");
    let first_path = first.write(dir.path(), "first.pem");
    let second_path = second.write(dir.path(), "second.pem");
    let (cert, key) = first.leaf("rill server");
    let cert_path = write(dir.path(), "cert.pem", &cert);
    let key_path = write(dir.path(), "key.pem", &key);
    let server = serve(
        &dir.path().join("data"),
        &["--tls-cert", s(&cert_path), "--tls-key", s(&key_path)],
        &[],
    );
    let url = format!("rills://{}", server.addr);
    let list = |ca: &Path| {
        rill_in(
            &["--server", &url, "--tls-ca", s(ca), "stream", "list"],
            &[],
            "",
        )
    };
    ok(list(&first_path));
    assert!(failed(list(&second_path)).contains("not trusted"));

    let hup = || {
        let status = std::process::Command::new("kill")
            .args(["-HUP", &server.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    let (cert, key) = second.leaf("rill server");
    write(dir.path(), "cert.pem", &cert);
    write(dir.path(), "key.pem", &key);
    hup();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !list(&second_path).status.success() {
        assert!(Instant::now() < deadline, "the reload did not take");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(failed(list(&first_path)).contains("not trusted"));

    // Files that do not load: logged, and the certificate in force stays.
    write(dir.path(), "cert.pem", "not a certificate\n");
    hup();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server
        .log
        .lock()
        .unwrap()
        .contains("previous certificate stays in force")
    {
        assert!(Instant::now() < deadline, "{}", server.log.lock().unwrap());
        std::thread::sleep(Duration::from_millis(100));
    }
    ok(list(&second_path));
}
