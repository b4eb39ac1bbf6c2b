//! The sale's state in Redis: key layout and the Lua scripts that change it.
//! This module is the only code that knows the key layout.
//!
//! Every key of one sale carries the hash tag `{activity:sku}`, so each script
//! touches a single slot and runs unchanged on Redis Cluster:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P seckill:{A:S}:meta` | hash | total, starts, ends (ms), round |
//! | `…:stock` | string | units left |
//! | `…:buyers` | hash | user id → order id |
//! | `…:orders` | hash | order id → `STATUS\|user\|reason\|accepted_ms` |
//! | `…:reserved` | zset | order ids accepted but not yet settled, by time |
//! | `…:seq` | string | order counter (never reset) |
//! | `…:compensated` | set | order ids whose unit was restored |
//! | `…:written_off` | set | order ids whose unit the database never had |
//! | `P seckill:sales` | set | every warmed sale (`A:S`), for the sweeper |

use crate::domain::{FailReason, OrderId, OrderStatus, SaleKey, UserId};
use redis::aio::ConnectionManager;
use redis::{AsyncCommands, Script};
use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

static DEDUCT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/deduct.lua")));
static ROLLBACK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/rollback.lua")));
static COMPENSATE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/compensate.lua")));
static WARMUP: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/warmup.lua")));

/// What went wrong talking to Redis.
#[derive(Debug, thiserror::Error)]
pub enum StockError {
    /// Redis answered with an error or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Redis did not answer in time. The command may still have run.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// A script answered something this code does not understand.
    #[error("unexpected answer from {script}: {answer}")]
    Unexpected { script: &'static str, answer: String },
}

/// The answer of one deduction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deduction {
    /// A unit is the user's; the order id is new.
    Accepted { order_id: OrderId, round: i64, stock_left: i64 },
    /// No such sale in Redis (never warmed, expired, or Redis lost it).
    SaleNotFound,
    /// Outside the sale window.
    NotActive,
    /// The user already holds this order.
    AlreadyPurchased { order_id: Option<String> },
    /// No units left.
    SoldOut,
}

/// What Redis knows of one order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderState {
    /// QUEUED, CREATED or FAILED.
    pub status: OrderStatus,
    /// The buyer.
    pub user_id: i64,
    /// Why it failed, if it did.
    pub reason: Option<String>,
    /// When the edge accepted it (ms).
    pub accepted_at: i64,
}

impl OrderState {
    /// Parses `STATUS|user|reason|accepted_ms`.
    pub fn parse(value: &str) -> Option<Self> {
        let mut parts = value.splitn(4, '|');
        let status = OrderStatus::parse(parts.next()?)?;
        let user_id = parts.next()?.parse().ok()?;
        let reason = parts.next().filter(|r| !r.is_empty()).map(str::to_owned);
        let accepted_at = parts.next()?.parse().ok()?;
        Some(Self { status, user_id, reason, accepted_at })
    }

    fn encode(&self) -> String {
        format!("{}|{}|{}|{}", self.status.as_str(), self.user_id, self.reason.as_deref().unwrap_or(""), self.accepted_at)
    }
}

/// How the compensator settles a FAILED order's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// Put the unit back on sale.
    Restore,
    /// The database never had the unit: bring Redis stock down to the
    /// database's remaining stock (never up).
    WriteOff { db_remaining: i64 },
}

/// The answer of [`Stock::compensate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compensation {
    /// Settled now (unit restored or written off).
    Settled,
    /// An earlier call settled it: nothing done.
    AlreadySettled,
    /// Redis never minted this order (or lost it): nothing to restore.
    UnknownOrder,
    /// Redis says CREATED: never restored.
    Created,
    /// The edge rolled it back already.
    RolledBack,
}

/// A sale's Redis state, as the reconciliation reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SaleSnapshot {
    /// Whether the sale exists in Redis at all.
    pub exists: bool,
    /// Warm-up round.
    pub round: i64,
    /// Units warmed up.
    pub total: i64,
    /// Units left.
    pub remaining: i64,
    /// Users holding an order.
    pub buyers: i64,
    /// Accepted orders not yet seen by the order service.
    pub reservations: i64,
    /// Orders by status.
    pub queued: i64,
    /// Orders Redis knows as CREATED.
    pub created: i64,
    /// Orders Redis knows as FAILED.
    pub failed: i64,
    /// Units restored by the compensator or sweeper.
    pub compensated: i64,
    /// Units written off (the database never had them).
    pub written_off: i64,
}

