//! Where an order stands, and why one failed: the codes clients, operators
//! and downstream consumers read.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Where an order stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "UPPERCASE")]
#[schema(as = Status)]
pub enum OrderStatus {
    /// Accepted by the edge, not yet settled.
    Queued,
    /// Written to PostgreSQL: the user holds the unit, awaiting payment
    /// until the order's deadline.
    Created,
    /// Will never be written; the unit went back (or was written off).
    Failed,
    /// A CREATED order whose payment was confirmed in time.
    Paid,
    /// A CREATED order not paid by its deadline, or cancelled by the buyer:
    /// its unit went back to its sale round.
    Cancelled,
}

impl OrderStatus {
    /// The contract's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "QUEUED",
            Self::Created => "CREATED",
            Self::Failed => "FAILED",
            Self::Paid => "PAID",
            Self::Cancelled => "CANCELLED",
        }
    }

    /// Parses the contract's spelling.
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "QUEUED" => Some(Self::Queued),
            "CREATED" => Some(Self::Created),
            "FAILED" => Some(Self::Failed),
            "PAID" => Some(Self::Paid),
            "CANCELLED" => Some(Self::Cancelled),
            _ => None,
        }
    }
}

/// Why a record went to the dead-letter topic (`dlq.reason`), or why an
/// order FAILED. Stable codes: operators filter on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailReason {
    /// The record could not be decoded.
    Malformed,
    /// PostgreSQL had no stock left for it.
    NoDbStock,
    /// The user already holds a CREATED order in this sale.
    DuplicateUser,
    /// The sale does not exist in PostgreSQL.
    SaleNotFound,
    /// PostgreSQL refused the row for another reason.
    DbRejected,
    /// The edge deducted but the record never reached the order service
    /// (set by the reservation sweeper).
    PublishLost,
    /// The edge's publish definitely failed and it rolled the unit back.
    PublishFailed,
    /// The order belongs to a sale round that a warm-up has replaced since:
    /// it can never be an order of the new round.
    RoundReplaced,
    /// The edge never heard its deduction's outcome and voided the call:
    /// the buyer was answered 503 and nothing was kept (Redis only; never
    /// in PostgreSQL).
    Voided,
}

impl FailReason {
    /// Every reason, for parsing and listing.
    pub const ALL: [FailReason; 9] = [
        Self::Malformed,
        Self::NoDbStock,
        Self::DuplicateUser,
        Self::SaleNotFound,
        Self::DbRejected,
        Self::PublishLost,
        Self::PublishFailed,
        Self::RoundReplaced,
        Self::Voided,
    ];

    /// The stable code.
    pub fn code(self) -> &'static str {
        match self {
            Self::Malformed => "MALFORMED",
            Self::NoDbStock => "NO_DB_STOCK",
            Self::DuplicateUser => "DUPLICATE_USER",
            Self::SaleNotFound => "SALE_NOT_FOUND",
            Self::DbRejected => "DB_REJECTED",
            Self::PublishLost => "PUBLISH_LOST",
            Self::PublishFailed => "PUBLISH_FAILED",
            Self::RoundReplaced => "ROUND_REPLACED",
            Self::Voided => "VOIDED",
        }
    }

    /// Parses a stable code.
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.code() == code)
    }

    /// Whether the user may try again after an order failed for this reason.
    /// A second order of the same user must not free the user's first one.
    pub fn lets_user_retry(self) -> bool {
        !matches!(self, Self::DuplicateUser)
    }
}

impl fmt::Display for FailReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// An order's fate as PostgreSQL decided it: its first row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// The user bought the unit.
    Created,
    /// The order will never be written; why.
    Failed(FailReason),
}

impl Fate {
    /// From a row's `status` and `reason` columns (an unknown reason reads as
    /// `DB_REJECTED`). A PAID or CANCELLED order was created: what happened
    /// after is its lifecycle's, not the pipeline's.
    pub fn from_row(status: &str, reason: Option<&str>) -> Self {
        match status {
            "CREATED" | "PAID" | "CANCELLED" => Self::Created,
            _ => Self::Failed(reason.and_then(FailReason::parse).unwrap_or(FailReason::DbRejected)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_round_trip() {
        for reason in FailReason::ALL {
            assert_eq!(FailReason::parse(reason.code()), Some(reason));
        }
        assert!(!FailReason::DuplicateUser.lets_user_retry());
        assert!(FailReason::NoDbStock.lets_user_retry());
    }

    #[test]
    fn fates_read_from_rows() {
        assert_eq!(Fate::from_row("CREATED", None), Fate::Created);
        assert_eq!(Fate::from_row("PAID", None), Fate::Created);
        assert_eq!(Fate::from_row("CANCELLED", Some("EXPIRED")), Fate::Created);
        assert_eq!(Fate::from_row("FAILED", Some("NO_DB_STOCK")), Fate::Failed(FailReason::NoDbStock));
        assert_eq!(Fate::from_row("FAILED", Some("SOMETHING_NEW")), Fate::Failed(FailReason::DbRejected));
    }
}
