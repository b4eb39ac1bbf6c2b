//! How the edge serves its pages (the waiting room's, the operators') and
//! their embedded scripts and styles: one content policy, no caching of
//! pages, no sniffing.

use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// The page's own origin only; no framing.
const POLICY: &str = "default-src 'self'; frame-ancestors 'none'; form-action 'self'";

/// A page.
pub fn html(status: StatusCode, body: String) -> Response {
    let headers = [
        (CONTENT_TYPE, "text/html; charset=utf-8"),
        (CONTENT_SECURITY_POLICY, POLICY),
        (CACHE_CONTROL, "no-store"),
        (X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ];
    (status, headers, body).into_response()
}

/// A page's script or style, embedded in the binary.
pub fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(CONTENT_TYPE, kind), (X_CONTENT_TYPE_OPTIONS, "nosniff"), (CACHE_CONTROL, "no-cache")], body).into_response()
}
