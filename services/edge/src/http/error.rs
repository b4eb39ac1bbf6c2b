//! The edge's one error type: every 4xx/5xx of the contract, each with its
//! status and `{"code","message"}` body. A 5xx answers a fixed message; its
//! cause travels to the `observe` middleware, which logs it once with the
//! request's ids.

use super::bodies::ErrorBody;
use crate::error_codes::ErrorCode;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::Arc;
use std::time::Duration;

/// Everything the edge can refuse a request with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
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
    /// Unknown or not warmed-up sale.
    #[error("sale not found or not warmed up")]
    SaleNotFound,
    /// Before the start or after the end.
    #[error("the sale is not active now")]
    SaleNotActive,
    /// A join before the waiting room's pre-queue opens (when it does).
    #[error("the sale's waiting room opens at {0}")]
    NotOpenYet(chrono::DateTime<chrono::Utc>),
    /// No valid admission token for a sale that admits through its room.
    #[error("{0}")]
    AdmissionRequired(String),
    /// A join's proof of work is missing or wrong.
    #[error("{0}")]
    ChallengeFailed(String),
    /// A draw's entry after its `drawAt`, or once the sale closed.
    #[error("the draw's entries are closed")]
    EntriesClosed,
    /// A draw's entry once it holds its most entries (`maxEntries`).
    #[error("the draw holds its most entries")]
    EntriesFull,
    /// One order per user per sale.
    #[error("this user already has an order in this sale")]
    AlreadyPurchased(Option<String>),
    /// No stock left.
    #[error("sold out")]
    SoldOut,
    /// Units left, fewer than asked (`SOLD_OUT` with `available`): nothing
    /// kept; the buyer may ask for fewer.
    #[error("only {0} units left; ask for fewer")]
    FewerLeft(i64),
    /// The user's units held plus those asked would pass the round's limit
    /// per user.
    #[error("this user holds {held} of the {limit} units one user may buy in this sale")]
    LimitReached { held: i64, limit: i64 },
    /// The user's units held across a release's sizes plus those asked
    /// would pass the release's limit per customer (`release`: its
    /// activity).
    #[error(
        "this customer holds {held} of the {limit} units one customer may buy in release {release}, across its sizes"
    )]
    ReleaseLimitReached { held: i64, limit: i64, release: i64 },
    /// Unknown order.
    #[error("order not found")]
    OrderNotFound,
    /// The order was accepted and is not written yet: pay or cancel it in
    /// a moment.
    #[error("the order is still being placed; try again in a moment")]
    OrderPending,
    /// A notification whose payment id was recorded for another order.
    #[error("this payment id was recorded for another order")]
    PaymentConflict,
    /// The order is paid (by another confirmation, or it cannot be cancelled).
    #[error("the order is already paid")]
    AlreadyPaid,
    /// The order FAILED: there is nothing to pay or cancel (why).
    #[error("the order failed ({0}); there is nothing to pay or cancel")]
    OrderFailed(String),
    /// No such path.
    #[error("no such path")]
    NotFound,
    /// The path exists, not with this method (the `Allow` header says which).
    #[error("method not allowed on this path")]
    MethodNotAllowed,
    /// A warm-up that would disturb orders in flight, or another warm-up.
    #[error("{0}")]
    SaleBusy(String),
    /// Redis, Kafka or PostgreSQL unavailable, or the sale busy; nothing
    /// was kept. The cause is logged, never answered.
    #[error("temporarily unavailable; nothing was kept, try again")]
    TryAgain(#[source] anyhow::Error),
    /// What an operator's request needed did not answer (or refused):
    /// `what` is named — PostgreSQL, Redis, the Redis replicas — the cause
    /// logged, never answered. Nothing was kept beyond what repeating the
    /// request finishes.
    #[error("{what} did not answer; try again")]
    Unanswered {
        what: &'static str,
        #[source]
        cause: anyhow::Error,
    },
    /// A bug or an unexpected failure. The client sees a generic message.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// The logged detail of a 5xx, carried to the logging middleware.
#[derive(Clone)]
pub struct ErrorDetail(pub Arc<String>);

fn retry_after_secs(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

impl ApiError {
    /// A 400 saying what is wrong with the input.
    pub fn invalid(why: impl std::fmt::Display) -> Self {
        Self::InvalidRequest(why.to_string())
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
            Self::SaleNotFound => ErrorCode::SaleNotFound,
            Self::SaleNotActive | Self::NotOpenYet(_) => ErrorCode::SaleNotActive,
            Self::AdmissionRequired(_) => ErrorCode::AdmissionRequired,
            Self::ChallengeFailed(_) => ErrorCode::ChallengeFailed,
            Self::EntriesClosed => ErrorCode::EntriesClosed,
            Self::EntriesFull => ErrorCode::EntriesFull,
            Self::AlreadyPurchased(_) => ErrorCode::AlreadyPurchased,
            Self::SoldOut | Self::FewerLeft(_) => ErrorCode::SoldOut,
            Self::LimitReached { .. } | Self::ReleaseLimitReached { .. } => ErrorCode::LimitReached,
            Self::OrderNotFound => ErrorCode::OrderNotFound,
            Self::OrderPending => ErrorCode::OrderPending,
            Self::PaymentConflict => ErrorCode::PaymentConflict,
            Self::AlreadyPaid => ErrorCode::AlreadyPaid,
            Self::OrderFailed(_) => ErrorCode::OrderFailed,
            Self::NotFound => ErrorCode::NotFound,
            Self::MethodNotAllowed => ErrorCode::MethodNotAllowed,
            Self::SaleBusy(_) => ErrorCode::SaleBusy,
            Self::TryAgain(_) | Self::Unanswered { .. } => ErrorCode::TryAgain,
            Self::Internal(_) => ErrorCode::Internal,
        }
    }

    /// The HTTP status.
    /// The status its code is answered with ([`ErrorCode::status`]).
    pub fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.code().status()).expect("every code's status is a valid one")
    }
}

