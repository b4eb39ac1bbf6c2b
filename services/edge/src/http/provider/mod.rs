//! The payment provider's room: its signed notifications. Its servers call
//! it, never a browser: outside CORS, on `http_addr` beside the buyers'.

pub(crate) mod payments;

use crate::http::errors::RequestError;
use crate::http::state::Edge;
use axum::Router;

/// The provider's routes.
pub fn router() -> Router<Edge> {
    payments::router().method_not_allowed_fallback(|| async { RequestError::MethodNotAllowed })
}
