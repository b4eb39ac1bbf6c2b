//! Giving cancelled orders' units back, at most once each (`lua/cancel.lua`).

use super::{by_bucket, with_keys};
use crate::domain::{Holding, OrderId, SaleKey, UserId};
use crate::stock::conn::RedisCallError;
use redis::Script;
use std::sync::LazyLock;

static CANCEL: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/cancel.lua")));

/// One cancelled order, as Redis needs it.
#[derive(Debug, Clone)]
pub struct Cancelled {
    pub order_id: OrderId,
    pub user: UserId,
    /// `EXPIRED` or `BUYER_CANCELLED`.
    pub reason: &'static str,
    /// Its units and its user's place.
    pub held: Holding,
}

impl crate::stock::Orders<'_> {
    /// Gives back the units of `orders` (all of `sale`, cancelled in
    /// PostgreSQL first) to the sale, clearing their buyers and places; an
    /// order whose units went back already gives nothing. Returns how many
    /// units went back now.
    #[tracing::instrument(name = "stock.cancel", skip_all, fields(%sale, orders = orders.len()))]
    pub async fn cancel(self, sale: SaleKey, orders: &[Cancelled]) -> Result<i64, RedisCallError> {
        let mut returned = 0;
        // Each unit goes back to the bucket its order was deducted in.
        for ((of_sale, bucket), orders) in by_bucket(orders, |order| &order.order_id) {
            debug_assert_eq!(of_sale, sale, "every order of one sale");
            let k = self.keys.bucket(sale, bucket);
            let mut invocation =
                with_keys(&CANCEL, &[&k.stock, &k.buyers, &k.orders, &k.reserved, &k.returned, &k.meta, &k.held]);
            for order in orders {
                invocation
                    .arg(order.order_id.as_str())
                    .arg(order.user.get())
                    .arg(order.reason)
                    .arg(order.held.quantity)
                    .arg(order.held.slot);
            }
            returned += self.conn.invoke::<i64>(&invocation).await?;
        }
        Ok(returned)
    }
}
