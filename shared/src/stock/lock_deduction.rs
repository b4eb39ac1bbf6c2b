//! The seed's deduction, kept for comparison in the benchmark
//! (`deduction = "lock"`): a per-sale distributed lock
//! ([`crate::ops::lock`]) around separate commands instead of one script.

use super::deduct::Deduction;
use super::keys::{SaleKeys, SaleLock};
use super::values::OrderState;
use crate::config::LockSettings;
use crate::domain::{OrderId, OrderStatus, SaleKey, UserId};
use crate::ops::lock::LockClient;
use crate::stock::conn::RedisCallError;
use redis::AsyncCommands;
use std::time::Duration;

impl crate::stock::Orders<'_> {
    /// The seed's deduction, for comparison: a per-sale lock around separate
    /// commands instead of one script. Same answers as [`Orders::deduct`](crate::stock::Orders::deduct);
    /// `None` when the lock was not had within its wait.
    ///
    /// The lock alone cannot keep holders apart (a holder slower than its
    /// lease overlaps the next one, whatever the watchdog does), so the
    /// writes re-check what the reads saw: the stock is decremented first
    /// and put back if that took it below zero, and the buyer is recorded
    /// only if absent (`HSETNX`), the unit put back otherwise. Like the
    /// script, it refuses while a warm-up replaces the round, and a round
    /// with a waiting room to a request whose admission was not claimed
    /// (`admitted`). It sells the seed's sale: one unit per user, whatever
    /// the round's limits (a quantity above one is refused as above the
    /// most per order, nothing kept) — stricter than the script, never
    /// looser.
    #[tracing::instrument(name = "deduct_with_lock", level = "debug", skip_all, fields(%sale))]
    #[allow(clippy::too_many_arguments)]
    pub async fn deduct_with_lock(
        self,
        locks: &LockClient,
        settings: &LockSettings,
        sale: SaleKey,
        user: UserId,
        quantity: u32,
        admitted: bool,
        nonce: &str,
        publish_deadline: Duration,
    ) -> Result<Option<Deduction>, RedisCallError> {
        if quantity > 1 {
            return Ok(Some(Deduction::OverMaxPerOrder { max: 1 }));
        }
        let k = self.keys.sale(sale);
        let lock_name = self.keys.sale_lock(sale, SaleLock::Deduction);
        let Some(guard) = locks.acquire_with_watchdog(&lock_name, settings.lease(), settings.wait(), 0).await? else {
            return Ok(None);
        };
        let result = self.deduct_holding_lock(&k, sale, user, admitted, nonce, publish_deadline).await;
        guard.release().await;
        result.map(Some)
    }

    async fn deduct_holding_lock(
        self,
        k: &SaleKeys,
        sale: SaleKey,
        user: UserId,
        admitted: bool,
        nonce: &str,
        publish_deadline: Duration,
    ) -> Result<Deduction, RedisCallError> {
        let mut conn = self.conn.clone();
        let fields = ["starts", "ends", "round", "of", "warming", "admission"];
        let meta: Vec<Option<String>> = self.conn.bounded(conn.hmget(&k.meta, &fields)).await?;
        let number = |i: usize| meta[i].as_deref().and_then(|v| v.parse::<i64>().ok());
        let Some(round) = number(2) else { return Ok(Deduction::SaleNotFound) };
        // The seed's way knows one key set: a sale in buckets is not its.
        if number(3).unwrap_or(1) > 1 {
            return Ok(Deduction::OtherBucket);
        }
        let now = self.now_ms().await?;
        let (starts, ends) = (number(0).unwrap_or(0), number(1).unwrap_or(0));
        if (starts > 0 && now < starts) || (ends > 0 && now >= ends) {
            return Ok(Deduction::NotActive);
        }
        // As deduct.lua: a round being replaced sells nothing, and a round
        // with a waiting room sells only to an admission.
        if meta[4].is_some() {
            return Ok(Deduction::Warming);
        }
        if meta[5].as_deref() == Some("1") && !admitted {
            return Ok(Deduction::AdmissionRequired);
        }
        let existing: Option<String> = self.conn.bounded(conn.hget(&k.buyers, user.get())).await?;
        if existing.is_some() {
            return Ok(Deduction::AlreadyPurchased { order_id: existing });
        }
        let stock: Option<i64> = self.conn.bounded(conn.get(&k.stock)).await?;
        if stock.unwrap_or(0) <= 0 {
            return Ok(Deduction::SoldOut { available: 0 });
        }
        let left: i64 = self.conn.bounded(conn.decr(&k.stock, 1)).await?;
        if left < 0 {
            // Another holder took the last unit after our read.
            let _: i64 = self.conn.bounded(conn.incr(&k.stock, 1)).await?;
            return Ok(Deduction::SoldOut { available: 0 });
        }
        let seq: i64 = self.conn.bounded(conn.incr(&k.seq, 1)).await?;
        let order_id = OrderId::parse(&format!("{}-{}-{seq}-{nonce}", sale.activity, sale.sku))
            .map_err(|e| RedisCallError::Unexpected { script: "deduct_with_lock", answer: e.to_string() })?;
        let first: bool = self.conn.bounded(conn.hset_nx(&k.buyers, user.get(), order_id.as_str())).await?;
        if !first {
            // Another holder recorded this user after our read.
            let _: i64 = self.conn.bounded(conn.incr(&k.stock, 1)).await?;
            let existing: Option<String> = self.conn.bounded(conn.hget(&k.buyers, user.get())).await?;
            return Ok(Deduction::AlreadyPurchased { order_id: existing });
        }
        let state = OrderState { status: OrderStatus::Queued, user_id: user.get(), reason: None, accepted_at: now };
        let mut write = redis::pipe();
        write
            .atomic()
            .hset(&k.orders, order_id.as_str(), state.encode())
            .ignore()
            .hincr(&k.meta, "queued", 1)
            .ignore()
            .zadd(&k.reserved, order_id.as_str(), now + publish_deadline.as_millis() as i64)
            .ignore();
        self.conn.pipe::<()>(&write).await?;
        Ok(Deduction::Accepted { order_id, round, stock_left: Some(left), accepted_at: now, slot: 0 })
    }
}
