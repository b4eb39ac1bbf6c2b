//! What a buyer can be refused: an order's refusals (the sale, the room,
//! the stock, the limits), a draw's entry, a pay or cancel the order's
//! state refuses, and every request's.

use super::{audience_error, Refused, RequestError};
use crate::error_codes::ErrorCode;
use crate::ledger::PaymentError;
use axum::http::header;
use axum::response::{IntoResponse, Response};

/// Everything the buyers' routes refuse.
#[derive(Debug, thiserror::Error)]
pub enum BuyerError {
    /// Any request's refusal.
    #[error(transparent)]
    Request(#[from] RequestError),
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
    /// One order per user per sale (the user's order, when told).
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
    /// A pay or cancel the order's state refuses.
    #[error(transparent)]
    Payment(PaymentError),
}

audience_error!(BuyerError);

impl IntoResponse for BuyerError {
    fn into_response(self) -> Response {
        match self {
            Self::SoldOut => sold_out(),
            other => other.refused().into_response(),
        }
    }
}

/// The answer most requests of a flash sale get, serialized once (a test
/// keeps it equal to the body it stands for).
const SOLD_OUT_BODY: &str = r#"{"code":"SOLD_OUT","message":"sold out"}"#;

impl BuyerError {
    /// What it answers.
    pub fn refused(&self) -> Refused {
        let plain = |code| Refused::new(code, self);
        match self {
            Self::Request(error) => error.refused(),
            Self::Payment(error) => super::payment_refusal::refused(error),
            Self::SaleNotFound => plain(ErrorCode::SaleNotFound),
            Self::SaleNotActive => plain(ErrorCode::SaleNotActive),
            Self::NotOpenYet(at) => plain(ErrorCode::SaleNotActive).with(|body| body.opens_at = Some(*at)),
            Self::AdmissionRequired(_) => plain(ErrorCode::AdmissionRequired),
            Self::ChallengeFailed(_) => plain(ErrorCode::ChallengeFailed),
            Self::EntriesClosed => plain(ErrorCode::EntriesClosed),
            Self::EntriesFull => plain(ErrorCode::EntriesFull),
            Self::AlreadyPurchased(order_id) => {
                plain(ErrorCode::AlreadyPurchased).with(|body| body.order_id = order_id.clone())
            }
            Self::SoldOut => plain(ErrorCode::SoldOut),
            Self::FewerLeft(available) => plain(ErrorCode::SoldOut).with(|body| body.available = Some(*available)),
            Self::LimitReached { held, limit } => {
                plain(ErrorCode::LimitReached).with(|body| (body.held, body.limit) = (Some(*held), Some(*limit)))
            }
            Self::ReleaseLimitReached { held, limit, release } => plain(ErrorCode::LimitReached)
                .with(|body| (body.held, body.limit, body.release) = (Some(*held), Some(*limit), Some(*release))),
            Self::OrderNotFound => plain(ErrorCode::OrderNotFound),
        }
    }
}

/// Sold out is answered with a body built once: it is most answers of a
/// flash sale.
fn sold_out() -> Response {
    let status = axum::http::StatusCode::from_u16(ErrorCode::SoldOut.status()).expect("410");
    (status, [(header::CONTENT_TYPE, "application/json")], SOLD_OUT_BODY).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_buyer_error_has_its_contract_status() {
        for (error, status, code) in [
            (BuyerError::SaleNotFound, 404, "SALE_NOT_FOUND"),
            (BuyerError::SaleNotActive, 403, "SALE_NOT_ACTIVE"),
            (BuyerError::NotOpenYet(chrono::Utc::now()), 403, "SALE_NOT_ACTIVE"),
            (BuyerError::AdmissionRequired("x".into()), 403, "ADMISSION_REQUIRED"),
            (BuyerError::ChallengeFailed("x".into()), 403, "CHALLENGE_FAILED"),
            (BuyerError::AlreadyPurchased(None), 409, "ALREADY_PURCHASED"),
            (BuyerError::EntriesClosed, 409, "ENTRIES_CLOSED"),
            (BuyerError::EntriesFull, 409, "ENTRIES_FULL"),
            (BuyerError::SoldOut, 410, "SOLD_OUT"),
            (BuyerError::FewerLeft(2), 410, "SOLD_OUT"),
            (BuyerError::LimitReached { held: 1, limit: 2 }, 409, "LIMIT_REACHED"),
            (BuyerError::ReleaseLimitReached { held: 1, limit: 2, release: 3 }, 409, "LIMIT_REACHED"),
            (BuyerError::OrderNotFound, 404, "ORDER_NOT_FOUND"),
            (BuyerError::Payment(PaymentError::Pending), 409, "ORDER_PENDING"),
            (BuyerError::Request(RequestError::NotFound), 404, "NOT_FOUND"),
        ] {
            assert_eq!(error.refused().body().code.as_str(), code);
            assert_eq!(error.into_response().status().as_u16(), status, "{code}");
        }
    }

    #[test]
    fn the_prebuilt_sold_out_body_is_the_error_body() {
        assert_eq!(serde_json::to_string(BuyerError::SoldOut.refused().body()).unwrap(), SOLD_OUT_BODY);
    }

    #[test]
    fn a_refused_quantity_says_what_is_left_or_held() {
        let body = |error: BuyerError| serde_json::to_value(error.refused().body()).unwrap();
        let fewer = body(BuyerError::FewerLeft(2));
        assert_eq!((fewer["code"].as_str(), fewer["available"].as_i64()), (Some("SOLD_OUT"), Some(2)));
        let limit = body(BuyerError::LimitReached { held: 1, limit: 2 });
        assert_eq!((limit["held"].as_i64(), limit["limit"].as_i64()), (Some(1), Some(2)));
        assert!(fewer.get("held").is_none() && limit.get("available").is_none());
    }
}
