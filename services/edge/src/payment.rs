//! A buyer's payment confirmation and cancel. The order's row decides,
//! under a row lock: a payment before the deadline wins the CREATED row
//! (PAID); a cancel, or a payment after the deadline, cancels it through
//! the shared guarded update that gives the unit back. A payment that finds
//! the order cancelled is recorded for a refund (`late_payments`, with its
//! PAYMENT_LATE event). The SQL here is the edge's own.

use crate::lookup::{self, LookupError, OrderView};
use seckill_shared::cancellation::{self, Cancel, CancelReason, CancelledOrder};
use seckill_shared::domain::{OrderId, OrderStatus, UserId};
use seckill_shared::stock::Stock;
use sqlx::{PgConnection, PgPool};

/// Why a payment or cancel was refused.
#[derive(Debug, thiserror::Error)]
pub enum PaymentError {
    #[error("order not found")]
    NotFound,
    /// Accepted, not written yet.
    #[error("order pending")]
    Pending,
    #[error("the order is another user's")]
    NotOwner,
    /// Cancelled before this payment (recorded for a refund).
    #[error("payment late")]
    PaymentLate,
    #[error("already paid")]
    AlreadyPaid,
    /// FAILED, for this reason.
    #[error("order failed: {0}")]
    Failed(String),
    #[error(transparent)]
    Lookup(#[from] LookupError),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

/// The row, locked for the transaction.
struct Locked {
    status: String,
    user_id: i64,
    activity_id: i64,
    sku_id: i64,
    round: i32,
    reason: Option<String>,
    payment_key: Option<String>,
    due: bool,
}

async fn lock_row(
    tx: &mut PgConnection,
    stock: &Stock,
    order_id: &OrderId,
    user: UserId,
) -> Result<Locked, PaymentError> {
    let row = sqlx::query_as!(
        Locked,
        r#"SELECT status, user_id, activity_id, sku_id, round, reason, payment_key,
                  COALESCE(pay_deadline <= clock_timestamp(), false) AS "due!"
             FROM orders WHERE order_id = $1 FOR UPDATE"#,
        order_id.as_str()
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(locked) = row else {
        // Not written yet, or never accepted: Redis knows which.
        return match stock.order_state(order_id).await {
            Ok(Some(state)) if state.user_id != user.get() => Err(PaymentError::NotOwner),
            // Rolled back by the edge (its buyer was told 503): never written.
            Ok(Some(state)) if state.status == OrderStatus::Failed => {
                Err(PaymentError::Failed(state.reason.unwrap_or_else(|| "FAILED".into())))
            }
            Ok(Some(_)) => Err(PaymentError::Pending),
            Ok(None) => Err(PaymentError::NotFound),
            Err(error) => Err(LookupError::from(error).into()),
        };
    };
    if locked.user_id != user.get() {
        return Err(PaymentError::NotOwner);
    }
    Ok(locked)
}

/// Confirms `user`'s payment for the order. A repeat (the same key, or
/// none) answers the order as it stands.
pub async fn pay(
    stock: &Stock,
    db: &PgPool,
    order_id: &OrderId,
    user: UserId,
    key: Option<&str>,
) -> Result<OrderView, PaymentError> {
    let mut tx = db.begin().await?;
    let row = lock_row(&mut tx, stock, order_id, user).await?;
    let mut cancelled = Vec::new();
    match row.status.as_str() {
        "CREATED" if !row.due => {
            sqlx::query!(
                "UPDATE orders SET status = 'PAID', paid_at = clock_timestamp(), payment_key = $2 WHERE order_id = $1",
                order_id.as_str(),
                key
            )
            .execute(&mut *tx)
            .await?;
        }
        "CREATED" => {
            // The deadline passed and the worker has not come by yet: the
            // deadline wins, now.
            cancelled = cancellation::cancel(
                &mut tx,
                Cancel::One { order_id: order_id.as_str(), reason: CancelReason::Expired },
            )
            .await?;
            record_late_payment(&mut tx, order_id, &row, key).await?;
        }
        "PAID" => match (row.payment_key.as_deref(), key) {
            (Some(paid_with), Some(asked)) if paid_with != asked => return Err(PaymentError::AlreadyPaid),
            _ => {}
        },
        "CANCELLED" => record_late_payment(&mut tx, order_id, &row, key).await?,
        _ => return Err(PaymentError::Failed(row.reason.unwrap_or_default())),
    }
    tx.commit().await?;
    if row.status == "CREATED" && row.due || row.status == "CANCELLED" {
        give_back(stock, db, &cancelled).await;
        metrics::counter!("seckill_payments_late_total").increment(1);
        return Err(PaymentError::PaymentLate);
    }
    Ok(lookup::order(stock, db, order_id).await?)
}

/// Cancels `user`'s order; a repeat answers the cancelled order, and gives
/// nothing back twice.
pub async fn cancel(stock: &Stock, db: &PgPool, order_id: &OrderId, user: UserId) -> Result<OrderView, PaymentError> {
    let mut tx = db.begin().await?;
    let row = lock_row(&mut tx, stock, order_id, user).await?;
    let cancelled = match row.status.as_str() {
        "CREATED" => {
            let reason = if row.due { CancelReason::Expired } else { CancelReason::BuyerCancelled };
            cancellation::cancel(&mut tx, Cancel::One { order_id: order_id.as_str(), reason }).await?
        }
        "CANCELLED" => Vec::new(),
        "PAID" => return Err(PaymentError::AlreadyPaid),
        _ => return Err(PaymentError::Failed(row.reason.unwrap_or_default())),
    };
    tx.commit().await?;
    give_back(stock, db, &cancelled).await;
    Ok(lookup::order(stock, db, order_id).await?)
}

async fn record_late_payment(
    tx: &mut PgConnection,
    order_id: &OrderId,
    row: &Locked,
    key: Option<&str>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO late_payments (order_id, payment_key, user_id, activity_id, sku_id, round)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        order_id.as_str(),
        key.unwrap_or(""),
        row.user_id,
        row.activity_id,
        row.sku_id,
        row.round
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// Redis takes the units back now; if it cannot, the compensator's
/// deadline worker finishes (the rows stay unmarked until then).
async fn give_back(stock: &Stock, db: &PgPool, cancelled: &[CancelledOrder]) {
    if cancelled.is_empty() {
        return;
    }
    if let Err(error) = cancellation::return_units(stock, db, cancelled).await {
        tracing::warn!(%error, "cancelled; the unit goes back when the compensator's deadline worker next runs");
    }
}
