//! The admin JSON API of the HTTP port against the real binary (docs/HTTP_API.md),
//! through a real HTTP client: every endpoint with its bounds and bad input on a server
//! without `--auth` that takes writes; then, on a server with `--auth` over HTTPS
//! without `--http-admin-writes`, credentials, the broker's refusals and refused
//! writes. One server per test, so the file stays quick.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
use rill_client::{Client, Credentials, Permission, Role, Secret, TlsOptions, TopicOptions, Value};
use serde_json::{Value as Json, json};

/// One HTTP answer: status and JSON body (`Null` when the body is not JSON).
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Json,
    text: String,
}

impl Answer {
    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct Http {
    agent: ureq::Agent,
    base: String,
    authorization: Option<String>,
}

impl Http {
    fn new(base: String, tls: Option<ureq::tls::TlsConfig>) -> Self {
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)));
        if let Some(tls) = tls {
            config = config.tls_config(tls);
        }
        Http {
            agent: config.build().into(),
            base,
            authorization: None,
        }
    }

    fn with_authorization(&self, value: Option<String>) -> Self {
        Http {
            agent: self.agent.clone(),
            base: self.base.clone(),
            authorization: value,
        }
    }

    fn answer(response: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Answer {
        let mut response = response.expect("an HTTP answer");
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        let text = response
            .body_mut()
            .with_config()
            .limit(16 << 20)
            .read_to_string()
            .unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Json::Null);
        Answer {
            status,
            headers,
            body,
            text,
        }
    }

    fn get(&self, path: &str) -> Answer {
        let mut request = self.agent.get(format!("{}{path}", self.base));
        if let Some(a) = &self.authorization {
            request = request.header("authorization", a);
        }
        Self::answer(request.call())
    }

    fn send(&self, method: &str, path: &str, body: &str) -> Answer {
        let url = format!("{}{path}", self.base);
        let mut request = ureq::http::Request::builder()
            .method(method)
            .uri(url)
            .header("content-type", "application/json");
        if let Some(a) = &self.authorization {
            request = request.header("authorization", a);
        }
        Self::answer(self.agent.run(request.body(body.to_owned()).unwrap()))
    }
}

