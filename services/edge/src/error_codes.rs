//! The contract's error codes, each with the one HTTP status it is
//! answered with: every error of every route (`http/errors/`) and every
//! answer of the order table (`order_answers.rs`) takes its status and code
//! from here, written once.

use serde::Serialize;
use utoipa::ToSchema;

/// Declares the error codes once: the enum, its spelling, its HTTP status
/// and the list (the spelling is also serde's; a test holds the two
/// together).
macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident = $code:literal => $status:literal,)*) => {
        /// The stable codes of the contract's errors.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
        #[serde(rename_all = "SCREAMING_SNAKE_CASE")]
        pub enum ErrorCode {
            $($(#[$doc])* $variant,)*
        }

        impl ErrorCode {
            /// Every code.
            pub const ALL: &'static [ErrorCode] = &[$(Self::$variant,)*];

            /// The contract's spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $code,)*
                }
            }

            /// The HTTP status every answer with this code has.
            pub fn status(self) -> u16 {
                match self {
                    $(Self::$variant => $status,)*
                }
            }
        }
    };
}

error_codes! {
    /// Bad JSON, a missing, unknown or repeated field, a bad id.
    InvalidRequest = "INVALID_REQUEST" => 400,
    /// A body over the limit.
    PayloadTooLarge = "PAYLOAD_TOO_LARGE" => 413,
    /// A body not received within `connections.body_timeout_ms`.
    RequestTimeout = "REQUEST_TIMEOUT" => 408,
    /// A body not declared `application/json`.
    UnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE" => 415,
    /// Missing or bad credentials.
    Unauthorized = "UNAUTHORIZED" => 401,
    /// Credentials of someone else.
    Forbidden = "FORBIDDEN" => 403,
    /// Over a rate limit (`Retry-After`).
    RateLimited = "RATE_LIMITED" => 429,
    /// Unknown or not warmed-up sale.
    SaleNotFound = "SALE_NOT_FOUND" => 404,
    /// Before the sale's start or after its end.
    SaleNotActive = "SALE_NOT_ACTIVE" => 403,
    /// One order per user per sale round.
    AlreadyPurchased = "ALREADY_PURCHASED" => 409,
    /// No unit left.
    SoldOut = "SOLD_OUT" => 410,
    /// The user's units held plus those asked would pass the sale's limit
    /// per user (`held`, `limit`).
    LimitReached = "LIMIT_REACHED" => 409,
    /// The sale admits through its waiting room, and the order carries no
    /// valid admission token for this user, sale and round (or a used one).
    AdmissionRequired = "ADMISSION_REQUIRED" => 403,
    /// A join without the proof of work the room asks, or with a wrong,
    /// expired or replayed one.
    ChallengeFailed = "CHALLENGE_FAILED" => 403,
    /// A draw's entry after its `drawAt` (or once the sale closed), from a
    /// user who holds none: nothing written.
    EntriesClosed = "ENTRIES_CLOSED" => 409,
    /// A draw's entry once the draw holds its most entries (`maxEntries`),
    /// from a user who holds none: nothing written.
    EntriesFull = "ENTRIES_FULL" => 409,
    /// Unknown order.
    OrderNotFound = "ORDER_NOT_FOUND" => 404,
    /// Accepted, not written yet (`Retry-After`).
    OrderPending = "ORDER_PENDING" => 409,
    /// A payment id already recorded for another order.
    PaymentConflict = "PAYMENT_CONFLICT" => 409,
    /// Paid already.
    AlreadyPaid = "ALREADY_PAID" => 409,
    /// The order failed: nothing to pay or cancel.
    OrderFailed = "ORDER_FAILED" => 409,
    /// A warm-up that would disturb orders in flight, or another warm-up.
    SaleBusy = "SALE_BUSY" => 409,
    /// No such path.
    NotFound = "NOT_FOUND" => 404,
    /// The path exists, not with this method (`Allow`).
    MethodNotAllowed = "METHOD_NOT_ALLOWED" => 405,
    /// Redis, Kafka or PostgreSQL unavailable; nothing was kept.
    TryAgain = "TRY_AGAIN" => 503,
    /// 202: Redis did not confirm in time whether the request kept a unit;
    /// the order (its id when known) or the user's result tells.
    Unconfirmed = "UNCONFIRMED" => 202,
    /// An unexpected failure.
    Internal = "INTERNAL" => 500,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_spelled_as_it_serializes() {
        for code in ErrorCode::ALL {
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str(), "{code:?}");
        }
    }
}
