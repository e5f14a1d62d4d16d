//! The web console: static files embedded in the binary, served at `/` (the page) and
//! `/assets/{path}` (the style sheet, the ES modules it loads, the icon).
//!
//! The console is plain HTML, CSS and JavaScript modules with no build step: the files
//! under `crates/rill-http/assets/` are what the browser runs, included here with
//! `include_bytes!`, so `cargo build` is all it takes and nothing is fetched from
//! anywhere else at run time. The page reads the admin JSON API under `/api/v1/` like
//! any other client, with the browser's credentials for the port, so the HTTP layer's
//! authentication (a `401` with `WWW-Authenticate: Basic` makes the browser ask) and the
//! broker's authorization apply to it unchanged; this module decides nothing about who
//! may see what.
//!
//! Caching: each file has a strong `ETag` (a hash of its bytes) and
//! `Cache-Control: no-cache`, so a browser keeps a copy but asks each time whether it
//! is still current, and gets `304 Not Modified` until the binary changes. Versioned
//! file names would save that request, but the modules import each other by relative
//! name, which a hash in the name would break without a build step.
//!
//! Every answer carries a Content Security Policy that allows scripts, styles and
//! requests from this origin only, so a string from the server that slipped into the
//! page as markup could still run nothing.
//!
//! Invariant: every file under `assets/` is in [`ASSETS`] and nothing else is served
//! (the unit test below compares the table with the directory); a path is looked up in
//! the table, never in the file system.

use std::sync::{Arc, LazyLock};

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::app::AppState;
use crate::error::ApiError;

/// One embedded file: its path under `assets/` (and `/assets/`) and its bytes.
struct Asset {
    path: &'static str,
    bytes: &'static [u8],
}

/// Declares the embedded files once, by their path under `assets/`.
macro_rules! assets {
    ($($path:literal),* $(,)?) => {
        /// Every embedded file; `index.html` is the page served at `/`.
        const ASSETS: &[Asset] = &[$(Asset {
            path: $path,
            bytes: include_bytes!(concat!("../assets/", $path)),
        }),*];
    };
}

assets! {
    "index.html",
    "console.css",
    "favicon.svg",
    "js/main.js",
    "js/api.js",
    "js/dom.js",
    "js/format.js",
    "js/chart.js",
    "js/json.js",
    "js/bytes.js",
    "js/writes.js",
    "js/record.js",
    "js/pages/overview.js",
    "js/pages/groups.js",
    "js/pages/topic.js",
    "js/pages/messages.js",
    "js/pages/group.js",
}

/// The policy sent with every file: this origin's scripts, styles and API only, images
/// from this origin or `data:` URLs, no plugins, no framing, no form posts elsewhere.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

/// The `ETag` of each file of [`ASSETS`], in the same order, computed once.
static ETAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|a| format!("\"{:016x}\"", fnv1a(a.bytes)))
        .collect()
});

/// FNV-1a, 64 bits: enough to tell two versions of a file apart for caching (an
/// `ETag` needs no resistance to collisions made on purpose).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The `Content-Type` of a file by its extension (every extension in [`ASSETS`] is
/// listed; the unit test checks it).
fn content_type(path: &str) -> Option<&'static str> {
    let extension = path.rsplit_once('.')?.1;
    Some(match extension {
        "html" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        // Module scripts are refused by browsers unless served as JavaScript.
        "js" => "text/javascript; charset=utf-8",
        "svg" => "image/svg+xml",
        _ => return None,
    })
}

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(index))
        .route("/assets/{*path}", get(asset))
}

async fn index(headers: HeaderMap) -> Response {
    serve("index.html", &headers)
}

async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    serve(&path, &headers)
}

