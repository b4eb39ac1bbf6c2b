//! Each order's status in Redis, and the reservations of orders not yet
//! written: read for the buyer, cleared by the order service, swept by the
//! reservation sweeper. (Marking orders CREATED is
//! [`Orders::follow_created`](crate::stock::Orders::follow_created).)

use super::by_bucket;
use crate::domain::{OrderId, SaleKey, UserId};
use crate::stock::conn::RedisCallError;
use crate::stock::values::{OrderState, ReservationTrace};
use redis::AsyncCommands;

impl crate::stock::Orders<'_> {
    /// What Redis knows of one order.
    pub async fn order_state(self, order_id: &OrderId) -> Result<Option<OrderState>, RedisCallError> {
        let k = self.keys.order(order_id);
        let mut conn = self.conn.clone();
        let value: Option<String> = self.conn.bounded(conn.hget(&k.orders, order_id.as_str())).await?;
        Ok(value.as_deref().and_then(OrderState::parse))
    }

    /// What Redis knows of one order, and its reservation's trace while it
    /// has one (what a QUEUED order holds): both in one round trip.
    pub async fn order_state_and_trace(
        self,
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
    pub async fn user_order(self, sale: SaleKey, user: UserId) -> Result<Option<String>, RedisCallError> {
        let home = self.bucket_moves().directory(sale).await?.home(user);
        let k = self.keys.bucket(sale, home);
        let mut conn = self.conn.clone();
        self.conn.bounded(conn.hget(&k.buyers, user.get())).await
    }

    /// The user's place an order holds (its slot), in a round with a limit
    /// above one unit per user: `None` when no place holds it (given back,
    /// or a round with a limit of one, whose one place is 0).
    pub async fn held_slot(self, order_id: &OrderId, user: UserId) -> Result<Option<u32>, RedisCallError> {
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
    pub async fn unreserve(self, orders: &[OrderId]) -> Result<(), RedisCallError> {
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
    pub async fn reservation_trace(self, order_id: &OrderId) -> Result<Option<ReservationTrace>, RedisCallError> {
        let k = self.keys.order(order_id);
        let mut conn = self.conn.clone();
        let value: Option<String> = self.conn.bounded(conn.hget(&k.trace, order_id.as_str())).await?;
        Ok(value.as_deref().and_then(ReservationTrace::parse))
    }

    /// Moves an order's reservation's deadline to `deadline_ms` (Redis
    /// clock), if it is still reserved: it is not swept before.
    pub async fn reserve_until(self, order_id: &OrderId, deadline_ms: i64) -> Result<(), RedisCallError> {
        let k = self.keys.order(order_id);
        let mut conn = self.conn.clone();
        let options = redis::SortedSetAddOptions::update_only(None);
        self.conn.bounded(conn.zadd_options::<_, _, _, ()>(&k.reserved, order_id.as_str(), deadline_ms, &options)).await
    }

    /// Reservations whose publish deadline passed before `cutoff_ms` (Redis
    /// clock), oldest first, at most `limit` per bucket of the sale.
    pub async fn stale_reservations(
        self,
        sale: SaleKey,
        cutoff_ms: i64,
        limit: isize,
    ) -> Result<Vec<OrderId>, RedisCallError> {
        let mut stale = Vec::new();
        for bucket in self.bucket_moves().directory(sale).await?.buckets {
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
