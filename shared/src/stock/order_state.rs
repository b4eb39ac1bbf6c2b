//! Each order's status in Redis, and the reservations of orders not yet
//! written: read for the buyer, cleared by the order service, swept by the
//! reservation sweeper. (Marking orders CREATED is
//! [`Stock::follow_created`].)

use super::{by_bucket, Stock};
use crate::domain::{Holding, OrderId, OrderStatus, SaleKey, UserId};
use crate::stock::conn::RedisCallError;
use redis::AsyncCommands;

/// What Redis knows of one order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderState {
    /// QUEUED, CREATED or FAILED.
    pub status: OrderStatus,
    pub user_id: i64,
    /// Why it failed, if it did.
    pub reason: Option<String>,
    /// When the edge accepted it (ms).
    pub accepted_at: i64,
}

/// A reservation's trace: `round|request id|traceparent|quantity|slot`, as
/// deduct.lua writes it (before quantities: the first three, for one unit
/// in place 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationTrace {
    pub round: i64,
    pub request_id: String,
    pub traceparent: String,
    /// What the order holds.
    pub held: Holding,
}

impl ReservationTrace {
    /// Parses `round|request id|traceparent[|quantity|slot]` (a
    /// traceparent holds no `|`).
    pub fn parse(value: &str) -> Option<Self> {
        let mut parts = value.split('|');
        let round = parts.next()?.parse().ok()?;
        let (request_id, traceparent) = (parts.next()?.to_owned(), parts.next()?.to_owned());
        let held = match (parts.next(), parts.next()) {
            (Some(quantity), Some(slot)) => Holding { quantity: quantity.parse().ok()?, slot: slot.parse().ok()? },
            _ => Holding::ONE,
        };
        Some(Self { round, request_id, traceparent, held })
    }

    /// The record's headers: what is there.
    pub fn trace(&self) -> crate::kafka::Trace<'_> {
        fn some(s: &str) -> Option<&str> {
            (!s.is_empty()).then_some(s)
        }
        crate::kafka::Trace { request_id: some(&self.request_id), traceparent: some(&self.traceparent) }
    }
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

    /// `STATUS|user|reason|accepted_ms`, as the scripts write it.
    pub(super) fn encode(&self) -> String {
        format!(
            "{}|{}|{}|{}",
            self.status.as_str(),
            self.user_id,
            self.reason.as_deref().unwrap_or(""),
            self.accepted_at
        )
    }
}

impl Stock {
    /// What Redis knows of one order.
    pub async fn order_state(&self, order_id: &OrderId) -> Result<Option<OrderState>, RedisCallError> {
        let k = self.keys.order(order_id);
        let mut conn = self.conn.clone();
        let value: Option<String> = self.conn.bounded(conn.hget(&k.orders, order_id.as_str())).await?;
        Ok(value.as_deref().and_then(OrderState::parse))
    }

    /// What Redis knows of one order, and its reservation's trace while it
    /// has one (what a QUEUED order holds): both in one round trip.
    pub async fn order_state_and_trace(
        &self,
        order_id: &OrderId,
    ) -> Result<(Option<OrderState>, Option<ReservationTrace>), RedisCallError> {
        let k = self.keys.order(order_id);
        let mut pipe = redis::pipe();
        pipe.hget(&k.orders, order_id.as_str()).hget(&k.trace, order_id.as_str());
        let (state, trace): (Option<String>, Option<String>) = self.conn.pipe(&pipe).await?.unwrap_or_default();
        Ok((state.as_deref().and_then(OrderState::parse), trace.as_deref().and_then(ReservationTrace::parse)))
    }

    /// The user's order id in the sale, if Redis holds one (in their home
    /// bucket: the only one that serves them).
    pub async fn user_order(&self, sale: SaleKey, user: UserId) -> Result<Option<String>, RedisCallError> {
        let home = self.directory(sale).await?.home(user);
        let k = self.keys.bucket(sale, home);
        let mut conn = self.conn.clone();
        self.conn.bounded(conn.hget(&k.buyers, user.get())).await
    }

