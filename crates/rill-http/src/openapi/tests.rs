use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

use crate::api::API_PATHS;
use crate::{HttpApp, HttpSettings, Metrics};

/// Methods probed on every path.
const METHODS: [Method; 5] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
];

fn app(dir: &std::path::Path) -> HttpApp {
    let broker = Arc::new(rill_broker::Broker::open(rill_broker::BrokerConfig::new(dir)).unwrap());
    let metrics = Arc::new(Metrics::new());
    metrics.attach_broker(Arc::clone(&broker));
    HttpApp::new(
        broker,
        metrics,
        HttpSettings {
            client_addr: "127.0.0.1:7171".parse().unwrap(),
            http_addr: None,
            tls: false,
            admin_writes: true,
        },
    )
}

/// The status and JSON body of one request through the router.
async fn send(app: &HttpApp, method: Method, path: &str) -> (StatusCode, serde_json::Value) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .unwrap();
    let response = app.router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

/// Whether the router has a handler for `method` on `path` (its fallbacks answer
/// `NOT_FOUND` and `METHOD_NOT_ALLOWED`, which no handler does).
async fn routed(app: &HttpApp, method: Method, path: &str) -> bool {
    let (_, body) = send(app, method, path).await;
    !matches!(
        body["error"]["code"].as_str(),
        Some("NOT_FOUND" | "METHOD_NOT_ALLOWED")
    )
}

fn concrete(template: &str) -> String {
    template
        .replace("{stream}", "s")
        .replace("{topic}", "t")
        .replace("{partition}", "0")
        .replace("{group}", "g")
        .replace("{consumer}", "c")
}

#[tokio::test]
async fn the_document_lists_exactly_the_routes() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(dir.path());
    let doc: serde_json::Value = serde_json::from_str(super::DOCUMENT).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    let documented: BTreeSet<&str> = paths.keys().map(String::as_str).collect();
    let router: BTreeSet<&str> = API_PATHS.iter().copied().collect();
    assert_eq!(documented, router, "paths of the document and the router");
    for path in API_PATHS {
        let ops = paths[*path].as_object().unwrap();
        for method in METHODS {
            let listed = ops.contains_key(&method.as_str().to_lowercase());
            let served = routed(&app, method.clone(), &concrete(path)).await;
            assert_eq!(
                listed, served,
                "{method} {path}: listed {listed}, served {served}"
            );
        }
    }
    // Every operation has an id and a success answer.
    for (path, ops) in paths {
        for (method, op) in ops.as_object().unwrap() {
            assert!(op["operationId"].is_string(), "{method} {path}");
            assert!(
                op["responses"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .any(|k| k.starts_with('2'))
            );
        }
    }
    // A path the document does not have is not served.
    assert!(!routed(&app, Method::GET, "/api/v1/nope").await);
}

#[tokio::test]
async fn fallbacks_and_refusals_are_json() {
    let dir = tempfile::tempdir().unwrap();
    let app = app(dir.path());
    let (status, body) = send(&app, Method::GET, "/api/v1/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "NOT_FOUND");
    let (status, body) = send(&app, Method::PUT, "/api/v1/info").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{body}");
    assert_eq!(body["error"]["code"], "METHOD_NOT_ALLOWED");
    let (status, body) = send(&app, Method::GET, "/api/v1/streams/bad%20name/topics/t").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "INVALID_NAME");
    let (status, body) = send(&app, Method::GET, "/api/v1/topics?limit=0").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("limit"),
        "{body}"
    );
    let (status, body) = send(&app, Method::GET, "/api/v1/topics?colour=red").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("colour"),
        "{body}"
    );
}
