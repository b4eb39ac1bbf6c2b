//! Loading a sale round (`lua/warmup.lua`).

use super::{with_keys, Stock};
use crate::domain::SaleKey;
use crate::redis_conn::RedisCallError;
use redis::Script;
use std::sync::LazyLock;

static WARMUP: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/warmup.lua")));

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
    /// When the keys expire (ms), 0 = never.
    pub expire_at_ms: i64,
}

impl Stock {
    /// Loads a sale round, replacing the previous one, and registers the
    /// sale for the sweeper.
    pub async fn warmup(&self, sale: SaleKey, round: Round) -> Result<(), RedisCallError> {
        let k = self.keys.sale(sale);
        let mut invocation = with_keys(
            &WARMUP,
            &[&k.meta, &k.stock, &k.buyers, &k.orders, &k.reserved, &k.compensated, &k.written_off, &k.seq],
        );
        invocation.arg(round.stock).arg(round.starts_ms).arg(round.ends_ms).arg(round.round).arg(round.expire_at_ms);
        let _: i64 = self.conn.invoke(&invocation).await?;
        let mut register = redis::pipe();
        register.sadd(self.keys.registry(), sale.to_string()).ignore();
        self.conn.pipe::<()>(&register).await?;
        Ok(())
    }
}
