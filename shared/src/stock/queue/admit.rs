//! One admission pass of a waiting room (`lua/queue_admit.lua`).

use super::super::with_keys;
use crate::domain::{SaleKey, UserId};
use crate::stock::conn::RedisCallError;
use redis::Script;
use std::sync::LazyLock;
use std::time::Duration;

static QUEUE_ADMIT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../../lua/queue_admit.lua")));

/// Most tickets one pass admits.
pub const MOST_PER_PASS: i64 = 500;

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// Tickets admitted by this pass.
    pub now: i64,
    /// Tickets in line and admitted-unused after it.
    pub waiting: i64,
    pub active: i64,
    /// Tickets still claimed past their token's expiry plus the grace the
    /// pass was given: their order was never settled (its edge died, or
    /// the settling call was lost). Each is the caller's to settle
    /// ([`WaitingRoom::settle_stale_claim`](crate::stock::WaitingRoom::settle_stale_claim)).
    pub stale: Vec<(String, UserId)>,
}

/// What a pass read before its script ran ([`WaitingRoom::pass_reads`](crate::stock::WaitingRoom::pass_reads)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassReads {
    /// The rights used by an order so far (the room's meta `used`).
    pub used: i64,
    /// The orders the units left could take, read after `used`.
    pub orders: i64,
}

impl crate::stock::WaitingRoom<'_> {
    /// One admission pass of `sale`'s room: by the orders the units still
    /// on sale can take (every bucket's units, read now, over the round's
    /// `maxPerOrder`, rounded up: an admitted buyer may take that many, and
    /// the last unit still admits one), with a rate tolerance of `tolerance_ms`
    /// (the time between passes, so a pass admits what the rate let
    /// through since the last). A ticket claimed for an order is stale
    /// once `grace` (the publish deadline) has passed since its token's
    /// expiry.
    pub async fn admit_pass(
        self,
        sale: SaleKey,
        tolerance_ms: i64,
        grace: Duration,
    ) -> Result<Admitted, RedisCallError> {
        let reads = self.pass_reads(sale).await?;
        self.admit_after(sale, reads, tolerance_ms, grace).await
    }

    /// What a pass reads before its script runs, in this order: the rights
    /// used so far, then the orders the units left can take. A right spent
    /// in between or after may have taken its units after the second read:
    /// the script counts every right spent since the first as taken
    /// (`queue_admit.lua`, `ARGV[5]`), so a pass never admits on units already
    /// sold.
    pub async fn pass_reads(self, sale: SaleKey) -> Result<PassReads, RedisCallError> {
        let k = self.keys.queue(sale);
        let [meta, ..] = k.all();
        let mut pipe = redis::pipe();
        pipe.hget(meta, "used");
        let (used,): (Option<i64>,) = self.conn.pipe(&pipe).await?.unwrap_or_default();
        let orders = self.orders_left(sale).await?;
        Ok(PassReads { used: used.unwrap_or(0), orders })
    }

    /// The pass's script on `reads` made before.
    pub async fn admit_after(
        self,
        sale: SaleKey,
        reads: PassReads,
        tolerance_ms: i64,
        grace: Duration,
    ) -> Result<Admitted, RedisCallError> {
        let k = self.keys.queue(sale);
        let mut invocation = with_keys(&QUEUE_ADMIT, &k.all());
        invocation.arg(reads.orders).arg(MOST_PER_PASS).arg(tolerance_ms).arg(grace.as_millis() as u64);
        invocation.arg(reads.used);
        let (now, waiting, active, stale): (i64, i64, i64, Vec<String>) = self.conn.invoke(&invocation).await?;
        let stale = stale
            .chunks(2)
            .filter_map(|pair| match pair {
                [ticket, user] => Some((ticket.clone(), user.parse().ok()?)),
                _ => None,
            })
            .collect();
        Ok(Admitted { now, waiting, active, stale })
    }
}

impl crate::stock::WaitingRoom<'_> {
    /// The orders the units still on sale can take (every bucket's units,
    /// read now, over the round's `maxPerOrder`, rounded up).
    pub async fn orders_left(self, sale: SaleKey) -> Result<i64, RedisCallError> {
        let snapshot = self.books().snapshot(sale).await?;
        let units = if snapshot.exists { snapshot.remaining } else { 0 };
        Ok(orders_left(units, snapshot.max_per_order))
    }
}

/// The orders of at most `max_per_order` units each that `units` can take
/// whole or in part: none only when no unit is left.
fn orders_left(units: i64, max_per_order: i64) -> i64 {
    let max = max_per_order.max(1);
    (units.max(0) + max - 1) / max
}

#[cfg(test)]
mod tests {
    use super::orders_left;

    #[test]
    fn the_last_units_still_admit_a_buyer_and_none_admit_nobody() {
        assert_eq!(orders_left(10, 1), 10, "one unit per order: as before");
        assert_eq!((orders_left(10, 2), orders_left(9, 2), orders_left(1, 2)), (5, 5, 1));
        assert_eq!((orders_left(0, 3), orders_left(-1, 3), orders_left(5, 0)), (0, 0, 5));
    }
}
