//! Whether a step about to be built on is on the replicas
//! (`lua/confirm.lua` with `WAIT` behind it, on the primary that holds it):
//! a unit lent before the receiver adds it, a unit received before the
//! lender forgets the move, an order's status before a buyer is told what
//! it says. Where no replica is asked for (`redis.min_replica_acks` 0),
//! whatever the primary holds is confirmed.

use super::values::OrderState;
use crate::domain::OrderId;
use crate::stock::conn::RedisCallError;
use redis::Script;
use std::sync::LazyLock;

static CONFIRM: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/confirm.lua")));

/// What confirming a step found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation<T> {
    /// There, and on the replicas asked for.
    Confirmed(T),
    /// There, but not (yet) on the replicas asked for.
    Unconfirmed(T),
    /// Not there (never done, or lost in a failover).
    Missing,
}

impl<T> Confirmation<T> {
    /// Whether the step is there and on the replicas.
    pub fn confirmed(&self) -> bool {
        matches!(self, Self::Confirmed(_))
    }
}

impl crate::stock::Orders<'_> {
    /// One field or member of `holder` (a key of the bucket whose meta is
    /// `meta`), confirmed by the replicas.
    async fn confirm(
        self,
        holder: &str,
        meta: &str,
        kind: &str,
        item: &str,
    ) -> Result<Confirmation<redis::Value>, RedisCallError> {
        let (replicas, timeout) = self.replica_acks;
        let (found, acks): (redis::Value, u32) = if replicas == 0 {
            let mut invocation = CONFIRM.prepare_invoke();
            invocation.key(holder).key(meta).arg(kind).arg(item);
            (self.conn.invoke(&invocation).await?, 0)
        } else {
            self.conn.script_then_wait(&CONFIRM, &[holder, meta], &[kind, item], replicas, timeout).await?
        };
        Ok(match found {
            redis::Value::Nil => Confirmation::Missing,
            value if acks >= replicas => Confirmation::Confirmed(value),
            value => Confirmation::Unconfirmed(value),
        })
    }

    /// One field of a bucket's hash `holder`, confirmed by the replicas.
    pub(crate) async fn confirm_field(
        self,
        holder: &str,
        meta: &str,
        field: &str,
    ) -> Result<Confirmation<redis::Value>, RedisCallError> {
        self.confirm(holder, meta, "field", field).await
    }

    /// One member of a bucket's set `holder`, confirmed by the replicas.
    pub(super) async fn confirm_member(
        self,
        holder: &str,
        meta: &str,
        member: &str,
    ) -> Result<Confirmation<redis::Value>, RedisCallError> {
        self.confirm(holder, meta, "member", member).await
    }

    /// The order's state in Redis, and whether the replicas have it.
    pub async fn order_confirmed(self, order_id: &OrderId) -> Result<Confirmation<OrderState>, RedisCallError> {
        let k = self.keys.order(order_id);
        let value = match self.confirm(&k.orders, &k.meta, "field", order_id.as_str()).await? {
            Confirmation::Missing => return Ok(Confirmation::Missing),
            Confirmation::Confirmed(value) => (value, true),
            Confirmation::Unconfirmed(value) => (value, false),
        };
        let unexpected = |answer: String| RedisCallError::Unexpected { script: "confirm.lua", answer };
        let text: String = redis::from_redis_value(value.0).map_err(|e| unexpected(e.to_string()))?;
        let state = OrderState::parse(&text).ok_or_else(|| unexpected(text.clone()))?;
        Ok(if value.1 { Confirmation::Confirmed(state) } else { Confirmation::Unconfirmed(state) })
    }
}

impl<T> Confirmation<T> {
    /// The same confirmation of another value.
    pub(super) fn map<U>(self, f: impl FnOnce(T) -> U) -> Confirmation<U> {
        match self {
            Self::Confirmed(value) => Confirmation::Confirmed(f(value)),
            Self::Unconfirmed(value) => Confirmation::Unconfirmed(f(value)),
            Self::Missing => Confirmation::Missing,
        }
    }
}