/// The answer most requests of a flash sale get, serialized once (a test
/// keeps it equal to the [`ErrorBody`] it stands for).
const SOLD_OUT_BODY: &str = r#"{"code":"SOLD_OUT","message":"sold out"}"#;

impl ApiError {
    /// The body this error answers with.
    pub fn body(&self) -> ErrorBody {
        let message = match self {
            Self::Internal(_) => "internal error".to_owned(),
            other => other.to_string(),
        };
        let order_id = match self {
            Self::AlreadyPurchased(order_id) => order_id.clone(),
            _ => None,
        };
        let opens_at = match self {
            Self::NotOpenYet(at) => Some(*at),
            _ => None,
        };
        let mut body = ErrorBody::new(self.code(), message);
        body.order_id = order_id;
        body.opens_at = opens_at;
        match self {
            Self::FewerLeft(available) => body.available = Some(*available),
            Self::LimitReached { held, limit } => (body.held, body.limit) = (Some(*held), Some(*limit)),
            Self::ReleaseLimitReached { held, limit, release } => {
                (body.held, body.limit, body.release) = (Some(*held), Some(*limit), Some(*release))
            }
            _ => {}
        }
        body
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status_code();
        if let Self::SoldOut = self {
            return (status, [(header::CONTENT_TYPE, "application/json")], SOLD_OUT_BODY).into_response();
        }
        let detail = match &self {
            Self::Internal(cause) | Self::TryAgain(cause) | Self::Unanswered { cause, .. } => {
                Some(format!("{cause:#}"))
            }
            _ => None,
        };
        let mut response = (status, Json(self.body())).into_response();
        match &self {
            Self::RateLimited(wait) => {
                let secs = retry_after_secs(*wait).max(1);
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            Self::OrderPending => {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(1));
            }
            _ => {}
        }
        if let Some(detail) = detail {
            response.extensions_mut().insert(ErrorDetail(Arc::new(detail)));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_its_contract_status() {
        for (error, status, code) in [
            (ApiError::InvalidRequest("x".into()), 400, "INVALID_REQUEST"),
            (ApiError::PayloadTooLarge(4096), 413, "PAYLOAD_TOO_LARGE"),
            (ApiError::RequestTimeout(Duration::from_secs(10)), 408, "REQUEST_TIMEOUT"),
            (ApiError::UnsupportedMediaType("text/plain".into()), 415, "UNSUPPORTED_MEDIA_TYPE"),
            (ApiError::Unauthorized("x".into()), 401, "UNAUTHORIZED"),
            (ApiError::Forbidden("x".into()), 403, "FORBIDDEN"),
            (ApiError::RateLimited(Duration::from_millis(1)), 429, "RATE_LIMITED"),
            (ApiError::SaleNotFound, 404, "SALE_NOT_FOUND"),
            (ApiError::SaleNotActive, 403, "SALE_NOT_ACTIVE"),
            (ApiError::AlreadyPurchased(None), 409, "ALREADY_PURCHASED"),
            (ApiError::EntriesClosed, 409, "ENTRIES_CLOSED"),
            (ApiError::EntriesFull, 409, "ENTRIES_FULL"),
            (ApiError::SoldOut, 410, "SOLD_OUT"),
            (ApiError::FewerLeft(2), 410, "SOLD_OUT"),
            (ApiError::LimitReached { held: 1, limit: 2 }, 409, "LIMIT_REACHED"),
            (ApiError::OrderNotFound, 404, "ORDER_NOT_FOUND"),
            (ApiError::OrderPending, 409, "ORDER_PENDING"),
            (ApiError::PaymentConflict, 409, "PAYMENT_CONFLICT"),
            (ApiError::AlreadyPaid, 409, "ALREADY_PAID"),
            (ApiError::OrderFailed("NO_DB_STOCK".into()), 409, "ORDER_FAILED"),
            (ApiError::NotFound, 404, "NOT_FOUND"),
            (ApiError::MethodNotAllowed, 405, "METHOD_NOT_ALLOWED"),
            (ApiError::TryAgain(anyhow::anyhow!("x")), 503, "TRY_AGAIN"),
        ] {
            assert_eq!(error.status_code().as_u16(), status, "{code}");
            assert_eq!(error.code().as_str(), code);
        }
    }

    #[test]
    fn the_prebuilt_sold_out_body_is_the_error_body() {
        assert_eq!(serde_json::to_string(&ApiError::SoldOut.body()).unwrap(), SOLD_OUT_BODY);
    }

    #[test]
    fn a_refused_quantity_says_what_is_left_or_held() {
        let fewer = serde_json::to_value(ApiError::FewerLeft(2).body()).unwrap();
        assert_eq!((fewer["code"].as_str(), fewer["available"].as_i64()), (Some("SOLD_OUT"), Some(2)));
        let limit = serde_json::to_value(ApiError::LimitReached { held: 1, limit: 2 }.body()).unwrap();
        assert_eq!((limit["held"].as_i64(), limit["limit"].as_i64()), (Some(1), Some(2)));
        assert!(fewer.get("held").is_none() && limit.get("available").is_none());
    }

    #[test]
    fn a_try_again_never_answers_its_cause() {
        let response = ApiError::TryAgain(anyhow::anyhow!("redis: connection refused to 10.0.0.7")).into_response();
        let detail = response.extensions().get::<ErrorDetail>().expect("the cause is kept for the log");
        assert!(detail.0.contains("10.0.0.7"));
        let body = futures::executor::block_on(axum::body::to_bytes(response.into_body(), 4096)).unwrap();
        let text = String::from_utf8_lossy(&body);
        assert!(!text.contains("10.0.0.7") && text.contains("TRY_AGAIN"), "{text}");
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
    }
}
