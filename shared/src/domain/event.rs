//! The record on `seckill.order-events`: one per change of an order's
//! status, for the teams downstream (payment, notification, fulfilment,
//! analytics).
//!
//! Key: the user id, so one consumer sees all of a user's events, and every
//! event of one order, in the order they happened. `eventId` is stable
//! (`<orderId>:<type>`, and `<orderId>:REFUND_DUE:<paymentId>`): an event sent twice (a relay restarted before it
//! marked what it had sent) is the same event, for the consumer to drop.
//! Headers carry `x-request-id` and `traceparent` of the order's request
//! when the order came through the edge. Compatibility as for the order
//! record: `v` is the major version; within it, fields are only added.

use super::ids::{ActivityId, OrderId, SkuId, UserId};
use super::OrderRecord;
use serde::{Deserialize, Serialize};

/// One state change of one order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderEvent {
    /// Stable: `<orderId>:<type>`.
    pub event_id: String,
    /// What happened: `CREATED` (awaiting payment), `FAILED`, `PAID`,
    /// `CANCELLED`, `REFUND_DUE` (a payment the order could not take — paid
    /// already, cancelled, expired, failed — is owed back; the order stays
    /// as it was), or `PAYMENT_LATE` (before the payments ledger: a payment
    /// after the cancellation, recorded for a refund).
    #[serde(rename = "type")]
    pub kind: String,
    pub order_id: OrderId,
    pub activity_id: ActivityId,
    pub sku_id: SkuId,
    /// The sale round the order belongs to.
    pub round: i64,
    pub user_id: UserId,
    /// Why, for `FAILED` and `CANCELLED` (`EXPIRED`, `BUYER_CANCELLED`),
    /// for `REFUND_DUE` (`ALREADY_PAID`, `ORDER_CANCELLED`, `ORDER_EXPIRED`,
    /// `ORDER_FAILED`), and `ORDER_CANCELLED` for `PAYMENT_LATE`: a stable code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `PAID` and `REFUND_DUE`: the payment provider's id of the payment
    /// (`legacy:<orderId>` for an order paid before the payments ledger).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_id: Option<String>,
    /// An order placed again from the dead-letter topic (`seckillctl dlq
    /// redrive`): the dead-lettered order it replaces, on each of its
    /// status events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redrive_of: Option<String>,
    /// The units the order holds (a CANCELLED or FAILED order gave all of
    /// them back). Absent from events written before quantities: 1.
    #[serde(default = "one")]
    pub quantity: u32,
    /// When the change was written (ms since the epoch, PostgreSQL's
    /// clock); for `CREATED`, when the order was accepted (Redis's clock,
    /// the record's `acceptedAt`: the same whenever the event is sent again).
    pub occurred_at: i64,
    /// Event format major version; 1.
    pub v: u32,
}

fn one() -> u32 {
    1
}

impl OrderEvent {
    /// The format this code writes.
    pub const VERSION: u32 = 1;

    /// The `CREATED` event of the order `record` placed, in the round of
    /// its row (the record names it once written; else round 0).
    pub fn created(record: &OrderRecord) -> Self {
        Self {
            event_id: format!("{}:CREATED", record.order_id),
            kind: "CREATED".to_owned(),
            order_id: record.order_id.clone(),
            activity_id: record.activity_id,
            sku_id: record.sku_id,
            round: record.round.unwrap_or_default(),
            user_id: record.user_id,
            reason: None,
            payment_id: None,
            redrive_of: record.redrive_of.as_ref().map(|id| id.to_string()),
            quantity: record.quantity,
            occurred_at: record.accepted_at,
            v: Self::VERSION,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_event_is_the_same_whenever_it_is_made() {
        let id = OrderId::parse("1001-2001-7-9f3a1c07").unwrap();
        let sale = crate::domain::SaleKey::new(ActivityId::new(1001).unwrap(), SkuId::new(2001).unwrap());
        let mut record = OrderRecord::new(id, sale, UserId::new(7).unwrap(), 1_700_000_000_123);
        record.round = Some(3);
        record.quantity = 2;
        let event = OrderEvent::created(&record);
        assert_eq!((event.event_id.as_str(), event.kind.as_str()), ("1001-2001-7-9f3a1c07:CREATED", "CREATED"));
        assert_eq!((event.round, event.quantity, event.occurred_at), (3, 2, 1_700_000_000_123));
        assert_eq!(serde_json::to_vec(&event).unwrap(), serde_json::to_vec(&OrderEvent::created(&record)).unwrap());
    }

    #[test]
    fn a_v1_event_fixture_decodes() {
        let json = include_str!("../../../tests/fixtures/records/order-events-v1.json");
        let event: OrderEvent = serde_json::from_str(json).expect("a v1 event");
        assert_eq!((event.kind.as_str(), event.event_id.as_str()), ("FAILED", "1001-2001-7-9f3a1c07:FAILED"));
        assert_eq!(event.reason.as_deref(), Some("NO_DB_STOCK"));
        assert_eq!(event.quantity, 1, "written before quantities: one unit");
    }
}
