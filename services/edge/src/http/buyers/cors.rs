//! CORS for the buyer's API: the buy button lives on the shop's pages,
//! usually another origin than the API. Configured origins only (or `*`),
//! `GET` and `POST`, the headers a buyer's request carries, no credentials
//! (the API takes a Bearer token, never cookies). A preflight is answered
//! here, before any handler: it counts against no limit and changes
//! nothing.

use crate::settings::CorsSettings;
use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use std::time::Duration;
use tower_http::cors::{AllowOrigin, CorsLayer};

/// The layer for the configured origins; `None` when none are.
pub fn layer(settings: &CorsSettings) -> Option<CorsLayer> {
    if settings.allowed_origins.is_empty() {
        return None;
    }
    let origins = if settings.allowed_origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        // Validated at start (Settings::validate).
        AllowOrigin::list(settings.allowed_origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(origins)
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([
                header::CONTENT_TYPE,
                header::AUTHORIZATION,
                HeaderName::from_static("x-request-id"),
                HeaderName::from_static("idempotency-key"),
            ])
            .expose_headers([HeaderName::from_static("x-request-id"), header::RETRY_AFTER])
            .max_age(Duration::from_secs(settings.max_age_secs))
            .vary([header::ORIGIN]),
    )
}

/// A preflight's answer has no content: 204, not 200.
pub async fn preflight_no_content(mut response: Response) -> Response {
    if response.status() == StatusCode::OK && response.headers().contains_key(header::ACCESS_CONTROL_ALLOW_METHODS) {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}