    /// The user's place an order holds (its slot), in a round with a limit
    /// above one unit per user: `None` when no place holds it (given back,
    /// or a round with a limit of one, whose one place is 0).
    pub async fn held_slot(&self, order_id: &OrderId, user: UserId) -> Result<Option<u32>, RedisCallError> {
        let k = self.keys.order(order_id);
        let mut conn = self.conn.clone();
        let limit: Option<u32> = self.conn.bounded(conn.hget(&k.meta, "limit")).await?;
        let fields: Vec<String> = (0..limit.unwrap_or(1)).map(|slot| format!("{user}/{slot}")).collect();
        let places: Vec<Option<String>> = self.conn.bounded(conn.hmget(&k.held, &fields)).await?;
        let own = format!("{order_id}|");
        Ok(places
            .iter()
            .position(|place| place.as_deref().is_some_and(|p| p.starts_with(&own)))
            .map(|slot| slot as u32))
    }

    /// Clears reservations of orders the order service has taken charge of
    /// (written, already done, or sent to the dead-letter topic): one
    /// variadic `ZREM` per sale.
    pub async fn unreserve(&self, orders: &[OrderId]) -> Result<(), RedisCallError> {
        // A pipeline per sale's bucket (one slot each, as a cluster
        // requires), all at once.
        futures::future::try_join_all(by_bucket(orders, |id| id).into_iter().map(|((sale, bucket), ids)| {
            let k = self.keys.bucket(sale, bucket);
            let ids: Vec<&str> = ids.iter().map(|id| id.as_str()).collect();
            let mut pipe = redis::pipe();
            pipe.zrem(&k.reserved, &ids).ignore().hdel(&k.trace, &ids).ignore();
            async move { self.conn.pipe::<()>(&pipe).await }
        }))
        .await
        .map(drop)
    }

    /// What a reservation keeps for its record to be published again: the
    /// round it was accepted in, and its request's id and trace context.
    pub async fn reservation_trace(&self, order_id: &OrderId) -> Result<Option<ReservationTrace>, RedisCallError> {
        let k = self.keys.order(order_id);
        let mut conn = self.conn.clone();
        let value: Option<String> = self.conn.bounded(conn.hget(&k.trace, order_id.as_str())).await?;
        Ok(value.as_deref().and_then(ReservationTrace::parse))
    }

    /// Moves an order's reservation's deadline to `deadline_ms` (Redis
    /// clock), if it is still reserved: it is not swept before.
    pub async fn reserve_until(&self, order_id: &OrderId, deadline_ms: i64) -> Result<(), RedisCallError> {
        let k = self.keys.order(order_id);
        let mut conn = self.conn.clone();
        let options = redis::SortedSetAddOptions::update_only(None);
        self.conn.bounded(conn.zadd_options::<_, _, _, ()>(&k.reserved, order_id.as_str(), deadline_ms, &options)).await
    }

    /// Reservations whose publish deadline passed before `cutoff_ms` (Redis
    /// clock), oldest first, at most `limit` per bucket of the sale.
    pub async fn stale_reservations(
        &self,
        sale: SaleKey,
        cutoff_ms: i64,
        limit: isize,
    ) -> Result<Vec<OrderId>, RedisCallError> {
        let mut stale = Vec::new();
        for bucket in self.directory(sale).await?.buckets {
            let k = self.keys.bucket(sale, bucket);
            let mut conn = self.conn.clone();
            let ids: Vec<String> = self
                .conn
                .bounded(conn.zrangebyscore_limit(&k.reserved, "-inf", format!("({cutoff_ms}"), 0, limit))
                .await?;
            stale.extend(ids.iter().filter_map(|id| OrderId::parse(id).ok()));
        }
        Ok(stale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_states_round_trip() {
        let state =
            OrderState { status: OrderStatus::Failed, user_id: 42, reason: Some("NO_DB_STOCK".into()), accepted_at: 7 };
        assert_eq!(OrderState::parse(&state.encode()), Some(state));
        let queued = OrderState::parse("QUEUED|9||123").expect("valid");
        assert_eq!(queued.reason, None);
        assert_eq!(OrderState::parse("garbage"), None);
    }

    #[test]
    fn a_trace_says_what_its_order_holds_and_an_older_one_means_one_unit() {
        let now = ReservationTrace::parse("3|r-1|00-ab-cd-01|2|1").expect("valid");
        assert_eq!((now.round, now.request_id.as_str(), now.traceparent.as_str()), (3, "r-1", "00-ab-cd-01"));
        assert_eq!(now.held, Holding { quantity: 2, slot: 1 });
        let before = ReservationTrace::parse("3|r-1|").expect("valid");
        assert_eq!((before.traceparent.as_str(), before.held), ("", Holding::ONE));
        assert_eq!(ReservationTrace::parse("3|r-1|tp|x|1"), None);
    }
}
