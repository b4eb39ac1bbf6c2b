//! Redis follows PostgreSQL for orders it wrote CREATED
//! (`lua/follow_created.lua`): their status, their reservation, the sale's
//! status counters, and the unit of an order Redis had undone.

use super::by_bucket;
use crate::domain::{Holding, OrderId, UserId};
use crate::stock::conn::RedisCallError;
use redis::Script;
use std::sync::LazyLock;

static FOLLOW_CREATED: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/follow_created.lua")));

/// Most orders one script call follows. A call holds Redis — every sale's
/// deductions wait behind it — for about 8 µs an order here: a batch of
/// thousands in one call held it some tens of milliseconds, the accepted
/// path's p99 while the order service drained. A slice this size holds it
/// about a millisecond; the slices of a batch go out together (pipelined on
/// the connection), and other clients' calls run between them.
pub const FOLLOW_SLICE: usize = 128;

impl crate::stock::Orders<'_> {
    /// Marks orders CREATED and clears their reservations
    /// (`lua/follow_created.lua`): a script call per [`FOLLOW_SLICE`]
    /// orders of one bucket, the status counters kept by each. Called after
    /// PostgreSQL committed their rows.
    #[tracing::instrument(name = "follow_created", level = "debug", skip_all, fields(orders = orders.len()))]
    pub async fn follow_created(self, orders: &[(OrderId, UserId, i64, Holding)]) -> Result<(), RedisCallError> {
        let mut calls = Vec::new();
        for ((sale, bucket), orders) in by_bucket(orders, |order| &order.0) {
            let k = self.keys.bucket_kept(sale, bucket);
            for slice in orders.chunks(FOLLOW_SLICE) {
                let mut evalsha = redis::cmd("EVALSHA");
                evalsha.arg(FOLLOW_CREATED.get_hash()).arg(7);
                for key in [&k.meta, &k.orders, &k.reserved, &k.trace, &k.stock, &k.buyers, &k.held] {
                    evalsha.arg(key.as_str());
                }
                for (order_id, user, accepted_at, held) in slice {
                    evalsha.arg(order_id.as_str()).arg(user.get()).arg(*accepted_at).arg(held.quantity).arg(held.slot);
                }
                calls.push((evalsha, k.clone()));
            }
        }
        let followed = calls.iter().map(|(evalsha, k)| self.conn.evalsha::<i64>(&FOLLOW_CREATED, evalsha, &k.meta));
        futures::future::try_join_all(followed).await?;
        Ok(())
    }
}
