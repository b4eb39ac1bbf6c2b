//! Domain types: validated ids, the sale key, order status, the Kafka order
//! record and the dead-letter reason codes. Nothing past the edge handles a
//! raw, unchecked id.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Why an id was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdError {
    /// Ids are positive 64-bit integers.
    #[error("{field} must be a positive integer, got {value}")]
    NotPositive { field: &'static str, value: i64 },
    /// Text that is not an integer within i64.
    #[error("{field} must be a positive integer within i64, got '{value}'")]
    NotAnInteger { field: &'static str, value: String },
    /// Order ids look like `activity-sku-seq-nonce`.
    #[error("order id '{0}' is not of the form activity-sku-sequence-nonce")]
    BadOrderId(String),
}

macro_rules! positive_id {
    ($name:ident, $field:literal, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(i64);

        impl $name {
            /// Checks that the id is positive.
            pub fn new(value: i64) -> Result<Self, IdError> {
                if value > 0 {
                    Ok(Self(value))
                } else {
                    Err(IdError::NotPositive { field: $field, value })
                }
            }

            /// The raw id.
            pub fn get(self) -> i64 {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;

            /// Parses a decimal id (path segments, query parameters).
            fn from_str(raw: &str) -> Result<Self, IdError> {
                let value = raw
                    .parse::<i64>()
                    .ok()
                    .filter(|_| !raw.starts_with('+'))
                    .ok_or_else(|| IdError::NotAnInteger { field: $field, value: raw.chars().take(32).collect() })?;
                Self::new(value)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = i64::deserialize(deserializer)?;
                Self::new(value).map_err(serde::de::Error::custom)
            }
        }
    };
}

positive_id!(ActivityId, "activityId", "A flash-sale activity (campaign).");
positive_id!(SkuId, "skuId", "A stock-keeping unit on sale in an activity.");
positive_id!(UserId, "userId", "A buyer.");

/// One sale: an SKU within an activity. All of a sale's Redis keys share the
/// hash tag `{activity:sku}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SaleKey {
    pub activity: ActivityId,
    pub sku: SkuId,
}

impl SaleKey {
    /// A sale from its two ids.
    pub fn new(activity: ActivityId, sku: SkuId) -> Self {
        Self { activity, sku }
    }

    /// From raw ids, validating both.
    pub fn from_raw(activity: i64, sku: i64) -> Result<Self, IdError> {
        Ok(Self::new(ActivityId::new(activity)?, SkuId::new(sku)?))
    }
}

impl fmt::Display for SaleKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.activity, self.sku)
    }
}

/// An order id minted by the deduction: `activity-sku-sequence-nonce`, so it
/// names its sale (and so its Redis hash tag) by itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct OrderId(String);

impl OrderId {
    /// Parses and validates an order id.
    pub fn parse(raw: &str) -> Result<Self, IdError> {
        let bad = || IdError::BadOrderId(raw.chars().take(64).collect());
        let parts: Vec<&str> = raw.split('-').collect();
        if parts.len() != 4 || raw.len() > 96 {
            return Err(bad());
        }
        for part in &parts[..3] {
            match part.parse::<i64>() {
                Ok(n) if n > 0 && !part.starts_with('+') => {}
                _ => return Err(bad()),
            }
        }
        if parts[3].is_empty() || !parts[3].chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(bad());
        }
        Ok(Self(raw.to_owned()))
    }

    /// The sale this order belongs to.
    pub fn sale(&self) -> SaleKey {
        let mut parts = self.0.split('-').map(|p| p.parse::<i64>().unwrap_or(0));
        // parse() checked both are positive integers.
        let activity = parts.next().unwrap_or(0);
        let sku = parts.next().unwrap_or(0);
        SaleKey::from_raw(activity, sku).expect("validated in OrderId::parse")
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OrderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for OrderId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// Where an order stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum OrderStatus {
    /// Accepted by the edge, not yet settled.
    Queued,
    /// Written to PostgreSQL: the user bought the unit.
    Created,
    /// Will never be written; the unit went back (or was written off).
    Failed,
}

impl OrderStatus {
    /// The contract's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "QUEUED",
            Self::Created => "CREATED",
            Self::Failed => "FAILED",
        }
    }

    /// Parses the contract's spelling.
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "QUEUED" => Some(Self::Queued),
            "CREATED" => Some(Self::Created),
            "FAILED" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// The record on `seckill.orders`, one per accepted order (contract: section 4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OrderRecord {
    /// Minted by the deduction.
    pub order_id: OrderId,
    /// The sale's activity.
    pub activity_id: ActivityId,
    /// The sale's SKU.
    pub sku_id: SkuId,
    /// The buyer; also the record's key.
    pub user_id: UserId,
    /// When the edge accepted it (ms since the epoch).
    pub accepted_at: i64,
    /// Record format version; 1.
    pub v: u32,
}

