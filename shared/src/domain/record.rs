//! The record on `seckill.orders` and how a reader checks it.

use super::ids::{ActivityId, OrderId, SaleKey, SkuId, UserId};
use super::{Holding, MAX_QUANTITY};
use serde::{Deserialize, Serialize};

/// The record on `seckill.orders`, one per accepted order (contract:
/// section 4).
///
/// Compatibility: `v` is the format's major version. Within a major version
/// changes are additive only — a reader ignores fields it does not know and
/// takes every record of its major version; a field that changes meaning is
/// a new major version, which readers of the old one refuse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderRecord {
    /// Minted by the deduction.
    pub order_id: OrderId,
    /// The sale's activity.
    pub activity_id: ActivityId,
    /// The sale's SKU.
    pub sku_id: SkuId,
    /// The buyer; also the record's key.
    pub user_id: UserId,
    /// When Redis accepted it (ms since the epoch, Redis's clock).
    pub accepted_at: i64,
    /// The sale round it was accepted in. Absent from records written before
    /// rounds travelled with orders: those are read as the sale's current
    /// round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<i64>,
    /// Set by `seckillctl dlq redrive`: the dead-lettered order this one
    /// places again for the same buyer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redrive_of: Option<OrderId>,
    /// The units the order holds, 1 to [`MAX_QUANTITY`]. Absent (as from
    /// every producer before quantities, and whenever it is 1): 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub quantity: u32,
    /// Which of the user's places in the round the order holds (0 to
    /// `perUserLimit − 1`; the database keeps one live order per place).
    /// Absent: 0, the one place of a sale with a limit of one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub slot: u32,
    /// Record format major version; 1.
    pub v: u32,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl OrderRecord {
    /// The record format this code writes.
    pub const VERSION: u32 = 1;

    /// The record of an order the deduction accepted in `sale` for `user_id`
    /// (its round not named).
    pub fn new(order_id: OrderId, sale: SaleKey, user_id: UserId, accepted_at: i64) -> Self {
        Self {
            order_id,
            activity_id: sale.activity,
            sku_id: sale.sku,
            user_id,
            accepted_at,
            round: None,
            redrive_of: None,
            quantity: 1,
            slot: 0,
            v: Self::VERSION,
        }
    }

    /// The same record, holding `quantity` units in the user's place `slot`.
    pub fn holding(self, quantity: u32, slot: u32) -> Self {
        Self { quantity, slot, ..self }
    }

    /// What the order holds: its units and its user's place.
    pub fn held(&self) -> Holding {
        Holding { quantity: self.quantity, slot: self.slot }
    }

    /// The same record, naming the round it was accepted in.
    pub fn in_round(self, round: i64) -> Self {
        Self { round: Some(round), ..self }
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
        if !(1..=MAX_QUANTITY).contains(&record.quantity) || record.slot >= MAX_QUANTITY {
            return Err(RecordError::OutOfRange { quantity: record.quantity, slot: record.slot });
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
    /// A quantity outside 1 to [`MAX_QUANTITY`], or a place past the last.
    #[error("quantity {quantity} or slot {slot} out of range")]
    OutOfRange {
        /// The record's quantity.
        quantity: u32,
        /// The record's place.
        slot: u32,
    },
    /// The order id names another sale than the record.
    #[error("order id {order_id} does not belong to sale {sale}")]
    ForeignOrderId {
        /// The record's order id.
        order_id: OrderId,
        /// The record's sale.
        sale: SaleKey,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records as producers wrote them; each must still decode.
    const FIXTURES: [(&str, &str); 3] = [
        ("v1 as first written", include_str!("../../../tests/fixtures/records/orders-v1.json")),
        ("v1 naming its round", include_str!("../../../tests/fixtures/records/orders-v1-round.json")),
        ("v1 from a newer producer", include_str!("../../../tests/fixtures/records/orders-v1-newer.json")),
    ];

    #[test]
    fn every_v1_fixture_decodes() {
        for (name, json) in FIXTURES {
            let record = OrderRecord::decode(json.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                (record.activity_id.get(), record.sku_id.get(), record.user_id.get()),
                (1001, 2001, 42),
                "{name}"
            );
        }
        let round = OrderRecord::decode(FIXTURES[1].1.as_bytes()).unwrap();
        assert_eq!(round.round, Some(3));
    }

    #[test]
    fn another_major_version_is_refused() {
        let v2 = include_str!("../../../tests/fixtures/records/orders-v2.json");
        assert!(matches!(OrderRecord::decode(v2.as_bytes()), Err(RecordError::UnsupportedVersion(2))));
    }

    #[test]
    fn records_round_trip_and_reject_foreign_order_ids() {
        let json = r#"{"orderId":"1-2-3-ab","activityId":1,"skuId":2,"userId":9,"acceptedAt":5,"v":1}"#;
        let record = OrderRecord::decode(json.as_bytes()).expect("valid record");
        assert_eq!(serde_json::to_string(&record).unwrap(), json);
        let with_round = record.clone().in_round(4);
        let json = serde_json::to_string(&with_round).unwrap();
        assert!(json.contains(r#""round":4"#), "{json}");
        assert_eq!(OrderRecord::decode(json.as_bytes()).unwrap(), with_round);
        let foreign = r#"{"orderId":"7-2-3-ab","activityId":1,"skuId":2,"userId":9,"acceptedAt":5,"v":1}"#;
        assert!(OrderRecord::decode(foreign.as_bytes()).is_err());
        assert!(OrderRecord::decode(b"not json").is_err());
    }

    #[test]
    fn a_quantity_travels_and_one_unit_is_written_as_before() {
        let json = r#"{"orderId":"1-2-3-ab","activityId":1,"skuId":2,"userId":9,"acceptedAt":5,"v":1}"#;
        let single = OrderRecord::decode(json.as_bytes()).unwrap();
        assert_eq!((single.quantity, single.slot), (1, 0), "absent: one unit in the first place");
        let two = single.clone().holding(2, 1);
        let written = serde_json::to_string(&two).unwrap();
        assert!(written.contains(r#""quantity":2,"slot":1"#), "{written}");
        assert_eq!(OrderRecord::decode(written.as_bytes()).unwrap(), two);
        assert_eq!(serde_json::to_string(&single.clone().holding(1, 0)).unwrap(), json);
        for (quantity, slot) in [(0, 0), (101, 0), (1, 100)] {
            let bad = serde_json::to_string(&single.clone().holding(quantity, slot)).unwrap();
            assert!(
                matches!(OrderRecord::decode(bad.as_bytes()), Err(RecordError::OutOfRange { .. })),
                "{quantity} in {slot}"
            );
        }
    }
}
