//! What every refusal answers: its body (its code gives the status), the
//! seconds a `Retry-After` names, and the cause a 5xx logs (carried to the
//! `observe` middleware, never answered).

use crate::error_codes::ErrorCode;
use crate::http::bodies::ErrorBody;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::Arc;

/// The logged detail of a 5xx, carried to the logging middleware.
#[derive(Clone)]
pub struct ErrorDetail(pub Arc<String>);

/// What a refusal answers: its body (its code gives the status), the
/// seconds a `Retry-After` names, and the cause logged (a 5xx).
pub struct Refused {
    body: ErrorBody,
    retry_after: Option<u64>,
    cause: Option<String>,
}

impl Refused {
    /// A refusal of `code` saying `message`, nothing more.
    pub fn new(code: ErrorCode, message: impl std::fmt::Display) -> Self {
        Self { body: ErrorBody::new(code, message.to_string()), retry_after: None, cause: None }
    }

    /// The same, with what its body adds (`held`, `available`, …).
    pub fn with(mut self, add: impl FnOnce(&mut ErrorBody)) -> Self {
        add(&mut self.body);
        self
    }

    /// The same, with a `Retry-After` of `secs`.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// The same, with `cause` logged (never answered).
    pub fn caused_by(mut self, cause: impl std::fmt::Display) -> Self {
        self.cause = Some(cause.to_string());
        self
    }

    /// Its body.
    #[cfg(test)]
    pub fn body(&self) -> &ErrorBody {
        &self.body
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.body.code.status()).expect("every code's status is a valid one");
        let mut response = (status, Json(self.body)).into_response();
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some(cause) = self.cause {
            response.extensions_mut().insert(ErrorDetail(Arc::new(cause)));
        }
        response
    }
}
