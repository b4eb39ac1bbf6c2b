//! Loading a sale round (`lua/warmup.lua`), and closing it
//! (`lua/close.lua`).

use super::keys::Bucket;
use super::{with_keys, Stock};
use crate::domain::SaleKey;
use crate::redis_conn::RedisCallError;
use redis::Script;
use std::sync::LazyLock;

static WARMUP: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/warmup.lua")));
static CLOSE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/close.lua")));

/// One round of a sale, as Redis loads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// Units on sale.
    pub stock: i64,
    /// Window start (ms), 0 = open.
    pub starts_ms: i64,
    /// Window end (ms), 0 = open.
    pub ends_ms: i64,
    /// The round number PostgreSQL gave it.
    pub round: i64,
    /// When the keys expire (ms), 0 = never (the order counter never does).
    pub expire_at_ms: i64,
    /// Replace the previous round even if it has orders in flight.
    pub force: bool,
}

impl Stock {
    /// Loads a sale round, replacing the previous one — unless that one has
    /// orders in flight and `force` is off: then nothing changes and this
    /// answers `false` (checked and loaded in one script). Registers the
    /// sale for the sweeper.
    pub async fn warmup(&self, sale: SaleKey, round: Round) -> Result<bool, RedisCallError> {
        if !self.warmup_bucket(sale, Bucket::FIRST, round).await? {
            return Ok(false);
        }
        let mut register = redis::pipe();
        register.sadd(self.keys.registry(), sale.to_string()).ignore();
        self.conn.pipe::<()>(&register).await?;
        Ok(true)
    }

    /// Loads one bucket of a sale round with `round.stock` units, as
    /// [`Stock::warmup`] loads the sale's own keys (bucket 0): checked and
    /// loaded in one script, per bucket.
    pub async fn warmup_bucket(&self, sale: SaleKey, bucket: Bucket, round: Round) -> Result<bool, RedisCallError> {
        let mut invocation = with_keys(&WARMUP, &self.keys.bucket(sale, bucket).every_key());
        invocation
            .arg(round.stock)
            .arg(round.starts_ms)
            .arg(round.ends_ms)
            .arg(round.round)
            .arg(round.expire_at_ms)
            .arg(if round.force { "1" } else { "0" });
        let loaded: i64 = self.conn.invoke(&invocation).await?;
        Ok(loaded == 1)
    }

    /// Deletes every key of one bucket of a sale at once (what a benchmark
    /// wrote: left to expire, a few runs fill a bounded node).
    pub async fn delete_bucket(&self, sale: SaleKey, bucket: Bucket) -> Result<(), RedisCallError> {
        let mut pipe = redis::pipe();
        pipe.del(&self.keys.bucket(sale, bucket).every_key()).ignore();
        self.conn.pipe::<()>(&pipe).await.map(drop)
    }

    /// Closes a sale's round now (an end only moves earlier): no order is
    /// accepted after it, and every key of the sale expires once the payment
    /// window (`window_secs`) and the margin have passed. The end in force
    /// (ms), or `None` when Redis holds no round of the sale.
    pub async fn close(&self, sale: SaleKey, window_secs: i64) -> Result<Option<i64>, RedisCallError> {
        let mut invocation = with_keys(&CLOSE, &self.keys.sale(sale).every_key());
        invocation.arg(self.sale_keys_expire_at(0, window_secs));
        let ends: i64 = self.conn.invoke(&invocation).await?;
        Ok((ends > 0).then_some(ends))
    }
}
