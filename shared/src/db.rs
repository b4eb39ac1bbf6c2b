//! PostgreSQL access shared by the services: the pool, migrations, sales,
//! order lookups, the FAILED-row write that decides an order's fate, and the
//! lock's fencing check.

use crate::config::DbSettings;
use crate::domain::{FailReason, OrderId, OrderStatus, SaleKey, UserId};
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres, Row, Transaction};
use std::str::FromStr;
use std::time::Duration;

/// The project's migrations, embedded.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// Opens a pool. Connections are made lazily, so a service starts even while
/// PostgreSQL is down and catches up when it returns.
pub fn connect_lazy(settings: &DbSettings) -> anyhow::Result<PgPool> {
    let options = PgConnectOptions::from_str(&settings.url)?.application_name("seckill");
    Ok(PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(Duration::from_millis(settings.acquire_timeout_ms))
        .connect_lazy_with(options))
}

/// Applies the migrations (idempotent; concurrent callers are serialised by
/// sqlx's advisory lock).
pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    MIGRATOR.run(pool).await?;
    Ok(())
}

/// A sale as PostgreSQL holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SaleRow {
    /// The sale.
    pub activity_id: i64,
    /// The SKU.
    pub sku_id: i64,
    /// Warm-up round; each warm-up starts a new one.
    pub round: i32,
    /// Units on sale this round.
    pub total_stock: i64,
    /// Units the database can still write orders for.
    pub remaining_stock: i64,
    /// Sale window start.
    pub starts_at: Option<DateTime<Utc>>,
    /// Sale window end.
    pub ends_at: Option<DateTime<Utc>>,
}

/// Reads one sale.
pub async fn find_sale(pool: &PgPool, sale: SaleKey) -> sqlx::Result<Option<SaleRow>> {
    let row = sqlx::query(
        "SELECT activity_id, sku_id, round, total_stock, remaining_stock, starts_at, ends_at
           FROM sales WHERE activity_id = $1 AND sku_id = $2",
    )
    .bind(sale.activity.get())
    .bind(sale.sku.get())
    .fetch_optional(pool)
    .await?;
    Ok(row.as_ref().map(sale_row))
}

fn sale_row(r: &sqlx::postgres::PgRow) -> SaleRow {
    SaleRow {
        activity_id: r.get(0),
        sku_id: r.get(1),
        round: r.get(2),
        total_stock: r.get(3),
        remaining_stock: r.get(4),
        starts_at: r.get(5),
        ends_at: r.get(6),
    }
}

/// Creates a sale or starts its next round: stock is set, never added.
pub async fn upsert_sale(
    pool: &PgPool,
    sale: SaleKey,
    stock: i64,
    starts_at: Option<DateTime<Utc>>,
    ends_at: Option<DateTime<Utc>>,
) -> sqlx::Result<SaleRow> {
    let r = sqlx::query(
        "INSERT INTO sales (activity_id, sku_id, total_stock, remaining_stock, starts_at, ends_at)
         VALUES ($1, $2, $3, $3, $4, $5)
         ON CONFLICT (activity_id, sku_id) DO UPDATE
            SET round = sales.round + 1, total_stock = $3, remaining_stock = $3,
                starts_at = $4, ends_at = $5, updated_at = now()
         RETURNING activity_id, sku_id, round, total_stock, remaining_stock, starts_at, ends_at",
    )
    .bind(sale.activity.get())
    .bind(sale.sku.get())
    .bind(stock)
    .bind(starts_at)
    .bind(ends_at)
    .fetch_one(pool)
    .await?;
    Ok(sale_row(&r))
}

/// An order as PostgreSQL holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderRow {
    /// The order.
    pub order_id: String,
    /// Its sale.
    pub sale: SaleKey,
    /// The buyer.
    pub user_id: i64,
    /// CREATED or FAILED.
    pub status: OrderStatus,
    /// Why it failed.
    pub reason: Option<String>,
}

fn order_row(r: &sqlx::postgres::PgRow) -> OrderRow {
    OrderRow {
        order_id: r.get("order_id"),
        sale: SaleKey::from_raw(r.get("activity_id"), r.get("sku_id")).expect("the table holds positive ids"),
        user_id: r.get("user_id"),
        status: OrderStatus::parse(r.get::<&str, _>("status")).unwrap_or(OrderStatus::Failed),
        reason: r.get("reason"),
    }
}

