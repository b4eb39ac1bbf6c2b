//! Closing a sale (`POST /admin/sales/{a}/{s}/close`, `seckillctl sale
//! close`): its round ends now, in PostgreSQL and in Redis, under the
//! warm-up's lock.

use super::warmup_rows;
use super::WarmupError;
use crate::config::LockSettings;
use crate::db::{self, SaleRow};
use crate::domain::SaleKey;
use crate::ops::lock::LockClient;
use crate::stock::{SaleLock, Stock};
use sqlx::PgPool;
use std::time::Duration;

/// Closes `sale` now, under its warm-up lock: PostgreSQL's end first (an
/// end only moves earlier), then Redis's (`lua/close.lua`): no order is
/// accepted after it, and every key of the sale expires once the payment
/// window and `redis.sale_key_margin_secs` have passed. Closing again
/// changes nothing more. The sale as PostgreSQL now holds it. Each
/// PostgreSQL call is bounded by `deadline`; one that does not answer ends
/// the close, its lock given back.
pub async fn close(
    stock: &Stock,
    pool: &PgPool,
    deadline: Duration,
    locks: &LockClient,
    lock: &LockSettings,
    sale: SaleKey,
) -> Result<SaleRow, WarmupError> {
    let lock_name = stock.keys().sale_lock(sale, SaleLock::Warmup);
    let Some(guard) = locks.acquire_with_watchdog(&lock_name, lock.lease(), lock.wait(), 0).await? else {
        return Err(WarmupError::Busy(sale));
    };
    let result = async {
        let row = db::within(deadline, db::close_sale(pool, sale)).await?.ok_or(WarmupError::NotFound(sale))?;
        // A warm-up cut short is not resumed over a close.
        db::within(deadline, warmup_rows::closed(pool, sale)).await?;
        let window = i64::from(row.payment_window_seconds);
        stock.warm_ups().close(sale, window).await?;
        stock.waiting_room().close_room(sale, stock.sale_keys_expire_at(crate::now_ms(), window)).await?;
        // A 200 is never lost in a failover: the replicas have the end.
        for bucket in stock.bucket_moves().directory(sale).await?.buckets {
            if !stock.warm_ups().round_confirmed(sale, bucket).await? {
                return Err(WarmupError::NotReplicated(format!("close of {sale}")));
            }
        }
        Ok(row)
    }
    .await;
    guard.release().await;
    result
}
