//! Settling a dead letter's order as FAILED.
//!
//! PostgreSQL decides the fate: in one transaction the order's row is
//! written FAILED unless it already has a row, and the row's status
//! afterwards is the verdict. Redis then follows: a CREATED order
//! restores nothing; a FAILED one has its unit restored (or, for
//! `NO_DB_STOCK`, written off) at most once per order id. A crash between
//! the two steps is repaired by doing both again: the first is idempotent
//! (first row wins) and the second records what it did.

use chrono::{DateTime, Utc};
use seckill_shared::db::is_data_error;
use seckill_shared::domain::{FailReason, Fate, OrderRecord};
use seckill_shared::kafka::Trace;
use seckill_shared::ops::fence::FenceError;
use seckill_shared::ops::host::Connections;
use seckill_shared::orders::fate::{self, FollowError, Followed};
use sqlx::{Postgres, Transaction};

/// Why an order could not be settled.
#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    /// PostgreSQL failed or refused the row.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// Redis (or, for a write-off, the sale's database stock) could not be
    /// brought in line.
    #[error(transparent)]
    Follow(#[from] FollowError),
    /// A newer lock holder has written since: this holder's lease expired.
    #[error("fencing token {token} for '{lock}' is stale (a newer holder wrote)")]
    StaleFence {
        /// The lock.
        lock: String,
        /// The refused token.
        token: i64,
    },
}

impl From<FenceError> for SettleError {
    fn from(error: FenceError) -> Self {
        match error {
            FenceError::Stale { lock, token } => Self::StaleFence { lock, token },
            FenceError::Db(error) => Self::Db(error),
        }
    }
}

impl SettleError {
    /// Whether trying again can never help: the database refused the data
    /// itself (SQLSTATE 22 or 23). Everything else is a dependency that may
    /// come back.
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Db(error) | Self::Follow(FollowError::Db(error)) if is_data_error(error))
    }
}

/// Settles `record` as FAILED for `reason` unless PostgreSQL already holds
/// its fate. `trace` (the record's request id and trace context) goes with
/// the row and its event.
#[tracing::instrument(name = "settle", skip_all, fields(order_id = %record.order_id, reason = reason.code()))]
pub async fn settle(
    deps: &Connections,
    record: &OrderRecord,
    reason: FailReason,
    trace: Trace<'_>,
) -> Result<Followed, SettleError> {
    let mut tx = deps.db.begin().await?;
    let fate = write_failed(&mut tx, record, reason, trace).await?;
    tx.commit().await?;
    // The crash tests' point between the two steps (the row FAILED, its
    // units not back yet): tests/e2e/compensator.rs kills the process here.
    seckill_shared::ops::halt::at("failed-written");
    Ok(fate::follow(&deps.stock, &deps.db, record, fate).await?)
}

/// Writes the order's row as FAILED, in the round the record names (the
/// sale's current one when it names none), unless it already has a row;
/// returns the fate the row holds afterwards: the first row written wins.
async fn write_failed(
    tx: &mut Transaction<'_, Postgres>,
    record: &OrderRecord,
    reason: FailReason,
    trace: Trace<'_>,
) -> sqlx::Result<Fate> {
    let sale = record.sale();
    let written = sqlx::query!(
        "INSERT INTO orders (order_id, activity_id, sku_id, round, user_id, status, reason, accepted_at, request_id, traceparent,
                             quantity, slot)
         SELECT $1, $2, $3,
                COALESCE($7::int, (SELECT round FROM sales WHERE activity_id = $2 AND sku_id = $3), 1),
                $4, 'FAILED', $5, $6, $8, $9, $10, $11
         ON CONFLICT DO NOTHING",
        record.order_id.as_str(),
        sale.activity.get(),
        sale.sku.get(),
        record.user_id.get(),
        reason.code(),
        DateTime::<Utc>::from_timestamp_millis(record.accepted_at),
        record.round.map(|r| r as i32),
        trace.request_id,
        trace.traceparent,
        // In range: the record was checked when it was read.
        record.quantity as i16,
        record.slot as i16
    )
    .execute(&mut **tx)
    .await?;
    if written.rows_affected() == 1 && trace.request_id.is_some() {
        // A buyer was told 202 for this order (its record came through the
        // edge), and it ends FAILED: a broken promise, counted by reason.
        metrics::counter!("seckill_broken_promises_total", "reason" => reason.code()).increment(1);
        tracing::warn!(order_id = %record.order_id, reason = reason.code(), "an order answered 202 ends FAILED");
    }
    let row = sqlx::query!("SELECT status, reason FROM orders WHERE order_id = $1", record.order_id.as_str())
        .fetch_one(&mut **tx)
        .await?;
    Ok(Fate::from_row(&row.status, row.reason.as_deref()))
}
