//! Redis follows PostgreSQL for orders it wrote CREATED
//! (`lua/follow_created.lua`): their status, their reservation, the sale's
//! status counters, and the unit of an order Redis had undone.

use super::{by_bucket, with_keys, Stock};
use crate::domain::{Holding, OrderId, UserId};
use crate::stock::conn::RedisCallError;
use redis::Script;
use std::sync::LazyLock;

static FOLLOW_CREATED: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/follow_created.lua")));

impl Stock {
    /// Marks orders CREATED and clears their reservations
    /// (`lua/follow_created.lua`): one script call per sale, every order of
    /// the sale in it, the status counters kept. Called after PostgreSQL
    /// committed their rows.
    #[tracing::instrument(name = "follow_created", level = "debug", skip_all, fields(orders = orders.len()))]
    pub async fn follow_created(&self, orders: &[(OrderId, UserId, i64, Holding)]) -> Result<(), RedisCallError> {
        for ((sale, bucket), orders) in by_bucket(orders, |order| &order.0) {
            let k = self.keys.bucket(sale, bucket);
            let mut invocation =
                with_keys(&FOLLOW_CREATED, &[&k.meta, &k.orders, &k.reserved, &k.trace, &k.stock, &k.buyers, &k.held]);
            for (order_id, user, accepted_at, held) in orders {
                invocation.arg(order_id.as_str()).arg(user.get()).arg(*accepted_at).arg(held.quantity).arg(held.slot);
            }
            let _: i64 = self.conn.invoke(&invocation).await?;
        }
        Ok(())
    }
}
