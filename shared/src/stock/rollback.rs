//! Undoing a deduction whose publish definitely failed (`lua/rollback.lua`).

use super::with_keys;
use crate::domain::{FailReason, Holding, OrderId, UserId};
use crate::stock::conn::RedisCallError;
use redis::Script;
use std::sync::LazyLock;
use std::time::Duration;

static ROLLBACK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/rollback.lua")));

impl crate::stock::Orders<'_> {
    /// Puts the order's units back, frees the buyer and their place, and
    /// marks the order FAILED, if the
    /// order is still QUEUED and its `publish_deadline` (the one it was
    /// accepted with) has not passed: after it the reservation is the
    /// sweeper's. Returns whether a unit went back.
    #[tracing::instrument(name = "rollback", skip_all, fields(order_id = %order_id))]
    pub async fn rollback(
        self,
        order_id: &OrderId,
        user: UserId,
        held: Holding,
        reason: FailReason,
        publish_deadline: Duration,
    ) -> Result<bool, RedisCallError> {
        let k = self.keys.order(order_id);
        let mut invocation =
            with_keys(&ROLLBACK, &[&k.stock, &k.buyers, &k.orders, &k.reserved, &k.meta, &k.trace, &k.held]);
        invocation
            .arg(order_id.as_str())
            .arg(user.get())
            .arg(reason.code())
            .arg(publish_deadline.as_millis() as u64)
            .arg(held.quantity)
            .arg(held.slot);
        let restored: i64 = self.conn.invoke(&invocation).await?;
        Ok(restored == super::protocol::rollback::RESTORED)
    }
}
