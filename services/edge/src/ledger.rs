//! Payments and cancels. The order's row decides, under a row lock: a
//! payment the provider reports before the deadline wins the CREATED row
//! (PAID, its ledger row APPLIED); a cancel, or a payment after the
//! deadline, cancels it through the shared guarded update that gives the
//! unit back. Every payment is recorded once in the `payments` ledger by the
//! provider's payment id — applied, or a refund due (paid already, cancelled,
//! expired, failed, unknown) — and a repeat of it is answered from there.
//! The SQL here is the edge's own.

use crate::lookup::{self, LookupError, OrderView};
use seckill_shared::domain::{OrderId, OrderStatus, UserId};
use seckill_shared::orders::cancellation::{self, Cancel, CancelReason, CancelledOrder};
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
    #[error("already paid")]
    AlreadyPaid,
    /// The payment id was recorded for another order.
    #[error("payment {0} was recorded for another order")]
    PaymentConflict(String),
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
    due: bool,
}

async fn lock_order(tx: &mut PgConnection, order_id: &str) -> sqlx::Result<Option<Locked>> {
    sqlx::query_as!(
        Locked,
        r#"SELECT status, user_id, activity_id, sku_id, round, reason,
                  COALESCE(pay_deadline <= clock_timestamp(), false) AS "due!"
             FROM orders WHERE order_id = $1 FOR UPDATE"#,
        order_id
    )
    .fetch_optional(tx)
    .await
}