/// A sale's keys, derived once.
#[derive(Debug, Clone)]
pub struct SaleKeys {
    meta: String,
    stock: String,
    buyers: String,
    orders: String,
    reserved: String,
    seq: String,
    compensated: String,
    written_off: String,
}

/// Redis access for sales and orders.
#[derive(Clone)]
pub struct Stock {
    conn: ConnectionManager,
    prefix: String,
    timeout: Duration,
}

impl Stock {
    /// Connects (the connection manager reconnects by itself afterwards).
    pub async fn connect(settings: &crate::config::RedisSettings) -> Result<Self, StockError> {
        let timeout = Duration::from_millis(settings.timeout_ms);
        let client = redis::Client::open(settings.url.as_str())?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(timeout)
            .set_response_timeout(timeout)
            .set_number_of_retries(2)
            .set_max_delay(500);
        let conn = tokio::time::timeout(timeout * 2, ConnectionManager::new_with_config(client, config))
            .await
            .map_err(|_| StockError::Timeout(timeout * 2))??;
        Ok(Self { conn, prefix: settings.key_prefix.clone(), timeout })
    }

    /// A connection for callers that need raw commands (the lock, tests).
    pub fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// The keys of one sale.
    pub fn keys(&self, sale: SaleKey) -> SaleKeys {
        let base = format!("{}seckill:{{{}:{}}}", self.prefix, sale.activity, sale.sku);
        SaleKeys {
            meta: format!("{base}:meta"),
            stock: format!("{base}:stock"),
            buyers: format!("{base}:buyers"),
            orders: format!("{base}:orders"),
            reserved: format!("{base}:reserved"),
            seq: format!("{base}:seq"),
            compensated: format!("{base}:compensated"),
            written_off: format!("{base}:written_off"),
        }
    }

    /// The key of a per-sale lock (`purpose`: "lock" for the lock deduction,
    /// "warmup" for warm-ups), under the sale's hash tag.
    pub fn sale_lock_key(&self, sale: SaleKey, purpose: &str) -> String {
        format!("{}seckill:{{{}:{}}}:{purpose}", self.prefix, sale.activity, sale.sku)
    }

    /// The key of the reservation sweeper's lock.
    pub fn sweeper_lock_key(&self) -> String {
        format!("{}seckill:{{sweeper}}:lock", self.prefix)
    }

    fn registry_key(&self) -> String {
        format!("{}seckill:sales", self.prefix)
    }