/// The answer for the file at `path`: the file, `304` when the request's
/// `If-None-Match` names its current `ETag`, or `404`.
fn serve(path: &str, request: &HeaderMap) -> Response {
    let found = ASSETS
        .iter()
        .zip(ETAGS.iter())
        .find(|(a, _)| a.path == path)
        .and_then(|(a, etag)| Some((a, etag, content_type(a.path)?)));
    let Some((asset, etag, content_type)) = found else {
        return ApiError::NotFound(format!("/assets/{path}")).into_response();
    };
    let status = if matches_etag(request, etag) {
        StatusCode::NOT_MODIFIED
    } else {
        StatusCode::OK
    };
    let mut response = if status == StatusCode::OK {
        asset.bytes.into_response()
    } else {
        status.into_response()
    };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(value) = HeaderValue::from_str(etag) {
        headers.insert(header::ETAG, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// Whether `If-None-Match` lists `etag` (or is `*`), weak or strong: for a `GET` the
/// comparison is the weak one (RFC 9110 §13.1.2).
fn matches_etag(request: &HeaderMap, etag: &str) -> bool {
    request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use http_body_util::BodyExt as _;

    use super::*;

    /// Every file under `assets/`, relative to it.
    fn files_on_disk() -> BTreeSet<String> {
        fn walk(root: &std::path::Path, dir: &std::path::Path, out: &mut BTreeSet<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(root, &path, out);
                } else {
                    let relative = path.strip_prefix(root).unwrap();
                    out.insert(relative.to_str().unwrap().replace('\\', "/"));
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets");
        let mut out = BTreeSet::new();
        walk(&root, &root, &mut out);
        out
    }

    #[test]
    fn every_file_is_embedded_with_a_content_type() {
        let table: BTreeSet<String> = ASSETS.iter().map(|a| a.path.to_owned()).collect();
        assert_eq!(table, files_on_disk(), "assets/ and the ASSETS table");
        for a in ASSETS {
            assert!(
                content_type(a.path).is_some(),
                "{} has no content type",
                a.path
            );
        }
    }

    #[test]
    fn every_module_the_console_imports_is_embedded() {
        // The module graph is resolved by the browser; a missing file would only show
        // there. Every relative `from './x.js'` and `import('./x.js')` must be served.
        let table: BTreeSet<&str> = ASSETS.iter().map(|a| a.path).collect();
        for a in ASSETS.iter().filter(|a| a.path.ends_with(".js")) {
            let text = std::str::from_utf8(a.bytes).unwrap();
            let dir = a.path.rsplit_once('/').map_or("", |(d, _)| d);
            for spec in text
                .split(['\'', '"'])
                .filter(|s| (s.starts_with("./") || s.starts_with("../")) && s.ends_with(".js"))
            {
                let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
                for part in spec.split('/') {
                    match part {
                        "." => {}
                        ".." => {
                            parts.pop();
                        }
                        p => parts.push(p),
                    }
                }
                let resolved = parts.join("/");
                assert!(
                    table.contains(resolved.as_str()),
                    "{} imports {spec}",
                    a.path
                );
            }
        }
    }

    async fn body(response: Response) -> Vec<u8> {
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec()
    }

    #[tokio::test]
    async fn files_are_served_with_type_cache_headers_and_revalidation() {
        let response = serve("index.html", &HeaderMap::new());
        assert_eq!(response.status(), StatusCode::OK);
        let headers = response.headers().clone();
        assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
        assert_eq!(headers[header::CACHE_CONTROL], "no-cache");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert!(
            headers[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .unwrap()
                .contains("script-src 'self'")
        );
        let etag = headers[header::ETAG].to_str().unwrap().to_owned();
        assert!(body(response).await.starts_with(b"<!doctype html>"));

        let js = serve("js/main.js", &HeaderMap::new());
        assert_eq!(
            js.headers()[header::CONTENT_TYPE],
            "text/javascript; charset=utf-8"
        );
        assert_ne!(js.headers()[header::ETAG], etag.as_str());

        // The current tag, alone, weak or in a list, is answered 304 without a body.
        for tag in [etag.clone(), format!("W/{etag}"), format!("\"x\", {etag}")] {
            let mut request = HeaderMap::new();
            request.insert(header::IF_NONE_MATCH, tag.parse().unwrap());
            let response = serve("index.html", &request);
            assert_eq!(response.status(), StatusCode::NOT_MODIFIED, "{tag}");
            assert_eq!(response.headers()[header::ETAG], etag.as_str());
            assert!(body(response).await.is_empty());
        }
        // Another tag gets the file.
        let mut request = HeaderMap::new();
        request.insert(header::IF_NONE_MATCH, "\"0000\"".parse().unwrap());
        assert_eq!(serve("index.html", &request).status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn unknown_paths_are_not_found() {
        for path in [
            "nope.js",
            "../Cargo.toml",
            "js/../../src/lib.rs",
            "/etc/passwd",
            "",
            "js",
        ] {
            let response = serve(path, &HeaderMap::new());
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
            let json: serde_json::Value = serde_json::from_slice(&body(response).await).unwrap();
            assert_eq!(json["error"]["code"], "NOT_FOUND");
        }
    }
}