async fn lock_row(
    tx: &mut PgConnection,
    stock: &Stock,
    order_id: &OrderId,
    user: UserId,
) -> Result<Locked, PaymentError> {
    let Some(locked) = lock_order(tx, order_id.as_str()).await? else {
        // Not written yet, or never accepted: Redis knows which.
        return match stock.orders().order_state(order_id).await {
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

/// A successful payment as the provider reported it (its signature checked).
#[derive(Debug, Clone)]
pub struct Payment<'a> {
    /// The provider's id of the payment: the ledger's key.
    pub payment_id: &'a str,
    /// The order it says it pays (as given: it may be malformed or unknown).
    pub order_id: &'a str,
    /// The whole notification, kept in the ledger.
    pub notification: &'a serde_json::Value,
}

/// What became of a payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It paid the order: now PAID.
    Applied,
    /// The money is owed back, for this reason (`ALREADY_PAID`,
    /// `ORDER_CANCELLED`, `ORDER_EXPIRED`, `ORDER_FAILED`, `ORDER_UNKNOWN`).
    RefundDue(String),
}

/// A ledger row as it was read back.
struct Recorded {
    order_id: String,
    outcome: String,
    refund_reason: Option<String>,
}

impl Recorded {
    fn outcome(self, order_id: &str, payment_id: &str) -> Result<Outcome, PaymentError> {
        if self.order_id != order_id {
            return Err(PaymentError::PaymentConflict(payment_id.to_owned()));
        }
        Ok(match (self.outcome.as_str(), self.refund_reason) {
            ("APPLIED", _) => Outcome::Applied,
            (_, reason) => Outcome::RefundDue(reason.unwrap_or_default()),
        })
    }
}

/// Whom the ledger row is about, when the order is known.
#[derive(Default)]
struct Party {
    user_id: Option<i64>,
    activity_id: Option<i64>,
    sku_id: Option<i64>,
    round: Option<i32>,
}

/// Records the provider's successful payment once: applied to a CREATED
/// order in its payment window, otherwise a refund due. The same payment
/// again answers what was recorded. An order accepted and not written yet
/// is [`PaymentError::Pending`]: the provider retries the notification.
#[tracing::instrument(name = "ledger.record", skip_all, fields(payment_id = payment.payment_id, order_id = payment.order_id))]
pub async fn record(stock: &Stock, db: &PgPool, payment: &Payment<'_>) -> Result<Outcome, PaymentError> {
    let mut tx = db.begin().await?;
    if let Some(recorded) = recorded(&mut tx, payment.payment_id).await? {
        return recorded.outcome(payment.order_id, payment.payment_id);
    }
    let locked = lock_order(&mut tx, payment.order_id).await?;
    let (outcome, party, cancelled) = match locked {
        None => (unwritten(stock, payment.order_id).await?, Party::default(), Vec::new()),
        Some(row) => {
            let party = Party {
                user_id: Some(row.user_id),
                activity_id: Some(row.activity_id),
                sku_id: Some(row.sku_id),
                round: Some(row.round),
            };
            let (outcome, cancelled) = judge(&mut tx, payment, &row).await?;
            (outcome, party, cancelled)
        }
    };
    let (kind, reason) = match &outcome {
        Outcome::Applied => ("APPLIED", None),
        Outcome::RefundDue(reason) => ("REFUND_DUE", Some(reason.as_str())),
    };
    let inserted = sqlx::query_scalar!(
        "INSERT INTO payments (payment_id, order_id, outcome, refund_reason, user_id, activity_id, sku_id, round,
                               notification)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (payment_id) DO NOTHING RETURNING payment_id",
        payment.payment_id,
        payment.order_id,
        kind,
        reason,
        party.user_id,
        party.activity_id,
        party.sku_id,
        party.round,
        payment.notification
    )
    .fetch_optional(&mut *tx)
    .await?;
    if inserted.is_none() {
        // The same payment, notified twice at once: the other one recorded it.
        drop(tx);
        let recorded = recorded(&mut *db.acquire().await?, payment.payment_id).await?.ok_or(PaymentError::Pending)?;
        return recorded.outcome(payment.order_id, payment.payment_id);
    }
    if outcome == Outcome::Applied {
        sqlx::query!(
            "UPDATE orders SET status = 'PAID', paid_at = clock_timestamp(), payment_key = $2 WHERE order_id = $1",
            payment.order_id,
            payment.payment_id
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    give_back(stock, db, &cancelled).await;
    if let Outcome::RefundDue(reason) = &outcome {
        metrics::counter!("seckill_payments_refund_due_total", "reason" => reason.clone()).increment(1);
    }
    Ok(outcome)
}

/// What a payment of the written order `row` (locked) comes to: applied
/// to a CREATED order in its window, else a refund due — and an order whose
/// deadline passed before the worker came by is cancelled now (the
/// deadline wins), its unit to be given back after the commit.
async fn judge(
    tx: &mut PgConnection,
    payment: &Payment<'_>,
    row: &Locked,
) -> Result<(Outcome, Vec<CancelledOrder>), PaymentError> {
    let refund = |why: &str| Outcome::RefundDue(why.into());
    Ok(match (row.status.as_str(), row.due) {
        ("CREATED", false) => (Outcome::Applied, Vec::new()),
        ("CREATED", true) => {
            let expired = Cancel::One { order_id: payment.order_id, reason: CancelReason::Expired };
            (refund("ORDER_EXPIRED"), cancellation::cancel(tx, expired).await?)
        }
        ("PAID", _) => (refund("ALREADY_PAID"), Vec::new()),
        ("CANCELLED", _) if row.reason.as_deref() == Some("EXPIRED") => (refund("ORDER_EXPIRED"), Vec::new()),
        ("CANCELLED", _) => (refund("ORDER_CANCELLED"), Vec::new()),
        _ => (refund("ORDER_FAILED"), Vec::new()),
    })
}

async fn recorded(tx: &mut PgConnection, payment_id: &str) -> sqlx::Result<Option<Recorded>> {
    sqlx::query_as!(Recorded, "SELECT order_id, outcome, refund_reason FROM payments WHERE payment_id = $1", payment_id)
        .fetch_optional(tx)
        .await
}

/// A payment for an order PostgreSQL does not hold: still being written
/// (the provider asks again), rolled back by the edge, or never accepted.
async fn unwritten(stock: &Stock, order_id: &str) -> Result<Outcome, PaymentError> {
    let Ok(parsed) = OrderId::parse(order_id) else { return Ok(Outcome::RefundDue("ORDER_UNKNOWN".into())) };
    match stock.orders().order_state(&parsed).await {
        Ok(Some(state)) if state.status == OrderStatus::Failed => Ok(Outcome::RefundDue("ORDER_FAILED".into())),
        Ok(Some(_)) => Err(PaymentError::Pending),
        Ok(None) => Ok(Outcome::RefundDue("ORDER_UNKNOWN".into())),
        Err(error) => Err(LookupError::from(error).into()),
    }
}

/// Cancels `user`'s order; a repeat answers the cancelled order, and gives
/// nothing back twice.
#[tracing::instrument(name = "ledger.cancel", skip_all, fields(order_id = %order_id))]
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
