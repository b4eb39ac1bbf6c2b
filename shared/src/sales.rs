//! A sale's setup across PostgreSQL and Redis. Warm-up is the one
//! operation behind `PUT /admin/sales/{a}/{s}` and `seckillctl warmup`: it
//! writes the sale (a new round) to PostgreSQL, then loads it into Redis
//! (`lua/warmup.lua`), under the sale's warm-up lock. Closing
//! (`POST /admin/sales/{a}/{s}/close`, `seckillctl sale close`) ends the
//! round now, in both, under the same lock, and schedules the expiry of
//! every key of the sale.

use crate::config::LockSettings;
use crate::db::{self, SaleRow};
use crate::domain::SaleKey;
use crate::lock::LockClient;
use crate::redis_conn::RedisCallError;
use crate::stock::{warmup::Round, SaleLock, Stock, MAX_BUCKETS};
use chrono::{DateTime, Utc};
use sqlx::PgPool;

/// What to warm up.
#[derive(Debug, Clone)]
pub struct WarmupRequest {
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
    /// Redis failed.
    #[error(transparent)]
    Redis(#[from] RedisCallError),
    /// PostgreSQL failed.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

/// Runs a warm-up under the sale's warm-up lock (`lock`: its lease and
/// wait) and returns the sale as PostgreSQL now holds it.
pub async fn warmup(
    stock: &Stock,
    pool: &PgPool,
    locks: &LockClient,
    lock: &LockSettings,
    request: &WarmupRequest,
) -> Result<SaleRow, WarmupError> {
    if request.stock < 0 || request.stock > 1_000_000_000 {
        return Err(WarmupError::Invalid(format!("stock must be between 0 and 1000000000, got {}", request.stock)));
    }
    if !(1..=MAX_PAYMENT_WINDOW_SECONDS).contains(&request.payment_window_seconds) {
        return Err(WarmupError::Invalid(format!(
            "paymentWindowSeconds must be between 1 and {MAX_PAYMENT_WINDOW_SECONDS}, got {}",
            request.payment_window_seconds
        )));
    }
    if !(1..=MAX_BUCKETS).contains(&request.buckets) {
        return Err(WarmupError::Invalid(format!(
            "buckets must be between 1 and {MAX_BUCKETS}, got {}",
            request.buckets
        )));
    }
    if let (Some(starts), Some(ends)) = (request.starts_at, request.ends_at) {
        if starts >= ends {
            return Err(WarmupError::Invalid("startsAt must be before endsAt".into()));
        }
    }
    let sale = request.sale;
    let lock_name = stock.keys().sale_lock(sale, SaleLock::Warmup);
    let Some(guard) = locks.acquire_with_watchdog(&lock_name, lock.lease(), lock.wait(), 0).await? else {
        return Err(WarmupError::Busy(sale));
    };
    let result = async {
        // The new round is numbered by PostgreSQL, and committed there only
        // once Redis has loaded it: a round Redis refused (orders in flight)
        // leaves PostgreSQL as it was. A commit that fails after the load
        // leaves Redis a round ahead; every order of it then fails
        // ROUND_REPLACED, unit restored, until the warm-up is run again.
        let mut tx = pool.begin().await?;
        let window = request.payment_window_seconds as i32;
        let row = db::upsert_sale(&mut tx, sale, request.stock, request.starts_at, request.ends_at, window).await?;
        let ms = |t: Option<DateTime<Utc>>| t.map(|t| t.timestamp_millis()).unwrap_or(0);
        let expire_at = request
            .ends_at
            .map(|end| stock.sale_keys_expire_at(end.timestamp_millis(), request.payment_window_seconds))
            .unwrap_or(0);
        let round = Round {
            stock: request.stock,
            starts_ms: ms(request.starts_at),
            ends_ms: ms(request.ends_at),
            round: i64::from(row.round),
            expire_at_ms: expire_at,
            force: request.force,
        };
        let buckets = stock.place_buckets(sale, request.buckets).await?;
        if !stock.warmup(sale, &buckets, round).await? {
            return Err(WarmupError::InFlight(sale));
        }
        tx.commit().await?;
        Ok(row)
    }
    .await;
    guard.release().await;
    result
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
        stock.close(sale, i64::from(row.payment_window_seconds)).await?;
        Ok(row)
    }
    .await;
    guard.release().await;
    result
}