fn basic(user: &str, password: &str) -> String {
    let pair = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

fn check(answer: &Answer, status: u16, code: &str) {
    assert_eq!(answer.status, status, "{}", answer.text);
    assert_eq!(answer.code(), code, "{}", answer.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_serves_every_endpoint_and_refuses_bad_input() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("data"), &["--http-admin-writes"], &[]);
    let client = Client::connect(&format!("rill://{}", server.addr))
        .await
        .unwrap();
    let orders = client.stream("shop").topic("orders");
    orders
        .create_with(&TopicOptions::partitions(2), false)
        .await
        .unwrap();
    let big_negative = i128::MIN;
    // A key that routes to partition 0, where the other records go.
    let key = (1..)
        .map(|i| format!("u-{i}"))
        .find(|k| rill_client::partition_for_key(k.as_bytes(), 2) == 0)
        .unwrap();
    orders
        .publish()
        .key(key.clone().into_bytes())
        .value(&br#"{"total": 12.5}"#[..])
        .header("trace", Value::Str("abc".into()))
        .header("attempt", Value::U64(u64::MAX))
        .header("sig", Value::Bytes(bytes::Bytes::from_static(&[1, 2, 3])))
        .header("big", Value::I128(big_negative))
        .header("ratio", Value::F32(0.1))
        .header("ok", Value::Bool(true))
        .send()
        .await
        .unwrap();
    orders
        .publish()
        .partition(0)
        .value(&[0xffu8, 0, 1][..])
        .send()
        .await
        .unwrap();
    orders
        .publish()
        .partition(0)
        .value(vec![b'a'; 100 << 10])
        .send()
        .await
        .unwrap();
    let mut member = orders.consumer_group("billing").build().await.unwrap();
    let first = member.next().await.unwrap().unwrap();
    member.commit(&first).await.unwrap();

    let http = Http::new(format!("http://{}", server.http), None);

    // The server.
    let info = http.get("/api/v1/info");
    assert_eq!(info.status, 200, "{}", info.text);
    assert_eq!(info.body["auth"], false);
    assert_eq!(info.body["tls"], false);
    assert_eq!(info.body["admin_writes"], true);
    assert!(info.body["user"].is_null());
    assert!(info.body["cluster"].is_null());
    assert_eq!(info.body["listen"]["client"], server.addr.as_str());
    assert_eq!(info.body["listen"]["http"], server.http.as_str());
    assert!(info.body["version"].as_str().is_some_and(|v| !v.is_empty()));
    assert!(info.body["started_at"].as_str().unwrap().ends_with('Z'));

    // Streams and topics.
    let streams = http.get("/api/v1/streams");
    assert_eq!(
        streams.body["streams"],
        json!([{"name": "shop", "topics": 1}])
    );
    client
        .stream("shop")
        .topic("zeta")
        .create_with(&TopicOptions::partitions(1), false)
        .await
        .unwrap();
    let topics = http.get("/api/v1/topics");
    assert_eq!(topics.status, 200, "{}", topics.text);
    let list = topics.body["topics"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["topic"], "orders");
    assert_eq!(list[0]["totals"]["records"], 3);
    assert_eq!(list[0]["options"]["partitions"], 2);
    assert_eq!(list[0]["options"]["durability"], "always");
    assert!(topics.body.get("next").is_none());
    let page = http.get("/api/v1/topics?limit=1");
    assert_eq!(page.body["topics"].as_array().unwrap().len(), 1);
    assert_eq!(page.body["next"], "shop/orders");
    let rest = http.get("/api/v1/topics?limit=1&after=shop/orders");
    assert_eq!(rest.body["topics"][0]["topic"], "zeta");
    assert_eq!(
        http.get("/api/v1/topics?stream=shop").body["topics"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    check(
        &http.get("/api/v1/topics?stream=nope"),
        404,
        "STREAM_NOT_FOUND",
    );
    for bad in [
        "/api/v1/topics?limit=0",
        "/api/v1/topics?limit=1001",
        "/api/v1/topics?limit=ten",
        "/api/v1/topics?after=noslash",
        "/api/v1/topics?colour=red",
    ] {
        check(&http.get(bad), 400, "BAD_PARAMETER");
    }
    check(
        &http.get("/api/v1/topics?stream=bad*name"),
        400,
        "INVALID_NAME",
    );

    let described = http.get("/api/v1/streams/shop/topics/orders");
    assert_eq!(described.status, 200, "{}", described.text);
    let partitions = described.body["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), 2);
    assert_eq!(partitions[0]["next_offset"], 3);
    assert_eq!(partitions[0]["records"], 3);
    assert!(partitions[0]["failure"].is_null());
    assert_eq!(partitions[0]["damaged"], json!([]));
    assert!(partitions[0]["bytes"].as_u64().unwrap() > 100 << 10);
    check(
        &http.get("/api/v1/streams/shop/topics/nope"),
        404,
        "TOPIC_NOT_FOUND",
    );
    check(
        &http.get("/api/v1/streams/nope/topics/orders"),
        404,
        "STREAM_NOT_FOUND",
    );
    let bad_name = http.get("/api/v1/streams/shop/topics/a%20b");
    check(&bad_name, 400, "INVALID_NAME");
    assert!(bad_name.text.contains("topic"), "{}", bad_name.text);

    // Messages.
    let base = "/api/v1/streams/shop/topics/orders/partitions/0/messages";
    let page = http.get(&format!("{base}?offset=0&limit=2"));
    assert_eq!(page.status, 200, "{}", page.text);
    let records = page.body["records"].as_array().unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(page.body["next_offset"], 2);
    assert_eq!(page.body["log_start"], 0);
    assert_eq!(page.body["log_end"], 3);
    let r = &records[0];
    assert_eq!(r["offset"], 0);
    assert_eq!(r["key"]["text"], key.as_str());
    assert_eq!(r["value"]["json"], json!({"total": 12.5}));
    assert_eq!(r["value"]["truncated"], false);
    assert!(r["timestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        r["headers"],
        json!([
            {"name": "trace", "type": "str", "value": "abc"},
            {"name": "attempt", "type": "u64", "value": u64::MAX.to_string()},
            {"name": "sig", "type": "bytes", "value": "AQID"},
            {"name": "big", "type": "i128", "value": big_negative.to_string()},
            {"name": "ratio", "type": "f32", "value": 0.1},
            {"name": "ok", "type": "bool", "value": true},
        ])
    );
    assert!(
        page.text.contains("\"value\":0.1}"),
        "f32 as its shortest decimal"
    );
    assert!(records[1]["key"].is_null());
    assert_eq!(records[1]["value"]["base64"], "/wAB");
    let long = http.get(&format!("{base}?offset=2"));
    let value = &long.body["records"][0]["value"];
    assert_eq!(value["truncated"], true);
    assert_eq!(value["bytes"], 100 << 10);
    assert_eq!(value["text"].as_str().unwrap().len(), 64 << 10);
    assert_eq!(long.body["next_offset"], 3);
    let end = http.get(&format!("{base}?offset=3"));
    assert_eq!(end.body["records"], json!([]));
    assert_eq!(end.body["next_offset"], 3);
    let from_start = http.get(base);
    assert_eq!(from_start.body["records"].as_array().unwrap().len(), 3);
    let by_time = http.get(&format!("{base}?time=2000-01-01T00:00:00Z&limit=1"));
    assert_eq!(by_time.status, 200, "{}", by_time.text);
    assert_eq!(by_time.body["records"][0]["offset"], 0);
    let future = http.get(&format!("{base}?time=2999-01-01T00:00:00%2B02:00"));
    assert_eq!(future.body["records"], json!([]));
    for bad in [
        "?offset=-1",
        "?offset=abc",
        "?offset=18446744073709551616",
        "?limit=101",
        "?limit=0",
        "?offset=1&time=2000-01-01T00:00:00Z",
        "?time=yesterday",
        "?max=1",
    ] {
        check(&http.get(&format!("{base}{bad}")), 400, "BAD_PARAMETER");
    }
    check(
        &http.get(&format!("{base}?offset=99")),
        400,
        "OFFSET_BEYOND_END",
    );
    check(
        &http.get("/api/v1/streams/shop/topics/orders/partitions/7/messages"),
        404,
        "PARTITION_NOT_FOUND",
    );
    check(
        &http.get("/api/v1/streams/shop/topics/orders/partitions/x/messages"),
        400,
        "BAD_PARAMETER",
    );

    // Groups.
    let group = http.get("/api/v1/streams/shop/topics/orders/groups/billing");
    assert_eq!(group.status, 200, "{}", group.text);
    assert_eq!(group.body["members"].as_array().unwrap().len(), 1);
    assert_eq!(group.body["partitions"][0]["stored_offset"], 1);
    assert_eq!(group.body["partitions"][0]["log_end"], 3);
    assert_eq!(group.body["lag"], 2);
    assert_eq!(group.body["lag_history"]["interval_seconds"], 5);
    check(
        &http.get("/api/v1/streams/shop/topics/orders/groups/nope"),
        404,
        "GROUP_NOT_FOUND",
    );

    // Listings of groups and named consumers.
    let mut audit = orders.consumer("audit", 0).build().await.unwrap();
    let read = audit.next().await.unwrap().unwrap();
    audit.commit(&read).await.unwrap();
    let groups = http.get("/api/v1/streams/shop/topics/orders/groups");
    assert_eq!(groups.status, 200, "{}", groups.text);
    assert_eq!(
        groups.body["groups"],
        json!([{"group": "billing", "members": 1, "generation": groups.body["groups"][0]["generation"], "lag": 2}])
    );
    assert!(groups.body.get("next").is_none());
    assert_eq!(
        http.get("/api/v1/streams/shop/topics/orders/groups?after=billing")
            .body["groups"],
        json!([])
    );
    check(
        &http.get("/api/v1/streams/shop/topics/orders/groups?after=a*b"),
        400,
        "INVALID_NAME",
    );
    let consumers = http.get("/api/v1/streams/shop/topics/orders/consumers");
    assert_eq!(consumers.status, 200, "{}", consumers.text);
    assert_eq!(consumers.body["consumers"][0]["consumer"], "audit");
    assert_eq!(
        consumers.body["consumers"][0]["partitions"],
        json!([{"partition": 0, "offset": 1, "log_end": 3, "lag": 2}])
    );

    // Resets and deletes of stored offsets.
    let reset = http.send(
        "POST",
        "/api/v1/streams/shop/topics/orders/consumers/audit/reset",
        r#"{"to": "end", "partition": 0}"#,
    );
    assert_eq!(reset.status, 200, "{}", reset.text);
    assert_eq!(
        reset.body["offsets"],
        json!([{"partition": 0, "offset": 3}])
    );
    let billing = "/api/v1/streams/shop/topics/orders/groups/billing";
    check(
        &http.send("POST", &format!("{billing}/reset"), r#"{"to": "first"}"#),
        409,
        "GROUP_NOT_EMPTY",
    );
    check(&http.send("DELETE", billing, ""), 409, "GROUP_NOT_EMPTY");
    for bad in [
        r#"{"to": "start"}"#,
        r#"{"to": "offset"}"#,
        r#"{"to": "first", "offset": 1}"#,
        r#"{"to": "time", "time": "soon"}"#,
        r#"{}"#,
    ] {
        check(
            &http.send("POST", &format!("{billing}/reset"), bad),
            400,
            "BAD_JSON",
        );
    }
    member.shutdown().await.unwrap();
    drop(member);
    let reset = http.send(
        "POST",
        &format!("{billing}/reset"),
        r#"{"to": "time", "time": "2000-01-01T00:00:00Z"}"#,
    );
    assert_eq!(reset.status, 200, "{}", reset.text);
    assert_eq!(
        reset.body["offsets"],
        json!([{"partition": 0, "offset": 0}, {"partition": 1, "offset": 0}])
    );
    let deleted = http.send("DELETE", billing, "");
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    assert_eq!(deleted.body["offsets_deleted"], 2);
    check(&http.get(billing), 404, "GROUP_NOT_FOUND");

    // Writes.
    let made = http.send(
        "POST",
        "/api/v1/streams/shop/topics",
        r#"{"topic": "made", "partitions": 2, "durability": "interval:100", "retention_ms": 60000}"#,
    );
    assert_eq!(made.status, 201, "{}", made.text);
    assert_eq!(made.body["options"]["durability"], "interval:100");
    assert_eq!(made.body["options"]["retention_ms"], 60000);
    assert_eq!(made.body["partitions"].as_array().unwrap().len(), 2);
    check(
        &http.send(
            "POST",
            "/api/v1/streams/shop/topics",
            r#"{"topic": "made"}"#,
        ),
        409,
        "TOPIC_EXISTS",
    );
    for bad in [
        "{",
        r#"{"partitions": 1}"#,
        r#"{"topic": "x", "colour": 1}"#,
        r#"{"topic": "x", "partitions": 0}"#,
        r#"{"topic": "x", "partitions": -1}"#,
        r#"{"topic": "x", "durability": "sometimes"}"#,
    ] {
        check(
            &http.send("POST", "/api/v1/streams/shop/topics", bad),
            400,
            "BAD_JSON",
        );
    }
    check(
        &http.send(
            "POST",
            "/api/v1/streams/shop/topics",
            r#"{"topic": "no/slash"}"#,
        ),
        400,
        "INVALID_NAME",
    );
    let huge = format!(r#"{{"topic": "{}"}}"#, "x".repeat(70 << 10));
    check(
        &http.send("POST", "/api/v1/streams/shop/topics", &huge),
        413,
        "PAYLOAD_TOO_LARGE",
    );
    let altered = http.send(
        "PATCH",
        "/api/v1/streams/shop/topics/made",
        r#"{"retention_ms": null, "durability": "never", "partitions": 3}"#,
    );
    assert_eq!(altered.status, 200, "{}", altered.text);
    assert!(altered.body["options"]["retention_ms"].is_null());
    assert_eq!(altered.body["options"]["durability"], "never");
    assert_eq!(altered.body["partitions"].as_array().unwrap().len(), 3);
    check(
        &http.send(
            "PATCH",
            "/api/v1/streams/shop/topics/made",
            r#"{"partitions": 1}"#,
        ),
        400,
        "INVALID_CONFIG",
    );
    check(
        &http.send(
            "PATCH",
            "/api/v1/streams/shop/topics/made",
            r#"{"colour": 1}"#,
        ),
        400,
        "BAD_JSON",
    );
    let deleted = http.send("DELETE", "/api/v1/streams/shop/topics/made", "");
    assert_eq!(deleted.status, 204, "{}", deleted.text);
    check(
        &http.send("DELETE", "/api/v1/streams/shop/topics/made", ""),
        404,
        "TOPIC_NOT_FOUND",
    );

    // The document, the fallbacks, the console's place, the probes.
    let doc = http.get("/api/v1/openapi.json");
    assert_eq!(doc.status, 200);
    assert!(doc.body["paths"]["/api/v1/info"]["get"].is_object());
    check(&http.get("/api/v1/nope"), 404, "NOT_FOUND");
    let put = http.send("PUT", "/api/v1/info", "{}");
    check(&put, 405, "METHOD_NOT_ALLOWED");
    let page = http.get("/");
    assert_eq!(page.status, 200);
    assert!(
        page.header("content-type")
            .unwrap()
            .starts_with("text/html")
    );
    assert_eq!(http.get("/health").text, "ok\n");
    assert!(http.get("/metrics").text.contains("rill_requests_total"));

    // Rates: the sampler's second sample (5 s after the start) sees the produces.
    check(&http.get("/api/v1/rates?minutes=16"), 400, "BAD_PARAMETER");
    check(&http.get("/api/v1/rates?minutes=0"), 400, "BAD_PARAMETER");
    check(&http.get("/api/v1/rates?stream=shop"), 400, "BAD_PARAMETER");
    check(
        &http.get("/api/v1/rates?stream=shop&topic=nope"),
        404,
        "TOPIC_NOT_FOUND",
    );
    let deadline = started + Duration::from_secs(30);
    let rates = loop {
        let rates = http.get("/api/v1/rates?minutes=1");
        assert_eq!(rates.status, 200, "{}", rates.text);
        if !rates.body["points"].as_array().unwrap().is_empty() {
            break rates;
        }
        assert!(Instant::now() < deadline, "no rate point: {}", rates.text);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(rates.body["interval_seconds"], 5);
    let moved: f64 = rates.body["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["records_in_per_second"].as_f64().unwrap())
        .sum();
    assert!(moved > 0.0, "{}", rates.text);
    let topic_rates = http.get("/api/v1/rates?stream=shop&topic=orders");
    assert!(!topic_rates.body["points"].as_array().unwrap().is_empty());
    let described = http.get("/api/v1/streams/shop/topics/orders");
    assert!(
        described.body["rates"]["records_in_per_second"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{}",
        described.text
    );
}

/// A CA and a leaf for 127.0.0.1 signed by it: (CA PEM, leaf PEM, key PEM).
fn certificates() -> (String, String, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "test CA");
    let ca_cert = ca.clone().self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::default();
    leaf.subject_alt_names = vec![
        SanType::DnsName("localhost".try_into().unwrap()),
        SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
    ];
    let leaf = leaf.signed_by(&key, &issuer).unwrap();
    (ca_cert.pem(), leaf.pem(), key.serialize_pem())
}

const ADMIN_PASSWORD: &str = "http-admin-Pa55";
const BOB_PASSWORD: &str = "http-bob-Pa55word";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_over_https_credentials_decide_and_writes_are_off() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates();
    let cert_path = dir.path().join("cert.pem");
    let key_path = dir.path().join("key.pem");
    std::fs::write(&cert_path, &cert).unwrap();
    std::fs::write(&key_path, &key).unwrap();
    let server = common::serve(
        &dir.path().join("data"),
        &[
            "--auth",
            "--tls-cert",
            cert_path.to_str().unwrap(),
            "--tls-key",
            key_path.to_str().unwrap(),
        ],
        &[("RILL_ADMIN_PASSWORD", ADMIN_PASSWORD)],
    );
    let admin = Client::builder()
        .tls(TlsOptions::new().ca_pem(ca.as_bytes()).unwrap())
        .credentials(Credentials::Password {
            user: "admin".into(),
            password: Secret::new(ADMIN_PASSWORD),
        })
        .connect(&format!("rills://{}", server.addr))
        .await
        .unwrap();
    admin
        .stream("shop")
        .topic("orders")
        .create_with(&TopicOptions::partitions(1), false)
        .await
        .unwrap();
    admin
        .stream("secret")
        .topic("plans")
        .create_with(&TopicOptions::partitions(1), false)
        .await
        .unwrap();
    admin
        .create_user("bob", Role::User, &Secret::new(BOB_PASSWORD))
        .await
        .unwrap();
    admin
        .grant("bob", "shop", &[Permission::Read])
        .await
        .unwrap();
    let token = admin.create_token("console", None).await.unwrap();

    let ca_der = rustls_pemfile_der(&ca);
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::Specific(Arc::new(vec![
            ureq::tls::Certificate::from_der(&ca_der).to_owned(),
        ])))
        .build();
    let port = server.http.rsplit_once(':').unwrap().1;
    let http = Http::new(format!("https://127.0.0.1:{port}"), Some(tls));

    // The probes need no credential; everything else does.
    assert_eq!(http.get("/health").text, "ok\n");
    assert!(http.get("/metrics").text.contains("rill_connections"));
    for path in ["/api/v1/info", "/api/v1/streams", "/", "/api/v1/nope"] {
        let refused = http.get(path);
        check(&refused, 401, "UNAUTHENTICATED");
        assert!(
            refused
                .header("www-authenticate")
                .is_some_and(|v| v.starts_with("Basic realm=\"rill\"")),
            "{path}"
        );
    }
    check(
        &http
            .with_authorization(Some(basic("admin", "wrong-password")))
            .get("/api/v1/info"),
        401,
        "UNAUTHENTICATED",
    );
    check(
        &http
            .with_authorization(Some("Digest x".into()))
            .get("/api/v1/info"),
        401,
        "UNAUTHENTICATED",
    );

    let as_admin = http.with_authorization(Some(basic("admin", ADMIN_PASSWORD)));
    let info = as_admin.get("/api/v1/info");
    assert_eq!(info.status, 200, "{}", info.text);
    assert_eq!(info.body["user"], "admin");
    assert_eq!(info.body["auth"], true);
    assert_eq!(info.body["tls"], true);
    assert_eq!(info.body["admin_writes"], false);
    let streams = as_admin.get("/api/v1/streams");
    assert_eq!(streams.body["streams"].as_array().unwrap().len(), 2);

    // A token acts as its user.
    let as_token = http.with_authorization(Some(format!("Bearer {}", token.token.expose())));
    assert_eq!(as_token.get("/api/v1/info").body["user"], "admin");

    // The broker decides what bob may see.
    let as_bob = http.with_authorization(Some(basic("bob", BOB_PASSWORD)));
    let streams = as_bob.get("/api/v1/streams");
    assert_eq!(
        streams.body["streams"],
        json!([{"name": "shop", "topics": 1}])
    );
    assert_eq!(as_bob.get("/api/v1/streams/shop/topics/orders").status, 200);
    check(
        &as_bob.get("/api/v1/streams/secret/topics/plans"),
        403,
        "PERMISSION_DENIED",
    );
    check(
        &as_bob.get("/api/v1/streams/secret/topics/plans/partitions/0/messages"),
        403,
        "PERMISSION_DENIED",
    );

    // Writes are off: refused with how to turn them on, whoever asks.
    for who in [&as_admin, &http] {
        let refused = who.send("POST", "/api/v1/streams/shop/topics", r#"{"topic": "t"}"#);
        check(&refused, 403, "WRITES_DISABLED");
        assert!(
            refused.text.contains("--http-admin-writes"),
            "{}",
            refused.text
        );
        check(
            &who.send("DELETE", "/api/v1/streams/shop/topics/orders", ""),
            403,
            "WRITES_DISABLED",
        );
    }
    assert_eq!(
        as_admin.get("/api/v1/streams/shop/topics/orders").status,
        200
    );
}

/// The DER bytes of the first certificate of a PEM text.
fn rustls_pemfile_der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_deletes_exactly_the_records_before_its_point() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::serve(&dir.path().join("data"), &["--http-admin-writes"], &[]);
    let client = Client::connect(&format!("rill://{}", server.addr))
        .await
        .unwrap();
    let t = client.stream("shop").topic("orders");
    t.create_with(&TopicOptions::partitions(2), false)
        .await
        .unwrap();
    for (p, n) in [(0, 5), (1, 2)] {
        for i in 0..n {
            t.publish()
                .partition(p)
                .value(format!("v{i}"))
                .send()
                .await
                .unwrap();
        }
    }
    let http = Http::new(format!("http://{}", server.http), None);
    let purge = "/api/v1/streams/shop/topics/orders/purge";
    for bad in [
        r#"{"before": "offset"}"#,
        r#"{"before": "offset", "offset": 1, "time": "2026-01-01T00:00:00Z"}"#,
        r#"{"before": "time", "time": "yesterday"}"#,
        r#"{"before": "sideways"}"#,
        r#"{"before": "end", "extra": 1}"#,
        r#"{"before": "offset", "offset": -1}"#,
    ] {
        check(&http.send("POST", purge, bad), 400, "BAD_JSON");
    }
    let beyond = http.send("POST", purge, r#"{"before": "offset", "offset": 99}"#);
    assert_eq!(beyond.status, 400, "{}", beyond.text);
    assert!(beyond.text.contains("partition"), "{}", beyond.text);
    check(
        &http.send(
            "POST",
            "/api/v1/streams/shop/topics/nope/purge",
            r#"{"before": "end"}"#,
        ),
        404,
        "TOPIC_NOT_FOUND",
    );
    let one = http.send(
        "POST",
        purge,
        r#"{"before": "offset", "offset": 3, "partition": 0}"#,
    );
    assert_eq!(one.status, 200, "{}", one.text);
    assert_eq!(
        one.body,
        json!({"partitions": [{"partition": 0, "first_offset": 3}]})
    );
    let d = http.get("/api/v1/streams/shop/topics/orders");
    assert_eq!(d.body["partitions"][0]["first_offset"], 3, "{}", d.text);
    assert_eq!(d.body["partitions"][1]["first_offset"], 0, "{}", d.text);
    let page = http.get("/api/v1/streams/shop/topics/orders/partitions/0/messages?offset=3");
    assert_eq!(page.body["records"][0]["offset"], 3, "{}", page.text);
    let all = http.send("POST", purge, r#"{"before": "end"}"#);
    assert_eq!(
        all.body,
        json!({"partitions": [{"partition": 0, "first_offset": 5}, {"partition": 1, "first_offset": 2}]}),
        "{}",
        all.text
    );
}
