//! Every JSON body the edge reads or answers, one type each. The handlers
//! return these types and the OpenAPI document ([`super::openapi`])
//! describes the same types (`ToSchema`), so the document cannot drift from
//! the answers. Bodies that belong to the shared library (a sale's row, the
//! reconciliation report) carry their schema there.

use crate::error_codes::ErrorCode;
use crate::lookup::OrderView;
use chrono::{DateTime, Utc};
use seckill_shared::domain::{OrderId, OrderStatus};
use serde::{Deserialize, Serialize, Serializer};
use utoipa::ToSchema;

/// Every error is this body.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Error)]
pub struct ErrorBody {
    /// The stable code.
    pub code: ErrorCode,
    /// In words, for a human.
    pub message: String,
    /// `ALREADY_PURCHASED` only: the user's order in this sale, when the
    /// user was identified (a token, or `auth.allow_anonymous`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub order_id: Option<String>,
    /// `SALE_NOT_ACTIVE` of a join before the pre-queue opens: when it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub opens_at: Option<DateTime<Utc>>,
    /// `SOLD_OUT` of an order asking for more units than are left (but
    /// some are): how many are (absent: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub available: Option<i64>,
    /// `LIMIT_REACHED`: the units the user holds in this sale round (with
    /// `release`: across the release's sizes).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub held: Option<i64>,
    /// `LIMIT_REACHED`: the units one user may hold in this sale round (with
    /// `release`: across the release's sizes).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub limit: Option<i64>,
    /// `LIMIT_REACHED` of a release's limit per customer: the release (its
    /// activity id) whose limit `held` and `limit` are.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub release: Option<i64>,
}

impl ErrorBody {
    /// A body of `code` saying `message`, nothing more.
    pub fn new(code: ErrorCode, message: String) -> Self {
        Self { code, message, order_id: None, opens_at: None, available: None, held: None, limit: None, release: None }
    }
}

/// A buyer's order: `quantity` units (1 when absent), all or none. Read
/// without building a JSON tree (the hot path); `deny_unknown_fields`
/// refuses a key given twice too.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = OrderRequest)]
pub struct OrderRequestBody {
    #[schema(minimum = 1, format = Int64)]
    pub activity_id: i64,
    #[schema(minimum = 1, format = Int64)]
    pub sku_id: i64,
    #[schema(minimum = 1, format = Int64)]
    pub user_id: i64,
    /// Units asked for, 1 to the round's `maxPerOrder` (at most 100): more
    /// than the round's most is 400, more than are left 410 `SOLD_OUT`
    /// (with `available`), more than the buyer's limit allows 409
    /// `LIMIT_REACHED` (with `held` and `limit`); nothing is kept then.
    #[serde(default, deserialize_with = "present")]
    #[schema(minimum = 1, maximum = 100, default = 1, value_type = i64, nullable = false)]
    pub quantity: Option<i64>,
}

/// A field that, when given, is a value (null is refused, not read as
/// absent).
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    i64::deserialize(deserializer).map(Some)
}

/// The one code a queued order answers with.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub enum QueuedCode {
    #[serde(rename = "QUEUED")]
    Queued,
}

/// The order is accepted and queued; follow it by its id.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Queued)]
pub struct QueuedBody {
    pub code: QueuedCode,
    pub order_id: String,
}

impl QueuedBody {
    /// The answer for `order_id`.
    pub fn new(order_id: &OrderId) -> Self {
        Self { code: QueuedCode::Queued, order_id: order_id.as_str().to_owned() }
    }
}

/// Where an order stands.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = OrderStatus)]
pub struct OrderStatusBody {
    pub order_id: String,
    #[schema(minimum = 1, format = Int64)]
    pub activity_id: i64,
    #[schema(minimum = 1, format = Int64)]
    pub sku_id: i64,
    #[schema(minimum = 1, format = Int64)]
    pub user_id: i64,
    /// QUEUED, CREATED (awaiting payment until payDeadline), PAID,
    /// CANCELLED or FAILED.
    pub status: OrderStatus,
    /// Why it failed or was cancelled (a stable code: EXPIRED,
    /// BUYER_CANCELLED, or a failure's), when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub reason: Option<String>,
    /// Until when a written order awaits payment (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "rfc3339_millis")]
    #[schema(nullable = false)]
    pub pay_deadline: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "rfc3339_millis")]
    #[schema(nullable = false)]
    pub paid_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "rfc3339_millis")]
    #[schema(nullable = false)]
    pub cancelled_at: Option<DateTime<Utc>>,
    /// The units the order holds (absent only for an order undone before it
    /// was written, which Redis alone remembers).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, minimum = 1, maximum = 100)]
    pub quantity: Option<i64>,
}

impl From<&OrderView> for OrderStatusBody {
    fn from(view: &OrderView) -> Self {
        Self {
            order_id: view.order_id.clone(),
            activity_id: view.sale.activity.get(),
            sku_id: view.sale.sku.get(),
            user_id: view.user_id,
            status: view.status,
            reason: view.reason.clone(),
            pay_deadline: view.pay_deadline,
            paid_at: view.paid_at,
            cancelled_at: view.cancelled_at,
            quantity: view.quantity,
        }
    }
}

