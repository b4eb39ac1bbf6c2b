//! One admission pass of a waiting room (`lua/queue_admit.lua`).

use super::super::{with_keys, Stock};
use crate::domain::SaleKey;
use crate::stock::conn::RedisCallError;
use redis::Script;
use std::sync::LazyLock;

static QUEUE_ADMIT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../../lua/queue_admit.lua")));

/// Most tickets one pass admits.
pub const MOST_PER_PASS: i64 = 500;

/// What one pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// Tickets admitted by this pass.
    pub now: i64,
    /// Tickets in line and admitted-unused after it.
    pub waiting: i64,
    pub active: i64,
}

impl Stock {
    /// One admission pass of `sale`'s room: by the units still on sale
    /// (every bucket's, read now), with a rate tolerance of `tolerance_ms`
    /// (the time between passes, so a pass admits what the rate let
    /// through since the last).
    pub async fn admit_pass(&self, sale: SaleKey, tolerance_ms: i64) -> Result<Admitted, RedisCallError> {
        let snapshot = self.snapshot(sale).await?;
        let units = if snapshot.exists { snapshot.remaining } else { 0 };
        let k = self.keys.queue(sale);
        let mut invocation = with_keys(&QUEUE_ADMIT, &k.all());
        invocation.arg(units).arg(MOST_PER_PASS).arg(tolerance_ms);
        let (now, waiting, active): (i64, i64, i64) = self.conn.invoke(&invocation).await?;
        Ok(Admitted { now, waiting, active })
    }
}
