//! Cancelling CREATED orders and giving their units back — the one way the
//! edge (a buyer's cancel, a payment that came after the deadline) and the
//! compensator's deadline worker both take.
//!
//! PostgreSQL decides: a guarded update (`WHERE status = 'CREATED'`) has
//! one winner against a payment or another cancel, and in the same
//! statement the order's round gets its units back in `remaining_stock`
//! (another round's stock was reset by its warm-up: nothing is added).
//! Redis follows afterwards, once per order id (`lua/cancel.lua`), and the
//! row is marked (`unit_returned_at`); an order of a release gives its
//! release's units back too (`Releases::release_give_orders`) before the mark.
//! A crash in between leaves the row CANCELLED and unmarked; the deadline
//! worker finds it and finishes.

use crate::domain::{Holding, OrderId, SaleKey, UserId};
use crate::stock::conn::RedisCallError;
use crate::stock::{Cancelled, Stock};
use sqlx::{PgConnection, PgPool};
use std::collections::BTreeMap;

/// Why an order was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// Not paid by its deadline.
    Expired,
    /// The buyer cancelled it.
    BuyerCancelled,
}

impl CancelReason {
    /// The stable code (the row's and the event's `reason`).
    pub fn code(self) -> &'static str {
        match self {
            Self::Expired => "EXPIRED",
            Self::BuyerCancelled => "BUYER_CANCELLED",
        }
    }

    fn parse(code: &str) -> Self {
        if code == "BUYER_CANCELLED" {
            Self::BuyerCancelled
        } else {
            Self::Expired
        }
    }
}

/// A cancelled order whose units Redis may still have to take back.
#[derive(Debug, Clone)]
pub struct CancelledOrder {
    pub order_id: OrderId,
    pub user: UserId,
    /// Its units, and the user's place it held them in.
    pub held: Holding,
    pub reason: CancelReason,
}

/// Which orders to cancel.
#[derive(Debug, Clone, Copy)]
pub enum Cancel<'a> {
    /// Up to `limit` orders whose deadline has passed, earliest first;
    /// rows another transaction holds are skipped, not waited for.
    Due { limit: i64 },
    /// One order, for `reason`.
    One { order_id: &'a str, reason: CancelReason },
}

/// The guarded cancel and the return of each cancelled order's unit to its
/// own round, in one statement, for the orders `$target` (a SELECT of
/// `order_id, reason`) names; checked at compile time like every query.
macro_rules! cancel {
    ($tx:expr, $target:tt $(, $arg:expr)*) => {
        sqlx::query!(
            "WITH target AS (" + $target + "), cancelled AS (
                UPDATE orders o SET status = 'CANCELLED', reason = t.reason, cancelled_at = clock_timestamp()
                  FROM target t
                 WHERE o.order_id = t.order_id AND o.status = 'CREATED'
             RETURNING o.order_id, o.activity_id, o.sku_id, o.round, o.user_id, o.reason, o.quantity, o.slot
             ), returned AS (
                UPDATE sales s SET remaining_stock = s.remaining_stock + c.n, updated_at = now()
                  FROM (SELECT activity_id, sku_id, round, sum(quantity) AS n FROM cancelled GROUP BY 1, 2, 3) c
                 WHERE s.activity_id = c.activity_id AND s.sku_id = c.sku_id AND s.round = c.round
             )
             SELECT order_id AS \"order_id!\", user_id AS \"user_id!\", reason, quantity AS \"quantity!\",
                    slot AS \"slot!\"
               FROM cancelled"
            $(, $arg)*
        )
        .fetch_all(&mut *$tx)
        .await?
        .into_iter()
        .filter_map(|row| cancelled_order(&row.order_id, row.user_id, row.reason.as_deref(), (row.quantity, row.slot)))
        .collect()
    };
}

/// Cancels in PostgreSQL, inside the caller's transaction; returns the
/// orders cancelled now (none when another transaction won).
#[tracing::instrument(name = "cancellation.cancel", skip_all)]
pub async fn cancel(tx: &mut PgConnection, which: Cancel<'_>) -> sqlx::Result<Vec<CancelledOrder>> {
    Ok(match which {
        Cancel::Due { limit } => cancel!(
            tx,
            "SELECT order_id, 'EXPIRED'::text AS reason FROM orders
              WHERE status = 'CREATED' AND pay_deadline <= clock_timestamp()
              ORDER BY pay_deadline LIMIT $1 FOR UPDATE SKIP LOCKED",
            limit
        ),
        Cancel::One { order_id, reason } => cancel!(
            tx,
            "SELECT order_id, $2::text AS reason FROM orders WHERE order_id = $1 AND status = 'CREATED' FOR UPDATE",
            order_id,
            reason.code()
        ),
    })
}

