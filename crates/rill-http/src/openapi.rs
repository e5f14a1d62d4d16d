//! The OpenAPI 3 document of the API, written by hand in `openapi.json` beside this
//! file and served as it is; a test holds it to the router (every path routed, every
//! route listed, with the same methods).

use axum::http::header;
use axum::response::IntoResponse;

/// The document.
pub(crate) const DOCUMENT: &str = include_str!("openapi.json");

/// `GET /api/v1/openapi.json`.
pub(crate) async fn document() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT)
}

#[cfg(test)]
mod tests;
