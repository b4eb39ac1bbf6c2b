//! Settling an order as FAILED — the one way the DLQ job and the sweeper
//! both take.
//!
//! PostgreSQL decides the fate: in one transaction (fenced first when the
//! sweeper writes, so a sweeper that lost its lock writes nothing) the
//! order's row is written FAILED unless it already has a row, and the row's
//! status afterwards is the verdict. Redis then follows: a CREATED order
//! restores nothing; a FAILED one has its unit restored (or, for
//! `NO_DB_STOCK`, written off) at most once per order id. A crash between
//! the two steps is repaired by doing both again: the first is idempotent
//! (first row wins) and the second records what it did.

use chrono::{DateTime, Utc};
use seckill_shared::db::{self, is_data_error};
use seckill_shared::domain::{FailReason, OrderRecord, OrderStatus};
use seckill_shared::host::Connections;
use seckill_shared::redis_conn::RedisCallError;
use seckill_shared::stock::{Compensation, Settlement};
use sqlx::{Postgres, Transaction};

/// What settling one order did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The row is FAILED and Redis was settled (or had been already).
    Failed(Compensation),
    /// The row is CREATED: nothing restored.
    AlreadyCreated,
}

/// The lock a sweeper holds while it writes, and its fencing token.
#[derive(Debug, Clone, Copy)]
pub struct Fence<'a> {
    /// The lock's name (its Redis key).
    pub lock: &'a str,
    /// The token of this holder's acquisition.
    pub token: i64,
}

/// Why an order could not be settled.
#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    /// PostgreSQL failed or refused the row.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// Redis failed.
    #[error(transparent)]
    Redis(#[from] RedisCallError),
    /// A newer lock holder has written since: this holder's lease expired.
    #[error("fencing token {token} for '{lock}' is stale (a newer holder wrote)")]
    StaleFence {
        /// The lock.
        lock: String,
        /// The refused token.
        token: i64,
    },
}

impl SettleError {
    /// Whether trying again can never help: the database refused the data
    /// itself (SQLSTATE 22 or 23). Everything else is a dependency that may
    /// come back.
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Db(error) if is_data_error(error))
    }
}

/// Settles `record` as FAILED for `reason` unless PostgreSQL already holds
/// its fate; with `fence`, only while the fence's token is the newest.
pub async fn settle(
    deps: &Connections,
    record: &OrderRecord,
    reason: FailReason,
    fence: Option<Fence<'_>>,
) -> Result<Settled, SettleError> {
    let mut tx = deps.db.begin().await?;
    if let Some(fence) = fence {
        check_fence(&mut tx, fence).await?;
    }
    let status = write_failed(&mut tx, record, reason).await?;
    tx.commit().await?;
    settle_redis(deps, record, reason, status).await
}

/// Records `fence.token` as the newest for its lock, inside the caller's
/// transaction, refusing it when a higher one was already seen. Call it
/// first in every transaction a lock guards, so a stale holder's writes
/// roll back.
pub async fn check_fence(tx: &mut Transaction<'_, Postgres>, fence: Fence<'_>) -> Result<(), SettleError> {
    let accepted: Option<i64> = sqlx::query_scalar(
        "INSERT INTO lock_fences (name, token) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
           WHERE lock_fences.token <= EXCLUDED.token
         RETURNING token",
    )
    .bind(fence.lock)
    .bind(fence.token)
    .fetch_optional(&mut **tx)
    .await?;
    match accepted {
        Some(_) => Ok(()),
        None => Err(SettleError::StaleFence { lock: fence.lock.to_owned(), token: fence.token }),
    }
}

/// Writes the order's row as FAILED unless it already has one, and returns
/// the status the row has afterwards: the first row written wins.
async fn write_failed(
    tx: &mut Transaction<'_, Postgres>,
    record: &OrderRecord,
    reason: FailReason,
) -> sqlx::Result<OrderStatus> {
    let sale = record.sale();
    sqlx::query(
        "INSERT INTO orders (order_id, activity_id, sku_id, round, user_id, status, reason, accepted_at)
         SELECT $1, $2, $3, COALESCE((SELECT round FROM sales WHERE activity_id = $2 AND sku_id = $3), 1),
                $4, 'FAILED', $5, $6
         ON CONFLICT DO NOTHING",
    )
    .bind(record.order_id.as_str())
    .bind(sale.activity.get())
    .bind(sale.sku.get())
    .bind(record.user_id.get())
    .bind(reason.code())
    .bind(DateTime::<Utc>::from_timestamp_millis(record.accepted_at))
    .execute(&mut **tx)
    .await?;
    let status: Option<String> = sqlx::query_scalar("SELECT status FROM orders WHERE order_id = $1")
        .bind(record.order_id.as_str())
        .fetch_optional(&mut **tx)
        .await?;
    Ok(status.as_deref().and_then(OrderStatus::parse).unwrap_or(OrderStatus::Failed))
}

/// Brings Redis in line with the fate PostgreSQL decided (`status`).
/// Idempotent.
async fn settle_redis(
    deps: &Connections,
    record: &OrderRecord,
    reason: FailReason,
    status: OrderStatus,
) -> Result<Settled, SettleError> {
    if status == OrderStatus::Created {
        deps.stock.mark_created(&[(record.order_id.clone(), record.user_id, record.accepted_at)]).await?;
        return Ok(Settled::AlreadyCreated);
    }
    let settlement = if reason == FailReason::NoDbStock {
        // Redis counted a unit the database does not have: selling it again
        // would only make another doomed order. Bring Redis down instead.
        let remaining = db::find_sale(&deps.db, record.sale()).await?.map(|sale| sale.remaining_stock).unwrap_or(0);
        Settlement::WriteOff { db_remaining: remaining }
    } else {
        Settlement::Restore
    };
    let compensation = deps.stock.compensate(&record.order_id, record.user_id, reason, settlement).await?;
    if compensation == Compensation::Settled {
        metrics::counter!("seckill_compensator_compensations_total", "reason" => reason.code()).increment(1);
    }
    Ok(Settled::Failed(compensation))
}
