//! Validated ids and the sale key. Nothing past the edge handles a raw,
//! unchecked id: each is checked once, when it is made.

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
        for (raw, why) in [
            ("0", "zero"),
            ("-3", "negative"),
            ("abc", "not a number"),
            ("+5", "plus sign"),
            ("", "empty"),
            ("99999999999999999999", "beyond i64"),
        ] {
            let error = raw.parse::<SkuId>().expect_err(why);
            assert!(error.to_string().contains("skuId"), "{why}: {error}");
        }
    }
}
