//! A sale's setup across PostgreSQL and Redis. Warm-up is the one
//! operation behind `PUT /admin/sales/{a}/{s}` and `seckillctl warmup`: it
//! writes the sale (a new round) to PostgreSQL, then loads it into Redis
//! (`lua/warmup.lua`), under the sale's warm-up lock.

use crate::config::LockSettings;
use crate::db::{self, SaleRow};
use crate::domain::SaleKey;
use crate::lock::LockClient;
use crate::redis_conn::RedisCallError;
use crate::stock::{warmup::Round, SaleLock, Stock};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use std::time::Duration;

/// How long a sale's keys outlive its end.
pub const KEY_TTL_AFTER_END: Duration = Duration::from_secs(24 * 3600);

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
        let expire_at =
            request.ends_at.map(|e| e.timestamp_millis() + KEY_TTL_AFTER_END.as_millis() as i64).unwrap_or(0);
        let round = Round {
            stock: request.stock,
            starts_ms: ms(request.starts_at),
            ends_ms: ms(request.ends_at),
            round: i64::from(row.round),
            expire_at_ms: expire_at,
            force: request.force,
        };
        if !stock.warmup(sale, round).await? {
            return Err(WarmupError::InFlight(sale));
        }
        tx.commit().await?;
        Ok(row)
    }
    .await;
    guard.release().await;
    result
}