/// Looks an order up by id.
pub async fn find_order(pool: &PgPool, order_id: &OrderId) -> sqlx::Result<Option<OrderRow>> {
    let row = sqlx::query("SELECT order_id, activity_id, sku_id, user_id, status, reason FROM orders WHERE order_id = $1")
        .bind(order_id.as_str())
        .fetch_optional(pool)
        .await?;
    Ok(row.as_ref().map(order_row))
}

/// The user's order in the sale's current round: the CREATED one if any,
/// else the latest FAILED one.
pub async fn find_user_order(pool: &PgPool, sale: SaleKey, user: UserId) -> sqlx::Result<Option<OrderRow>> {
    let row = sqlx::query(
        "SELECT o.order_id, o.activity_id, o.sku_id, o.user_id, o.status, o.reason
           FROM orders o
          WHERE o.activity_id = $1 AND o.sku_id = $2 AND o.user_id = $3
            AND o.round = (SELECT round FROM sales WHERE activity_id = $1 AND sku_id = $2)
          ORDER BY (o.status = 'CREATED') DESC, o.created_at DESC
          LIMIT 1",
    )
    .bind(sale.activity.get())
    .bind(sale.sku.get())
    .bind(user.get())
    .fetch_optional(pool)
    .await?;
    Ok(row.as_ref().map(order_row))
}

/// Writes the order's row as FAILED unless it already has one, and returns
/// the status the row has afterwards: the first row written wins, so the
/// caller restores a unit only when this says FAILED.
pub async fn settle_failed(
    tx: &mut Transaction<'_, Postgres>,
    order_id: &OrderId,
    user: UserId,
    reason: FailReason,
    accepted_at_ms: Option<i64>,
) -> sqlx::Result<OrderStatus> {
    let sale = order_id.sale();
    let accepted_at = accepted_at_ms.and_then(DateTime::<Utc>::from_timestamp_millis);
    sqlx::query(
        "INSERT INTO orders (order_id, activity_id, sku_id, round, user_id, status, reason, accepted_at)
         SELECT $1, $2, $3, COALESCE((SELECT round FROM sales WHERE activity_id = $2 AND sku_id = $3), 1),
                $4, 'FAILED', $5, $6
         ON CONFLICT DO NOTHING",
    )
    .bind(order_id.as_str())
    .bind(sale.activity.get())
    .bind(sale.sku.get())
    .bind(user.get())
    .bind(reason.code())
    .bind(accepted_at)
    .execute(&mut **tx)
    .await?;
    let status: Option<String> = sqlx::query_scalar("SELECT status FROM orders WHERE order_id = $1")
        .bind(order_id.as_str())
        .fetch_optional(&mut **tx)
        .await?;
    Ok(status.as_deref().and_then(OrderStatus::parse).unwrap_or(OrderStatus::Failed))
}

/// Why a fenced write was refused.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// A newer lock holder has written since: this holder's lease expired.
    #[error("fencing token {token} for '{name}' is stale (a newer holder wrote)")]
    Stale { name: String, token: i64 },
    /// The database failed.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Records `token` as the newest for `name`, inside the caller's transaction,
/// refusing it when a higher token was already seen. Call it first in every
/// transaction a lock guards, so a stale holder's writes roll back.
pub async fn check_fence(tx: &mut Transaction<'_, Postgres>, name: &str, token: i64) -> Result<(), FenceError> {
    let accepted: Option<i64> = sqlx::query_scalar(
        "INSERT INTO lock_fences (name, token) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
           WHERE lock_fences.token <= EXCLUDED.token
         RETURNING token",
    )
    .bind(name)
    .bind(token)
    .fetch_optional(&mut **tx)
    .await?;
    match accepted {
        Some(_) => Ok(()),
        None => Err(FenceError::Stale { name: name.to_owned(), token }),
    }
}

/// Whether a database error is a verdict on the data (SQLSTATE class 22,
/// data exception, or 23, integrity constraint violation) rather than on the
/// database's health: only these are worth giving up on.
pub fn is_data_error(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            code.starts_with("22") || code.starts_with("23")
        }
        _ => false,
    }
}