/// CANCELLED orders whose unit Redis has not been seen to take back, oldest
/// first, but for the sales in `except` (whose Redis failed this round):
/// what a crash between the two steps, or a failing sale, left.
pub async fn unreturned(db: &PgPool, limit: i64, except: &[SaleKey]) -> sqlx::Result<Vec<CancelledOrder>> {
    let activities: Vec<i64> = except.iter().map(|s| s.activity.get()).collect();
    let skus: Vec<i64> = except.iter().map(|s| s.sku.get()).collect();
    let rows = sqlx::query!(
        "SELECT order_id, user_id, reason, quantity, slot FROM orders o
          WHERE status = 'CANCELLED' AND unit_returned_at IS NULL
            AND NOT EXISTS (SELECT 1 FROM unnest($2::bigint[], $3::bigint[]) AS f(a, s)
                             WHERE f.a = o.activity_id AND f.s = o.sku_id)
          ORDER BY cancelled_at LIMIT $1",
        limit,
        &activities,
        &skus
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .iter()
        .filter_map(|row| cancelled_order(&row.order_id, row.user_id, row.reason.as_deref(), (row.quantity, row.slot)))
        .collect())
}

/// A row as a cancelled order; `held`: its quantity and place (in range:
/// the table's checks).
fn cancelled_order(order_id: &str, user_id: i64, reason: Option<&str>, held: (i16, i16)) -> Option<CancelledOrder> {
    Some(CancelledOrder {
        order_id: OrderId::parse(order_id).ok()?,
        user: UserId::new(user_id).ok()?,
        reason: CancelReason::parse(reason.unwrap_or_default()),
        held: Holding { quantity: u32::try_from(held.0).ok()?, slot: u32::try_from(held.1).ok()? },
    })
}

/// Why Redis could not take the units back (the rows stay unmarked: the
/// deadline worker tries again).
#[derive(Debug, thiserror::Error)]
pub enum ReturnError {
    #[error(transparent)]
    Redis(#[from] RedisCallError),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

/// What giving units back came to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Returned {
    /// Units that went back now.
    pub units: i64,
    /// Sales whose Redis failed: their orders stay unmarked, for the next
    /// round; the other sales' went on.
    pub failed: Vec<SaleKey>,
}

/// Gives the units of `orders` (cancelled in PostgreSQL) back in Redis, at
/// most once per order, sale by sale, then marks the rows of the sales
/// that took them: one sale whose Redis fails (logged, counted as
/// `seckill_units_return_failures_total`) stops none of the others.
#[tracing::instrument(name = "cancellation.return_units", skip_all, fields(orders = orders.len()))]
pub async fn return_units(stock: &Stock, db: &PgPool, orders: &[CancelledOrder]) -> Result<Returned, ReturnError> {
    let mut done = Returned::default();
    if orders.is_empty() {
        return Ok(done);
    }
    let mut by_sale: BTreeMap<SaleKey, Vec<Cancelled>> = BTreeMap::new();
    for order in orders {
        by_sale.entry(order.order_id.sale()).or_default().push(Cancelled {
            order_id: order.order_id.clone(),
            user: order.user,
            reason: order.reason.code(),
            held: order.held,
        });
    }
    for (sale, cancelled) in &by_sale {
        // The sale's units, then its release's (a sale in none: one read);
        // both once per order, so a round tried again gives nothing twice.
        let ids: Vec<OrderId> = cancelled.iter().map(|c| c.order_id.clone()).collect();
        let returned = match stock.orders().cancel(*sale, cancelled).await {
            Ok(units) => stock.releases().release_give_orders(&ids).await.map(|_| units),
            Err(error) => Err(error),
        };
        match returned {
            Ok(units) => done.units += units,
            Err(error) => {
                tracing::warn!(%sale, %error, "giving cancelled units back failed; the next round tries again");
                metrics::counter!("seckill_units_return_failures_total").increment(1);
                done.failed.push(*sale);
            }
        }
    }
    let ids: Vec<&str> =
        orders.iter().filter(|o| !done.failed.contains(&o.order_id.sale())).map(|o| o.order_id.as_str()).collect();
    sqlx::query!(
        "UPDATE orders SET unit_returned_at = clock_timestamp()
          WHERE order_id = ANY($1) AND status = 'CANCELLED' AND unit_returned_at IS NULL",
        &ids as &[&str]
    )
    .execute(db)
    .await?;
    metrics::counter!("seckill_units_returned_total").increment(done.units as u64);
    Ok(done)
}
