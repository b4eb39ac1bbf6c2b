//! Order status for buyers: Redis for orders still QUEUED (it answers
//! within the sale; the reservation says the units), PostgreSQL for written
//! or failed orders (their payment deadline, payment, cancellation and
//! units live there; a FAILED order Redis undone before it was written has
//! no row, and Redis answers for it) and whenever Redis no
//! longer holds the order — its keys expired, or Redis lost data — or does
//! not answer; when PostgreSQL does not answer, Redis's view of an order it
//! holds is the answer. The SQL here is the edge's own.

use chrono::{DateTime, Utc};
use seckill_shared::domain::{OrderId, OrderStatus, SaleKey, UserId};
use seckill_shared::stock::conn::RedisCallError;
use seckill_shared::stock::Stock;
use sqlx::PgPool;

/// One order's status as the buyer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderView {
    pub order_id: String,
    pub sale: SaleKey,
    pub user_id: i64,
    pub status: OrderStatus,
    /// Why it failed or was cancelled, if it was.
    pub reason: Option<String>,
    /// Until when a CREATED order awaits payment.
    pub pay_deadline: Option<DateTime<Utc>>,
    pub paid_at: Option<DateTime<Utc>>,
    pub cancelled_at: Option<DateTime<Utc>>,
    /// The units it holds, when known (PostgreSQL's row, or a QUEUED
    /// order's reservation).
    pub quantity: Option<i64>,
}

/// Why a status could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// Neither Redis nor PostgreSQL knows the order.
    #[error("order not found")]
    NotFound,
    /// PostgreSQL failed.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// Redis failed and PostgreSQL did not know the order either.
    #[error(transparent)]
    Redis(#[from] RedisCallError),
}

/// Looks an order up by id.
pub async fn order(stock: &Stock, db: &PgPool, order_id: &OrderId) -> Result<OrderView, LookupError> {
    let (in_redis, redis_error) = match stock.orders().order_state_and_trace(order_id).await {
        Ok((Some(found), trace)) => {
            let view = OrderView {
                order_id: order_id.to_string(),
                sale: order_id.sale(),
                user_id: found.user_id,
                status: found.status,
                reason: found.reason,
                pay_deadline: None,
                paid_at: None,
                cancelled_at: None,
                // Not written yet: its reservation says what it holds.
                quantity: trace.map(|t| i64::from(t.held.quantity)),
            };
            if view.status == OrderStatus::Queued {
                return Ok(view);
            }
            (Some(view), None)
        }
        Ok((None, _)) => (None, None),
        Err(error) => (None, Some(error)),
    };
    let row = sqlx::query_as!(
        OrderRow,
        "SELECT order_id, activity_id, sku_id, user_id, status, reason, pay_deadline, paid_at, cancelled_at, quantity
           FROM orders WHERE order_id = $1",
        order_id.as_str()
    )
    .fetch_optional(db)
    .await;
    let row = match (row, &in_redis) {
        (Ok(row), _) => row,
        // PostgreSQL down: what Redis knows (CREATED, CANCELLED: without
        // the deadline and times PostgreSQL keeps) is still the truth.
        (Err(error), Some(_)) => {
            tracing::warn!(%error, "the database did not answer a status read; answering Redis's view");
            None
        }
        (Err(error), None) => return Err(error.into()),
    };
    match (row, in_redis, redis_error) {
        (Some(row), _, _) => Ok(row.into()),
        (None, Some(view), _) => Ok(view),
        (None, None, Some(error)) => Err(error.into()),
        (None, None, None) => Err(LookupError::NotFound),
    }
}

/// The user's order in the sale's current round: the one Redis names, else
/// PostgreSQL's CREATED one, else its latest FAILED one.
pub async fn user_order(stock: &Stock, db: &PgPool, sale: SaleKey, user: UserId) -> Result<OrderView, LookupError> {
    match stock.orders().user_order(sale, user).await {
        Ok(Some(raw)) => {
            if let Ok(order_id) = OrderId::parse(&raw) {
                return order(stock, db, &order_id).await;
            }
        }
        Ok(None) => {}
        Err(error) => tracing::warn!(%error, "redis unavailable for a result lookup; asking the database"),
    }
    let row = sqlx::query_as!(
        OrderRow,
        "SELECT o.order_id, o.activity_id, o.sku_id, o.user_id, o.status, o.reason, o.pay_deadline, o.paid_at, o.cancelled_at,
                o.quantity
           FROM orders o
          WHERE o.activity_id = $1 AND o.sku_id = $2 AND o.user_id = $3
            AND o.round = (SELECT round FROM sales WHERE activity_id = $1 AND sku_id = $2)
          ORDER BY (o.status IN ('CREATED', 'PAID')) DESC, o.created_at DESC
          LIMIT 1",
        sale.activity.get(),
        sale.sku.get(),
        user.get()
    )
    .fetch_optional(db)
    .await?;
    row.map(OrderView::from).ok_or(LookupError::NotFound)
}

/// What a view reads of an order row.
struct OrderRow {
    order_id: String,
    activity_id: i64,
    sku_id: i64,
    user_id: i64,
    status: String,
    reason: Option<String>,
    pay_deadline: Option<DateTime<Utc>>,
    paid_at: Option<DateTime<Utc>>,
    cancelled_at: Option<DateTime<Utc>>,
    quantity: i16,
}

impl From<OrderRow> for OrderView {
    fn from(r: OrderRow) -> Self {
        OrderView {
            sale: SaleKey::from_raw(r.activity_id, r.sku_id).expect("the table holds positive ids"),
            status: OrderStatus::parse(&r.status).unwrap_or(OrderStatus::Failed),
            order_id: r.order_id,
            user_id: r.user_id,
            reason: r.reason,
            pay_deadline: r.pay_deadline,
            paid_at: r.paid_at,
            cancelled_at: r.cancelled_at,
            quantity: Some(i64::from(r.quantity)),
        }
    }
}