/// Times as the buyer's API has always written them: RFC 3339, to the
/// millisecond, in UTC (`2026-12-01T10:00:00.000Z`).
fn rfc3339_millis<S: Serializer>(at: &Option<DateTime<Utc>>, serializer: S) -> Result<S::Ok, S::Error> {
    match at {
        Some(at) => serializer.serialize_str(&at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        None => serializer.serialize_none(),
    }
}

/// Who cancels: the order's buyer.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = OrderOwner)]
pub struct OrderOwnerBody {
    #[schema(minimum = 1, format = Int64)]
    #[serde(deserialize_with = "seckill_shared::domain::integer::integer")]
    pub user_id: i64,
}

/// The payment provider's notification of a payment. Fields beyond these
/// are allowed (providers add their own: amount, currency, method) and kept
/// in the ledger as sent.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = PaymentNotification)]
pub struct PaymentNotificationBody {
    /// The provider's id of the payment (1 to 128 visible ASCII
    /// characters): the same id again is the same payment.
    pub payment_id: String,
    /// The order it pays, as answered by `POST /api/seckill/order`.
    pub order_id: String,
    /// `SUCCEEDED` is money taken; any other status is acknowledged and
    /// changes nothing.
    pub status: String,
}

/// What became of a notified payment.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PaymentOutcomeCode {
    /// It paid the order: now PAID.
    Applied,
    /// The money is owed back (`refundReason`); listed by `seckillctl payments refunds`.
    RefundDue,
    /// Not a successful payment: nothing recorded.
    Ignored,
}

/// The answer to a notification (the same for a repeat of it).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = PaymentRecorded)]
pub struct PaymentRecordedBody {
    pub payment_id: String,
    pub order_id: String,
    pub outcome: PaymentOutcomeCode,
    /// For `REFUND_DUE`: `ALREADY_PAID`, `ORDER_CANCELLED`, `ORDER_EXPIRED`,
    /// `ORDER_FAILED` or `ORDER_UNKNOWN`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub refund_reason: Option<String>,
}

/// A warm-up: stock is set, never added; buyers cleared.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = Warmup)]
pub struct WarmupBody {
    #[schema(minimum = 0, maximum = 1_000_000_000, format = Int64)]
    #[serde(deserialize_with = "seckill_shared::domain::integer::integer")]
    pub stock: i64,
    /// Open when absent; before `endsAt` when both are given.
    #[serde(default)]
    #[schema(nullable = false)]
    pub starts_at: Option<DateTime<Utc>>,
    /// Open when absent; in the future for a new warm-up (a sale over
    /// before it is warmed up is refused, 400; a warm-up already accepted,
    /// asked again with its id, is finished whatever the time).
    #[serde(default)]
    #[schema(nullable = false)]
    pub ends_at: Option<DateTime<Utc>>,
    /// Replace a round that still has orders in flight.
    #[serde(default)]
    pub force: bool,
    /// How long a CREATED order awaits payment before it is cancelled and
    /// its unit sold again.
    #[serde(default = "default_payment_window")]
    #[schema(minimum = 1, maximum = 604_800, default = 900)]
    #[serde(deserialize_with = "seckill_shared::domain::integer::integer")]
    pub payment_window_seconds: i64,
    /// Stock buckets for a hot sale: its units spread over this many keys,
    /// each in a hash slot of its own (on a Redis Cluster, on different
    /// primaries); each buyer is served by one, units move to a bucket that
    /// ran out.
    #[serde(default = "one_bucket")]
    #[schema(minimum = 1, maximum = 64, default = 1)]
    #[serde(deserialize_with = "seckill_shared::domain::integer::integer")]
    pub buckets: u32,
    /// The warm-up's id (1 to 64 letters, digits, `-`, `_`; or the
    /// `Idempotency-Key` header): the same id asked again finishes or
    /// answers the same warm-up, never a second round. A new one when
    /// absent; the answer's `Seckill-Warmup-Id` header names it.
    #[serde(default)]
    #[schema(nullable = false, pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub warmup_id: Option<String>,
    /// A waiting room in front of the round: buyers join it and order with
    /// the admission token it hands out, admitted by the units left
    /// (README "Waiting room"). Absent: none.
    #[serde(default)]
    #[schema(nullable = false)]
    pub admission: Option<seckill_shared::sales::Admission>,
    /// A draw instead of a waiting room: entries from `entriesOpenAt` to
    /// `drawAt`, one draw anyone can verify, winners given `claimSeconds`
    /// to order (docs/buyers-api.md "Draws"). Absent: none.
    #[serde(default)]
    #[schema(nullable = false)]
    pub draw: Option<seckill_shared::draw::Draw>,
    /// Units one user may hold in the round, over all their live orders
    /// (1 when absent: one unit per user, as before; an order past it is
    /// 409 `LIMIT_REACHED`, or `ALREADY_PURCHASED` with a limit of one).
    #[serde(default, deserialize_with = "some_count")]
    #[schema(minimum = 1, maximum = 100, default = 1, value_type = u32, nullable = false)]
    pub per_user_limit: Option<u32>,
    /// Units one order may hold (at most `perUserLimit`; absent: equal to
    /// it). An order asking for more is 400.
    #[serde(default, deserialize_with = "some_count")]
    #[schema(minimum = 1, maximum = 100, value_type = u32, nullable = false)]
    pub max_per_order: Option<u32>,
}

/// A count that, when given, is an integer (`2.0` counts; null is refused).
fn some_count<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    seckill_shared::domain::integer::integer(deserializer).map(Some)
}

fn default_payment_window() -> i64 {
    seckill_shared::sales::DEFAULT_PAYMENT_WINDOW_SECONDS
}

fn one_bucket() -> u32 {
    1
}
