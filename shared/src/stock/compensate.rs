//! Compensating a FAILED order: its unit restored (or written off) at most
//! once per order id (`lua/compensate.lua`). Part of Redis following the
//! fate PostgreSQL decided ([`crate::orders::fate::follow`]).

use super::with_keys;
use crate::domain::{FailReason, Holding, OrderId, UserId};
use crate::stock::conn::RedisCallError;
use redis::Script;
use std::sync::LazyLock;

static COMPENSATE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/compensate.lua")));

/// What compensating a FAILED order does with its unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompensationMode {
    /// Put the order's units back on sale.
    Restore,
    /// The database never had the unit: bring Redis stock down to the
    /// database's remaining stock (never up).
    WriteOff { db_remaining: i64 },
}

/// The answer of [`Orders::compensate`](crate::stock::Orders::compensate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compensation {
    /// Done now (unit restored or written off).
    Done,
    /// An earlier call did it: nothing done.
    AlreadyDone,
    /// Redis never minted this order (or lost it): nothing to restore.
    UnknownOrder,
    /// Redis says CREATED: never restored.
    Created,
    /// The edge rolled it back already.
    RolledBack,
}

impl crate::stock::Orders<'_> {
    /// Compensates a FAILED order in Redis, at most once per order id.
    #[tracing::instrument(name = "stock.compensate", skip_all, fields(order_id = %order_id))]
    pub async fn compensate(
        self,
        order_id: &OrderId,
        user: UserId,
        held: Holding,
        reason: FailReason,
        settlement: CompensationMode,
    ) -> Result<Compensation, RedisCallError> {
        let k = self.keys.order(order_id);
        let (mode, db_remaining) = match settlement {
            CompensationMode::Restore => ("restore", 0),
            CompensationMode::WriteOff { db_remaining } => ("writeoff", db_remaining),
        };
        let mut invocation = with_keys(
            &COMPENSATE,
            &[&k.stock, &k.buyers, &k.orders, &k.reserved, &k.compensated, &k.written_off, &k.meta, &k.trace, &k.held],
        );
        invocation
            .arg(order_id.as_str())
            .arg(user.get())
            .arg(reason.code())
            .arg(if reason.lets_user_retry() { "1" } else { "0" })
            .arg(mode)
            .arg(db_remaining)
            .arg(held.quantity)
            .arg(held.slot);
        let answer: i64 = self.conn.invoke(&invocation).await?;
        use super::protocol::compensate::*;
        Ok(match answer {
            DONE => Compensation::Done,
            ALREADY_DONE => Compensation::AlreadyDone,
            UNKNOWN_ORDER => Compensation::UnknownOrder,
            CREATED => Compensation::Created,
            ROLLED_BACK => Compensation::RolledBack,
            other => return Err(RedisCallError::Unexpected { script: "compensate.lua", answer: other.to_string() }),
        })
    }
}
