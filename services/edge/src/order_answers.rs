//! Every way `POST /api/seckill/order` can end, in one table: each answer
//! with its HTTP status and code, what Redis and PostgreSQL hold after it,
//! and what the buyer may rely on. Every error path of the route maps into
//! it (`http/buyers/order_outcome.rs`'s `answer_of`), every code of `lua/deduct.lua` too
//! ([`OrderAnswer::of_deduction`]); `seckill_edge_orders_total` counts by
//! it. docs/buyers-api.md and ARCHITECTURE.md show [`OrderAnswer::table`];
//! a test fails when they differ, or when a deduction code has no row.

use crate::error_codes::ErrorCode;
use metrics::Counter;
use seckill_shared::stock::protocol::deduct;
use std::sync::LazyLock;

/// Declares the answers once: the enum and [`OrderAnswer::ALL`] in the
/// table's order, so a new answer is in the table (its row is asked for by
/// [`OrderAnswer::row`]'s match) the moment it exists.
macro_rules! order_answers {
    ($($variant:ident),* $(,)?) => {
        /// One way an order request ends.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum OrderAnswer {
            $($variant,)*
        }

        impl OrderAnswer {
            /// Every answer, in the table's order.
            pub const ALL: &'static [OrderAnswer] = &[$(Self::$variant,)*];
        }
    };
}

order_answers! {
    Queued,
    Unconfirmed,
    AlreadyPurchased,
    LimitReached,
    SoldOut,
    SaleNotFound,
    SaleNotActive,
    AdmissionRequired,
    Unauthorized,
    Forbidden,
    RateLimited,
    InvalidRequest,
    PayloadTooLarge,
    UnsupportedMediaType,
    RequestTimeout,
    MethodNotAllowed,
    TryAgain,
    Internal,
}

/// An answer's row: HTTP status and code, when it is answered, what Redis
/// and PostgreSQL hold afterwards, what the buyer may rely on.
pub struct Row {
    pub status: u16,
    pub code: &'static str,
    pub when: &'static str,
    pub redis: &'static str,
    pub postgres: &'static str,
    pub promise: &'static str,
}

/// `seckill_edge_orders_total`, one counter per answer, in
/// [`OrderAnswer::ALL`]'s order: each handle made once, not looked up on
/// every order.
static ORDERS: LazyLock<Vec<Counter>> = LazyLock::new(|| {
    OrderAnswer::ALL
        .iter()
        .map(|answer| metrics::counter!("seckill_edge_orders_total", "outcome" => answer.code()))
        .collect()
});

const NOTHING: &str = "nothing of this request";

/// What an answer says: the order taken (202 `QUEUED`, the only answer
/// that is not an [`ErrorCode`]), or a code, whose status is its own.
enum Said {
    Queued,
    Code(ErrorCode),
}

impl OrderAnswer {
    /// The answer's row: a refusal's status and code are its
    /// [`ErrorCode`]'s, written there once.
    pub fn row(self) -> Row {
        let row = |said: Said, when, redis, postgres, promise| {
            let (status, code) = match said {
                Said::Queued => (202, "QUEUED"),
                Said::Code(code) => (code.status(), code.as_str()),
            };
            Row { status, code, when, redis, postgres, promise }
        };
        let refused = |code, when| row(Said::Code(code), when, NOTHING, NOTHING, "nothing was kept");
        use ErrorCode as C;
        match self {
            Self::Queued => row(
                Said::Queued,
                "the unit deducted and its record delivered to Kafka (or maybe delivered: the sweeper publishes it again)",
                "a unit taken, the order QUEUED and reserved (confirmed by the replicas)",
                "the order's row, CREATED once the order service writes it",
                "the buyer gets the order unless they cancel it or let the payment window lapse",
            ),
            Self::Unconfirmed => row(
                Said::Code(C::Unconfirmed),
                "neither the deduction nor its void (or rollback) confirmed by Redis in time",
                "a unit taken or not: the void (or rollback) goes on in the background",
                "maybe the order's row, later",
                "nothing yet: poll the order (its id, when known) or the user's result",
            ),
            Self::AlreadyPurchased => row(
                Said::Code(C::AlreadyPurchased),
                "the user holds an order of the round",
                "the user's earlier order, unchanged",
                "the earlier order's row",
                "nothing new was kept; the user holds their order",
            ),
            Self::LimitReached => row(
                Said::Code(C::LimitReached),
                "the units the user holds in the round plus those asked pass its perUserLimit (held, limit), or across a release's sizes its perCustomerLimit (held, limit, release)",
                "the user's earlier orders, unchanged",
                "the earlier orders' rows",
                "nothing new was kept; the user may order up to limit - held",
            ),
            Self::SoldOut => refused(
                C::SoldOut,
                "fewer units left in every bucket than asked (available, when some are), or the local sold-out flag",
            ),
            Self::SaleNotFound => refused(C::SaleNotFound, "no round of the sale in Redis"),
            Self::SaleNotActive => refused(C::SaleNotActive, "before the sale's start or after its end"),
            Self::AdmissionRequired => {
                refused(C::AdmissionRequired, "a room-guarded sale and no valid admission token")
            }
            Self::Unauthorized => refused(C::Unauthorized, "user auth on, the token missing or invalid"),
            Self::Forbidden => refused(C::Forbidden, "the token names another user"),
            Self::RateLimited => refused(C::RateLimited, "over the global, per-client or per-user limit"),
            Self::InvalidRequest => {
                refused(C::InvalidRequest, "a body that is not the contract's, or a quantity over maxPerOrder")
            }
            Self::PayloadTooLarge => refused(C::PayloadTooLarge, "a body over the limit"),
            Self::UnsupportedMediaType => refused(C::UnsupportedMediaType, "a body not declared JSON"),
            Self::RequestTimeout => refused(C::RequestTimeout, "a body not received in time"),
            Self::MethodNotAllowed => refused(C::MethodNotAllowed, "a method the route does not serve"),
            Self::TryAgain => row(
                Said::Code(C::TryAgain),
                "Redis, Kafka or the edge's capacity unavailable, a call voided, a warm-up replacing the round",
                "nothing of this request: a deduction undone is on the replicas before this is answered",
                NOTHING,
                "nothing was kept; the same request may be sent again",
            ),
            Self::Internal => row(
                Said::Code(C::Internal),
                "an unexpected failure (a bug)",
                "unknown",
                "unknown",
                "nothing: poll the user's result",
            ),
        }
    }