impl OrderRecord {
    /// The record format this code writes.
    pub const VERSION: u32 = 1;

    /// The record of an order the deduction accepted in `sale` for `user_id`.
    pub fn new(order_id: OrderId, sale: SaleKey, user_id: UserId, accepted_at: i64) -> Self {
        Self { order_id, activity_id: sale.activity, sku_id: sale.sku, user_id, accepted_at, v: Self::VERSION }
    }

    /// The sale the record is for.
    pub fn sale(&self) -> SaleKey {
        SaleKey::new(self.activity_id, self.sku_id)
    }

    /// Decodes and checks a record: the order id must name the same sale.
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        let record: Self = serde_json::from_slice(bytes)?;
        if record.v != Self::VERSION {
            return Err(RecordError::UnsupportedVersion(record.v));
        }
        if record.order_id.sale() != record.sale() {
            return Err(RecordError::ForeignOrderId { order_id: record.order_id.clone(), sale: record.sale() });
        }
        Ok(record)
    }
}

/// Why a record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// No value at all.
    #[error("empty record")]
    Empty,
    /// Not JSON, or not a record of this shape.
    #[error("not an order record: {0}")]
    Json(#[from] serde_json::Error),
    /// A format version this code does not read.
    #[error("unsupported record version {0}")]
    UnsupportedVersion(u32),
    /// The order id names another sale than the record.
    #[error("order id {order_id} does not belong to sale {sale}")]
    ForeignOrderId {
        /// The record's order id.
        order_id: OrderId,
        /// The record's sale.
        sale: SaleKey,
    },
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
}

impl FailReason {
    /// Every reason, for parsing and listing.
    pub const ALL: [FailReason; 7] = [
        Self::Malformed,
        Self::NoDbStock,
        Self::DuplicateUser,
        Self::SaleNotFound,
        Self::DbRejected,
        Self::PublishLost,
        Self::PublishFailed,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_ids_name_their_sale() {
        let id = OrderId::parse("1001-2001-42-9f3a1c07").expect("valid id");
        assert_eq!(id.sale(), SaleKey::from_raw(1001, 2001).unwrap());
    }

    #[test]
    fn malformed_order_ids_are_refused() {
        for (raw, why) in [
            ("", "empty"),
            ("1001-2001-42", "three parts"),
            ("0-2001-42-ab", "zero activity"),
            ("-1-2001-42-ab", "negative activity"),
            ("1001-x-42-ab", "non-numeric sku"),
            ("1001-2001-42-a b", "space in nonce"),
            ("1001-2001-42-", "empty nonce"),
            ("+1-2-3-ab", "explicit plus sign"),
        ] {
            assert!(OrderId::parse(raw).is_err(), "{why}: {raw:?} must be refused");
        }
    }

    #[test]
    fn ids_must_be_positive() {
        assert!(UserId::new(0).is_err());
        assert!(UserId::new(-5).is_err());
        assert_eq!(UserId::new(7).unwrap().get(), 7);
    }

    #[test]
    fn ids_parse_from_text() {
        assert_eq!("42".parse::<ActivityId>().unwrap().get(), 42);
        for (raw, why) in [("0", "zero"), ("-3", "negative"), ("abc", "not a number"), ("+5", "plus sign"), ("", "empty"), ("99999999999999999999", "beyond i64")] {
            let error = raw.parse::<SkuId>().expect_err(why);
            assert!(error.to_string().contains("skuId"), "{why}: {error}");
        }
    }

    #[test]
    fn records_round_trip_and_reject_foreign_order_ids() {
        let json = r#"{"orderId":"1-2-3-ab","activityId":1,"skuId":2,"userId":9,"acceptedAt":5,"v":1}"#;
        let record = OrderRecord::decode(json.as_bytes()).expect("valid record");
        assert_eq!(serde_json::to_string(&record).unwrap(), json);
        let foreign = r#"{"orderId":"7-2-3-ab","activityId":1,"skuId":2,"userId":9,"acceptedAt":5,"v":1}"#;
        assert!(OrderRecord::decode(foreign.as_bytes()).is_err());
        assert!(OrderRecord::decode(b"not json").is_err());
    }

    #[test]
    fn reasons_round_trip() {
        for reason in FailReason::ALL {
            assert_eq!(FailReason::parse(reason.code()), Some(reason));
        }
        assert!(!FailReason::DuplicateUser.lets_user_retry());
        assert!(FailReason::NoDbStock.lets_user_retry());
    }
}