    /// Runs `f` with a bounded wait.
    async fn bounded<T>(
        &self,
        f: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StockError> {
        match tokio::time::timeout(self.timeout, f).await {
            Ok(result) => Ok(result?),
            Err(_) => Err(StockError::Timeout(self.timeout)),
        }
    }

    /// Runs a prepared script, bounded.
    async fn invoke<T: redis::FromRedisValue>(&self, invocation: &redis::ScriptInvocation<'_>) -> Result<T, StockError> {
        let mut conn = self.conn.clone();
        self.bounded(invocation.invoke_async(&mut conn)).await
    }

    /// The flash-sale decision (`lua/deduct.lua`).
    pub async fn deduct(&self, sale: SaleKey, user: UserId, now_ms: i64, nonce: &str) -> Result<Deduction, StockError> {
        let k = self.keys(sale);
        let mut invocation = with_keys(&DEDUCT, &[&k.meta, &k.stock, &k.buyers, &k.orders, &k.reserved, &k.seq]);
        invocation.arg(user.get()).arg(now_ms).arg(nonce).arg(sale.activity.get()).arg(sale.sku.get());
        let answer: Vec<redis::Value> = self.invoke(&invocation).await?;
        parse_deduction(&answer)
    }

    /// Undoes a deduction whose publish definitely failed (`lua/rollback.lua`).
    /// Returns whether a unit went back.
    pub async fn rollback(&self, order_id: &OrderId, user: UserId, reason: FailReason) -> Result<bool, StockError> {
        let k = self.keys(order_id.sale());
        let mut invocation = with_keys(&ROLLBACK, &[&k.stock, &k.buyers, &k.orders, &k.reserved]);
        invocation.arg(order_id.as_str()).arg(user.get()).arg(reason.code());
        let restored: i64 = self.invoke(&invocation).await?;
        Ok(restored == 1)
    }

    /// Settles a FAILED order at most once (`lua/compensate.lua`).
    pub async fn compensate(
        &self,
        order_id: &OrderId,
        user: UserId,
        reason: FailReason,
        settlement: Settlement,
    ) -> Result<Compensation, StockError> {
        let k = self.keys(order_id.sale());
        let (mode, db_remaining) = match settlement {
            Settlement::Restore => ("restore", 0),
            Settlement::WriteOff { db_remaining } => ("writeoff", db_remaining),
        };
        let mut invocation =
            with_keys(&COMPENSATE, &[&k.stock, &k.buyers, &k.orders, &k.reserved, &k.compensated, &k.written_off]);
        invocation
            .arg(order_id.as_str())
            .arg(user.get())
            .arg(reason.code())
            .arg(if reason.lets_user_retry() { "1" } else { "0" })
            .arg(mode)
            .arg(db_remaining);
        let answer: i64 = self.invoke(&invocation).await?;
        Ok(match answer {
            1 => Compensation::Settled,
            0 => Compensation::AlreadySettled,
            -1 => Compensation::UnknownOrder,
            -2 => Compensation::Created,
            -3 => Compensation::RolledBack,
            other => return Err(StockError::Unexpected { script: "compensate.lua", answer: other.to_string() }),
        })
    }

    /// Loads a sale round (`lua/warmup.lua`), replacing the previous one.
    pub async fn warmup(
        &self,
        sale: SaleKey,
        stock: i64,
        starts_ms: i64,
        ends_ms: i64,
        round: i64,
        expire_at_ms: i64,
    ) -> Result<(), StockError> {
        let k = self.keys(sale);
        let mut invocation = with_keys(
            &WARMUP,
            &[&k.meta, &k.stock, &k.buyers, &k.orders, &k.reserved, &k.compensated, &k.written_off, &k.seq],
        );
        invocation.arg(stock).arg(starts_ms).arg(ends_ms).arg(round).arg(expire_at_ms);
        let _: i64 = self.invoke(&invocation).await?;
        let mut conn = self.conn.clone();
        let _: i64 = self.bounded(conn.sadd(self.registry_key(), sale.to_string())).await?;
        Ok(())
    }

    /// Whether the previous round has orders in flight (reserved or QUEUED).
    pub async fn has_orders_in_flight(&self, sale: SaleKey) -> Result<bool, StockError> {
        let snapshot = self.snapshot(sale).await?;
        Ok(snapshot.reservations > 0 || snapshot.queued > 0)
    }

    /// Every sale ever warmed with this prefix.
    pub async fn sales(&self) -> Result<Vec<SaleKey>, StockError> {
        let mut conn = self.conn.clone();
        let members: Vec<String> = self.bounded(conn.smembers(self.registry_key())).await?;
        Ok(members
            .iter()
            .filter_map(|m| {
                let (a, s) = m.split_once(':')?;
                SaleKey::from_raw(a.parse().ok()?, s.parse().ok()?).ok()
            })
            .collect())
    }

    /// What Redis knows of one order.
    pub async fn order_state(&self, order_id: &OrderId) -> Result<Option<OrderState>, StockError> {
        let k = self.keys(order_id.sale());
        let mut conn = self.conn.clone();
        let value: Option<String> = self.bounded(conn.hget(&k.orders, order_id.as_str())).await?;
        Ok(value.as_deref().and_then(OrderState::parse))
    }

    /// The user's order id in the sale, if Redis holds one.
    pub async fn user_order(&self, sale: SaleKey, user: UserId) -> Result<Option<String>, StockError> {
        let k = self.keys(sale);
        let mut conn = self.conn.clone();
        self.bounded(conn.hget(&k.buyers, user.get())).await
    }

    /// Marks orders CREATED and clears their reservations, in one pipelined
    /// round trip of two variadic commands per sale (`HSET` of every status,
    /// `ZREM` of every reservation). Called after PostgreSQL committed their
    /// rows.
    pub async fn mark_created(&self, orders: &[(OrderId, UserId, i64)]) -> Result<(), StockError> {
        let mut by_sale: BTreeMap<SaleKey, Vec<(&str, String)>> = BTreeMap::new();
        for (order_id, user, accepted_at) in orders {
            let state = OrderState { status: OrderStatus::Created, user_id: user.get(), reason: None, accepted_at: *accepted_at };
            by_sale.entry(order_id.sale()).or_default().push((order_id.as_str(), state.encode()));
        }
        let mut pipe = redis::pipe();
        for (sale, states) in &by_sale {
            let k = self.keys(*sale);
            let ids: Vec<&str> = states.iter().map(|(id, _)| *id).collect();
            pipe.hset_multiple(&k.orders, states).ignore();
            pipe.zrem(&k.reserved, ids).ignore();
        }
        self.run_pipe(pipe, by_sale.is_empty()).await
    }

    /// Clears reservations of orders the order service has taken charge of
    /// (written, already done, or sent to the dead-letter topic): one
    /// variadic `ZREM` per sale.
    pub async fn unreserve(&self, orders: &[OrderId]) -> Result<(), StockError> {
        let mut by_sale: BTreeMap<SaleKey, Vec<&str>> = BTreeMap::new();
        for order_id in orders {
            by_sale.entry(order_id.sale()).or_default().push(order_id.as_str());
        }
        let mut pipe = redis::pipe();
        for (sale, ids) in &by_sale {
            pipe.zrem(&self.keys(*sale).reserved, ids).ignore();
        }
        self.run_pipe(pipe, by_sale.is_empty()).await
    }

    async fn run_pipe(&self, pipe: redis::Pipeline, empty: bool) -> Result<(), StockError> {
        if empty {
            return Ok(());
        }
        let mut conn = self.conn.clone();
        self.bounded(pipe.query_async::<()>(&mut conn)).await
    }

    /// Reservations accepted before `cutoff_ms`, oldest first, at most `limit`.
    pub async fn stale_reservations(&self, sale: SaleKey, cutoff_ms: i64, limit: isize) -> Result<Vec<OrderId>, StockError> {
        let k = self.keys(sale);
        let mut conn = self.conn.clone();
        let ids: Vec<String> =
            self.bounded(conn.zrangebyscore_limit(&k.reserved, "-inf", format!("({cutoff_ms}"), 0, limit)).await?;
        Ok(ids.iter().filter_map(|id| OrderId::parse(id).ok()).collect())
    }

    /// How many of `ids` Redis has a status for (orders Redis accepted).
    pub async fn count_known_orders(&self, sale: SaleKey, ids: &[String]) -> Result<i64, StockError> {
        let key = self.keys(sale).orders;
        let mut conn = self.conn.clone();
        let mut known = 0;
        for chunk in ids.chunks(1000) {
            let mut pipe = redis::pipe();
            for id in chunk {
                pipe.hexists(&key, id);
            }
            let found: Vec<bool> = self.bounded(pipe.query_async(&mut conn)).await?;
            known += found.iter().filter(|f| **f).count() as i64;
        }
        Ok(known)
    }

    /// How many of `ids` were settled: their unit restored or written off.
    pub async fn count_settled(&self, sale: SaleKey, ids: &[String]) -> Result<i64, StockError> {
        let k = self.keys(sale);
        let mut conn = self.conn.clone();
        let mut settled = 0;
        for chunk in ids.chunks(1000) {
            let mut pipe = redis::pipe();
            for id in chunk {
                pipe.sismember(&k.compensated, id).sismember(&k.written_off, id);
            }
            let found: Vec<bool> = self.bounded(pipe.query_async(&mut conn)).await?;
            settled += found.chunks(2).filter(|pair| pair.iter().any(|f| *f)).count() as i64;
        }
        Ok(settled)
    }

    /// Reads everything the reconciliation needs of one sale.
    pub async fn snapshot(&self, sale: SaleKey) -> Result<SaleSnapshot, StockError> {
        let k = self.keys(sale);
        let mut conn = self.conn.clone();
        let (meta, stock, buyers, reservations, compensated, written_off): (
            Vec<Option<i64>>,
            Option<i64>,
            i64,
            i64,
            i64,
            i64,
        ) = self
            .bounded(
                redis::pipe()
                    .hget(&k.meta, &["total", "round"])
                    .get(&k.stock)
                    .hlen(&k.buyers)
                    .zcard(&k.reserved)
                    .scard(&k.compensated)
                    .scard(&k.written_off)
                    .query_async(&mut conn),
            )
            .await?;
        let statuses: Vec<String> = self.bounded(conn.hvals(&k.orders)).await?;
        let mut snapshot = SaleSnapshot {
            exists: meta.get(1).copied().flatten().is_some(),
            total: meta.first().copied().flatten().unwrap_or(0),
            round: meta.get(1).copied().flatten().unwrap_or(0),
            remaining: stock.unwrap_or(0),
            buyers,
            reservations,
            compensated,
            written_off,
            ..SaleSnapshot::default()
        };
        for value in &statuses {
            match value.split('|').next() {
                Some("QUEUED") => snapshot.queued += 1,
                Some("CREATED") => snapshot.created += 1,
                _ => snapshot.failed += 1,
            }
        }
        Ok(snapshot)
    }

    /// The seed's deduction, for comparison: a per-sale lock around separate
    /// commands instead of one script. Same answers as [`Stock::deduct`].
    pub async fn deduct_with_lock(
        &self,
        locks: &crate::lock::LockClient,
        settings: &crate::config::LockSettings,
        sale: SaleKey,
        user: UserId,
        now_ms: i64,
        nonce: &str,
    ) -> Result<Option<Deduction>, StockError> {
        let k = self.keys(sale);
        let lock_name = self.sale_lock_key(sale, "lock");
        let Some(guard) = locks.acquire(&lock_name, settings.lease(), settings.wait()).await? else {
            return Ok(None);
        };
        let mut conn = self.conn.clone();
        let result = async {
            let meta: Vec<Option<i64>> = self.bounded(conn.hget(&k.meta, &["starts", "ends", "round"])).await?;
            let Some(round) = meta[2] else { return Ok(Deduction::SaleNotFound) };
            let (starts, ends) = (meta[0].unwrap_or(0), meta[1].unwrap_or(0));
            if (starts > 0 && now_ms < starts) || (ends > 0 && now_ms >= ends) {
                return Ok(Deduction::NotActive);
            }
            let existing: Option<String> = self.bounded(conn.hget(&k.buyers, user.get())).await?;
            if existing.is_some() {
                return Ok(Deduction::AlreadyPurchased { order_id: existing });
            }
            let stock: Option<i64> = self.bounded(conn.get(&k.stock)).await?;
            let stock = stock.unwrap_or(0);
            if stock <= 0 {
                return Ok(Deduction::SoldOut);
            }
            let seq: i64 = self.bounded(conn.incr(&k.seq, 1)).await?;
            let order_id = OrderId::parse(&format!("{}-{}-{seq}-{nonce}", sale.activity, sale.sku))
                .map_err(|e| StockError::Unexpected { script: "deduct_with_lock", answer: e.to_string() })?;
            let state = OrderState { status: OrderStatus::Queued, user_id: user.get(), reason: None, accepted_at: now_ms };
            self.bounded(
                redis::pipe()
                    .atomic()
                    .decr(&k.stock, 1)
                    .ignore()
                    .hset(&k.buyers, user.get(), order_id.as_str())
                    .ignore()
                    .hset(&k.orders, order_id.as_str(), state.encode())
                    .ignore()
                    .zadd(&k.reserved, order_id.as_str(), now_ms)
                    .ignore()
                    .query_async::<()>(&mut conn),
            )
            .await?;
            Ok(Deduction::Accepted { order_id, round, stock_left: stock - 1 })
        }
        .await;
        guard.release().await;
        result.map(Some)
    }
}

fn parse_deduction(answer: &[redis::Value]) -> Result<Deduction, StockError> {
    let unexpected = || StockError::Unexpected { script: "deduct.lua", answer: format!("{answer:?}") };
    let int = |i: usize| match answer.get(i) {
        Some(redis::Value::Int(n)) => Some(*n),
        _ => None,
    };
    let text = |i: usize| match answer.get(i) {
        Some(redis::Value::BulkString(bytes)) => String::from_utf8(bytes.clone()).ok(),
        Some(redis::Value::SimpleString(s)) => Some(s.clone()),
        _ => None,
    };
    match int(0).ok_or_else(unexpected)? {
        1 => {
            let order_id = text(2).and_then(|id| OrderId::parse(&id).ok()).ok_or_else(unexpected)?;
            Ok(Deduction::Accepted { order_id, round: int(1).unwrap_or(0), stock_left: int(3).unwrap_or(0) })
        }
        -1 => Ok(Deduction::SaleNotFound),
        -2 => Ok(Deduction::NotActive),
        -3 => Ok(Deduction::AlreadyPurchased { order_id: text(2) }),
        -4 => Ok(Deduction::SoldOut),
        _ => Err(unexpected()),
    }
}

/// `script` ready to run on `keys` (arguments follow).
fn with_keys<'a>(script: &'a Script, keys: &[&String]) -> redis::ScriptInvocation<'a> {
    let mut invocation = script.prepare_invoke();
    for key in keys {
        invocation.key(key.as_str());
    }
    invocation
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_states_round_trip() {
        let state = OrderState { status: OrderStatus::Failed, user_id: 42, reason: Some("NO_DB_STOCK".into()), accepted_at: 7 };
        assert_eq!(OrderState::parse(&state.encode()), Some(state));
        let queued = OrderState::parse("QUEUED|9||123").expect("valid");
        assert_eq!(queued.reason, None);
        assert_eq!(OrderState::parse("garbage"), None);
    }
}
