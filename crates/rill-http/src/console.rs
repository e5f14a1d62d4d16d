//! The web console's place: static assets embedded in the binary, served at `/` (the
//! page) and `/assets/{path}` (the files it loads). Today the only asset is a
//! placeholder page that points at the API; the console will replace the table below.

use std::sync::Arc;

use axum::Router;
use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::app::AppState;
use crate::error::ApiError;

/// One embedded file.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

/// Every embedded file; `index.html` is the page served at `/`.
const ASSETS: &[Asset] = &[Asset {
    path: "index.html",
    content_type: "text/html; charset=utf-8",
    bytes: include_bytes!("../assets/index.html"),
}];

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(index))
        .route("/assets/{*path}", get(asset))
}

async fn index() -> Response {
    serve("index.html")
}

async fn asset(Path(path): Path<String>) -> Response {
    serve(&path)
}

fn serve(path: &str) -> Response {
    match ASSETS.iter().find(|a| a.path == path) {
        Some(a) => ([(header::CONTENT_TYPE, a.content_type)], a.bytes).into_response(),
        None => ApiError::NotFound(format!("/assets/{path}")).into_response(),
    }
}
