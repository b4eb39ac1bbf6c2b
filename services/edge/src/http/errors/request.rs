//! What any request, of any audience, can be refused for: its body, its
//! credentials, its rate, its path, a part that did not answer, a bug.

use super::Refused;
use crate::error_codes::ErrorCode;
use axum::response::{IntoResponse, Response};
use std::time::Duration;

/// Every audience's refusals.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// Bad JSON, missing field, bad id, wrong type.
    #[error("{0}")]
    InvalidRequest(String),
    /// Body over the limit.
    #[error("request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// A body that did not arrive in time (the deadline).
    #[error("the request body did not arrive within {} ms", .0.as_millis())]
    RequestTimeout(Duration),
    /// A body that is not declared `application/json` (what was declared).
    #[error("request body must be application/json, got '{0}'")]
    UnsupportedMediaType(String),
    /// Missing or bad credentials.
    #[error("{0}")]
    Unauthorized(String),
    /// Credentials for someone else.
    #[error("{0}")]
    Forbidden(String),
    /// Over a rate limit.
    #[error("too many requests; retry after {}s", retry_after_secs(*.0))]
    RateLimited(Duration),
    /// No such path.
    #[error("no such path")]
    NotFound,
    /// The path exists, not with this method (the `Allow` header says which).
    #[error("method not allowed on this path")]
    MethodNotAllowed,
    /// Redis, Kafka or PostgreSQL unavailable, or the edge at its limit;
    /// nothing was kept. The cause is logged, never answered.
    #[error("{}", TRY_AGAIN)]
    TryAgain(#[source] anyhow::Error),
    /// A bug or an unexpected failure. The client sees a generic message.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// What a 503 says (its cause is logged, never answered).
pub(super) const TRY_AGAIN: &str = "temporarily unavailable; nothing was kept, try again";

pub(super) fn retry_after_secs(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

impl RequestError {
    /// A 400 saying what is wrong with the input.
    pub fn invalid(why: impl std::fmt::Display) -> Self {
        Self::InvalidRequest(why.to_string())
    }

    /// A 503: `cause` (logged) did not answer; nothing was kept.
    pub fn try_again(cause: impl Into<anyhow::Error>) -> Self {
        Self::TryAgain(cause.into())
    }

    /// The contract's stable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::InvalidRequest(_) => ErrorCode::InvalidRequest,
            Self::PayloadTooLarge(_) => ErrorCode::PayloadTooLarge,
            Self::RequestTimeout(_) => ErrorCode::RequestTimeout,
            Self::UnsupportedMediaType(_) => ErrorCode::UnsupportedMediaType,
            Self::Unauthorized(_) => ErrorCode::Unauthorized,
            Self::Forbidden(_) => ErrorCode::Forbidden,
            Self::RateLimited(_) => ErrorCode::RateLimited,
            Self::NotFound => ErrorCode::NotFound,
            Self::MethodNotAllowed => ErrorCode::MethodNotAllowed,
            Self::TryAgain(_) => ErrorCode::TryAgain,
            Self::Internal(_) => ErrorCode::Internal,
        }
    }

    /// What it answers.
    pub fn refused(&self) -> Refused {
        match self {
            Self::Internal(cause) => Refused::new(self.code(), "internal error").caused_by(format_args!("{cause:#}")),
            Self::TryAgain(cause) => Refused::new(self.code(), self).caused_by(format_args!("{cause:#}")),
            Self::RateLimited(wait) => Refused::new(self.code(), self).retry_after(retry_after_secs(*wait).max(1)),
            Self::InvalidRequest(_)
            | Self::PayloadTooLarge(_)
            | Self::RequestTimeout(_)
            | Self::UnsupportedMediaType(_)
            | Self::Unauthorized(_)
            | Self::Forbidden(_)
            | Self::NotFound
            | Self::MethodNotAllowed => Refused::new(self.code(), self),
        }
    }
}

impl IntoResponse for RequestError {
    fn into_response(self) -> Response {
        self.refused().into_response()
    }
}

/// An audience's error holds the request's refusals: `?` takes a
/// [`RequestError`] (its `From`), and an unexpected `anyhow::Error` as
/// `INTERNAL` (this); its 503 and its 400 are the request's.
macro_rules! audience_error {
    ($name:ident) => {
        impl From<anyhow::Error> for $name {
            fn from(error: anyhow::Error) -> Self {
                Self::Request($crate::http::errors::RequestError::Internal(error))
            }
        }

        // Not every audience answers both (the provider's 503s are its
        // ledger's).
        #[allow(dead_code)]
        impl $name {
            /// A 503: `cause` (logged) did not answer; nothing was kept.
            pub fn try_again(cause: impl Into<anyhow::Error>) -> Self {
                Self::Request($crate::http::errors::RequestError::try_again(cause))
            }

            /// A 400 saying what is wrong with the input.
            pub fn invalid(why: impl std::fmt::Display) -> Self {
                Self::Request($crate::http::errors::RequestError::invalid(why))
            }
        }
    };
}
pub(crate) use audience_error;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::errors::ErrorDetail;

    #[test]
    fn every_request_error_has_its_contract_status() {
        for (error, status, code) in [
            (RequestError::InvalidRequest("x".into()), 400, "INVALID_REQUEST"),
            (RequestError::PayloadTooLarge(4096), 413, "PAYLOAD_TOO_LARGE"),
            (RequestError::RequestTimeout(Duration::from_secs(10)), 408, "REQUEST_TIMEOUT"),
            (RequestError::UnsupportedMediaType("text/plain".into()), 415, "UNSUPPORTED_MEDIA_TYPE"),
            (RequestError::Unauthorized("x".into()), 401, "UNAUTHORIZED"),
            (RequestError::Forbidden("x".into()), 403, "FORBIDDEN"),
            (RequestError::RateLimited(Duration::from_millis(1)), 429, "RATE_LIMITED"),
            (RequestError::NotFound, 404, "NOT_FOUND"),
            (RequestError::MethodNotAllowed, 405, "METHOD_NOT_ALLOWED"),
            (RequestError::TryAgain(anyhow::anyhow!("x")), 503, "TRY_AGAIN"),
            (RequestError::Internal(anyhow::anyhow!("x")), 500, "INTERNAL"),
        ] {
            assert_eq!(error.into_response().status().as_u16(), status, "{code}");
        }
    }

    #[test]
    fn a_try_again_never_answers_its_cause() {
        let response = RequestError::TryAgain(anyhow::anyhow!("redis: connection refused to 10.0.0.7")).into_response();
        let detail = response.extensions().get::<ErrorDetail>().expect("the cause is kept for the log");
        assert!(detail.0.contains("10.0.0.7"));
        let body = futures::executor::block_on(axum::body::to_bytes(response.into_body(), 4096)).unwrap();
        let text = String::from_utf8_lossy(&body);
        assert!(!text.contains("10.0.0.7") && text.contains("TRY_AGAIN"), "{text}");
    }

    #[test]
    fn a_rate_limit_names_its_wait_rounded_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
        let response = RequestError::RateLimited(Duration::from_millis(1500)).into_response();
        assert_eq!(response.headers()["retry-after"], "2");
    }
}
