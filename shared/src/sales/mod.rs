//! A sale's setup across PostgreSQL and Redis. Warm-up ([`warmup_job`]) is the
//! one operation behind `PUT /admin/sales/{a}/{s}` and `seckillctl warmup`:
//! a job with an id, its progress recorded ([`warmup_rows`]), that holds the
//! sale's buckets still, commits the new round in PostgreSQL, loads it into
//! Redis and has the replicas confirm it — all or nothing, and finished by
//! repeating it. Closing (`POST /admin/sales/{a}/{s}/close`, `seckillctl
//! sale close`) ends the round now, in both, under the same lock, and
//! schedules the expiry of every key of the sale.

mod admission;
pub mod draw_proof;
mod draw_settings;
mod warmup_job;
pub mod warmup_rows;

pub use admission::{Admission, Challenge};
pub use draw_settings::{Draw, MAX_CLAIM_SECONDS};
pub use warmup_job::warmup;

use crate::config::LockSettings;
use crate::db::{self, SaleRow};
use crate::domain::{Limits, SaleKey};
use crate::ops::lock::LockClient;
use crate::stock::conn::RedisCallError;
use crate::stock::{SaleLock, Stock};
use chrono::{DateTime, Utc};
use sqlx::PgPool;

/// What to warm up.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WarmupRequest {
    /// The warm-up's id: the same id asked again finishes (or answers) the
    /// same warm-up, never a second one; `None`: a new one.
    #[serde(skip)]
    pub id: Option<String>,
    pub sale: SaleKey,
    /// Units on sale (set, never added).
    pub stock: i64,
    /// Window start; open when absent.
    pub starts_at: Option<DateTime<Utc>>,
    /// Window end; open when absent.
    pub ends_at: Option<DateTime<Utc>>,
    /// Warm up even if the previous round has orders in flight.
    pub force: bool,
    /// How long each CREATED order awaits payment before it is cancelled
    /// and its unit sold again.
    pub payment_window_seconds: i64,
    /// Stock buckets the round's units are spread over (1: none), each in a
    /// slot of its own, on a Redis Cluster spread over the primaries.
    pub buckets: u32,
    /// The round's waiting room (`None`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
    /// The round's draw (`None`: none; never beside `admission`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draw: Option<Draw>,
    /// Units per user and per order (absent from warm-ups recorded before
    /// quantities: one each).
    #[serde(default)]
    pub limits: Limits,
}

/// The payment window when a warm-up names none: 15 minutes.
pub const DEFAULT_PAYMENT_WINDOW_SECONDS: i64 = 900;
/// The longest payment window a warm-up takes: 7 days.
pub const MAX_PAYMENT_WINDOW_SECONDS: i64 = 7 * 24 * 3600;

/// Why a warm-up was refused.
#[derive(Debug, thiserror::Error)]
pub enum WarmupError {
    /// Bad stock or window.
    #[error("{0}")]
    Invalid(String),
    /// Another warm-up of this sale is running.
    #[error("another warm-up of sale {0} is running")]
    Busy(SaleKey),
    /// No such sale.
    #[error("sale {0} not found")]
    NotFound(SaleKey),
    /// The previous round still has orders in flight.
    #[error("sale {0} still has orders in flight; wait for them to settle or force the warm-up")]
    InFlight(SaleKey),
    /// The warm-up id names a warm-up of another request.
    #[error("warm-up {0} was asked with another request; use a new id")]
    IdReused(String),
    /// The replicas did not confirm what the warm-up (or close) wrote in
    /// Redis; asked again, it finishes.
    #[error("the Redis replicas did not confirm warm-up {0} in time; repeat it to finish")]
    NotReplicated(String),
    /// Redis failed.
    #[error(transparent)]
    Redis(#[from] RedisCallError),
    /// PostgreSQL failed.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

/// Closes `sale` now, under its warm-up lock: PostgreSQL's end first (an
/// end only moves earlier), then Redis's (`lua/close.lua`): no order is
/// accepted after it, and every key of the sale expires once the payment
/// window and `redis.sale_key_margin_secs` have passed. Closing again
/// changes nothing more. The sale as PostgreSQL now holds it.
pub async fn close(
    stock: &Stock,
    pool: &PgPool,
    locks: &LockClient,
    lock: &LockSettings,
    sale: SaleKey,
) -> Result<SaleRow, WarmupError> {
    let lock_name = stock.keys().sale_lock(sale, SaleLock::Warmup);
    let Some(guard) = locks.acquire_with_watchdog(&lock_name, lock.lease(), lock.wait(), 0).await? else {
        return Err(WarmupError::Busy(sale));
    };
    let result = async {
        let row = db::close_sale(pool, sale).await?.ok_or(WarmupError::NotFound(sale))?;
        // A warm-up cut short is not resumed over a close.
        warmup_rows::closed(pool, sale).await?;
        let window = i64::from(row.payment_window_seconds);
        stock.close(sale, window).await?;
        stock.close_room(sale, stock.sale_keys_expire_at(crate::now_ms(), window)).await?;
        // A 200 is never lost in a failover: the replicas have the end.
        for bucket in stock.directory(sale).await?.buckets {
            if !stock.round_confirmed(sale, bucket).await? {
                return Err(WarmupError::NotReplicated(format!("close of {sale}")));
            }
        }
        Ok(row)
    }
    .await;
    guard.release().await;
    result
}