    /// Whether the request may have kept something (a unit, an admission's
    /// claim): a 202 `QUEUED` did, a 202 `UNCONFIRMED` or an unexpected
    /// failure may have; every refusal and every 503 `TRY_AGAIN` kept
    /// nothing. Every answer says which, here: a new one must too.
    pub fn may_have_kept(self) -> bool {
        match self {
            Self::Queued | Self::Unconfirmed | Self::Internal => true,
            Self::AlreadyPurchased
            | Self::LimitReached
            | Self::SoldOut
            | Self::SaleNotFound
            | Self::SaleNotActive
            | Self::AdmissionRequired
            | Self::Unauthorized
            | Self::Forbidden
            | Self::RateLimited
            | Self::InvalidRequest
            | Self::PayloadTooLarge
            | Self::UnsupportedMediaType
            | Self::RequestTimeout
            | Self::MethodNotAllowed
            | Self::TryAgain => false,
        }
    }

    /// The contract's code (and `seckill_edge_orders_total`'s label).
    pub fn code(self) -> &'static str {
        self.row().code
    }

    /// Counts an order request that ended in this answer.
    pub fn count(self) {
        ORDERS[self as usize].increment(1);
    }

    /// The answer a code of `lua/deduct.lua` becomes (a code it does not
    /// know: `None`).
    pub fn of_deduction(code: i64) -> Option<Self> {
        Some(match code {
            deduct::ACCEPTED => Self::Queued,
            deduct::SALE_NOT_FOUND => Self::SaleNotFound,
            deduct::SALE_NOT_ACTIVE => Self::SaleNotActive,
            deduct::ALREADY_PURCHASED => Self::AlreadyPurchased,
            deduct::SOLD_OUT => Self::SoldOut,
            deduct::VOIDED | deduct::OTHER_BUCKET | deduct::WARMING => Self::TryAgain,
            deduct::ADMISSION_REQUIRED => Self::AdmissionRequired,
            deduct::LIMIT_REACHED => Self::LimitReached,
            deduct::OVER_MAX_PER_ORDER => Self::InvalidRequest,
            _ => return None,
        })
    }

    /// The table as markdown, as the docs show it: the `deduct.lua` codes
    /// each answer comes from are read from the protocol.
    pub fn table() -> String {
        let mut out = String::from(
            "| answer | when | from `deduct.lua` | Redis holds after it | PostgreSQL holds after it | the buyer may rely on |\n\
             |---|---|---|---|---|---|\n",
        );
        for &answer in Self::ALL {
            let r = answer.row();
            let codes: Vec<String> = deduct::ANSWERS
                .codes
                .iter()
                .filter(|(code, _, _)| Self::of_deduction(*code) == Some(answer))
                .map(|(code, name, _)| format!("{code} {name}"))
                .collect();
            let from = if codes.is_empty() { "-".to_owned() } else { codes.join(", ") };
            out.push_str(&format!(
                "| {} `{}` | {} | {from} | {} | {} | {} |\n",
                r.status, r.code, r.when, r.redis, r.postgres, r.promise
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_deduction_code_has_a_row_and_every_row_its_contract_code() {
        for (code, name, _) in deduct::ANSWERS.codes {
            let answer = OrderAnswer::of_deduction(*code).unwrap_or_else(|| panic!("deduct.lua's {name} has no row"));
            assert_ne!(answer, OrderAnswer::Internal, "{name}");
        }
        assert_eq!(OrderAnswer::of_deduction(-99), None);
        for (at, &answer) in OrderAnswer::ALL.iter().enumerate() {
            assert_eq!(answer as usize, at, "{answer:?} stands at its place in ALL: its counter is found by it");
        }
    }
}
