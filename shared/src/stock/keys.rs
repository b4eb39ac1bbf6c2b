//! The key layout: the only code that knows how a sale's keys are named.
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
//! | `…:trace` | hash | order id → `round\|request id\|traceparent` while reserved: what a republish needs |
//! | `…:call:<id>` | string | a deduction call's outcome (or `V`, voided), kept a short while |
//! | `…:lock`, `…:warmup` | string | the sale's locks (lock deduction, warm-up) |
//! | `P seckill:{sweeper}:lock` | string | the reservation sweeper's lock |
//! | `P seckill:sales` | set | every warmed sale (`A:S`), for the sweeper |
//!
//! `P` is the deployment's key prefix (`SECKILL_KEY_PREFIX`).

use crate::domain::SaleKey;

/// Names keys under one deployment's prefix.
#[derive(Debug, Clone)]
pub struct KeyLayout {
    prefix: String,
}

/// One sale's keys, derived once per call.
#[derive(Debug, Clone)]
pub struct SaleKeys {
    pub(super) meta: String,
    pub(super) stock: String,
    pub(super) buyers: String,
    pub(super) orders: String,
    pub(super) reserved: String,
    pub(super) seq: String,
    pub(super) compensated: String,
    pub(super) written_off: String,
    pub(super) returned: String,
    pub(super) trace: String,
    base: String,
}

impl SaleKeys {
    /// Every key of the round, in the order `lua/warmup.lua` and
    /// `lua/close.lua` take them.
    pub(super) fn every_key(&self) -> [&String; 10] {
        [
            &self.meta,
            &self.stock,
            &self.buyers,
            &self.orders,
            &self.reserved,
            &self.compensated,
            &self.written_off,
            &self.seq,
            &self.returned,
            &self.trace,
        ]
    }

    /// The key of one deduction call's outcome.
    pub(super) fn call(&self, call_id: &str) -> String {
        format!("{}:call:{call_id}", self.base)
    }
}

/// What a per-sale lock guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaleLock {
    /// The seed's lock-based deduction.
    Deduction,
    /// One warm-up of the sale at a time.
    Warmup,
}

impl KeyLayout {
    /// The layout under `prefix`.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self { prefix: prefix.into() }
    }

    /// What every key of `sale` starts with, its hash tag included: the one
    /// slot a Redis Cluster keeps all of them in.
    pub fn sale_base(&self, sale: SaleKey) -> String {
        format!("{}seckill:{{{}:{}}}", self.prefix, sale.activity, sale.sku)
    }

    /// Every key of one sale.
    pub fn sale(&self, sale: SaleKey) -> SaleKeys {
        let base = self.sale_base(sale);
        SaleKeys {
            meta: format!("{base}:meta"),
            stock: format!("{base}:stock"),
            buyers: format!("{base}:buyers"),
            orders: format!("{base}:orders"),
            reserved: format!("{base}:reserved"),
            seq: format!("{base}:seq"),
            compensated: format!("{base}:compensated"),
            written_off: format!("{base}:written_off"),
            returned: format!("{base}:returned"),
            trace: format!("{base}:trace"),
            base,
        }
    }

    /// A per-sale lock, under the sale's hash tag.
    pub fn sale_lock(&self, sale: SaleKey, lock: SaleLock) -> String {
        let purpose = match lock {
            SaleLock::Deduction => "lock",
            SaleLock::Warmup => "warmup",
        };
        format!("{}:{purpose}", self.sale_base(sale))
    }

    /// The reservation sweeper's lock.
    pub fn sweeper_lock(&self) -> String {
        format!("{}seckill:{{sweeper}}:lock", self.prefix)
    }

    /// The reservation sweeper's last sweep (for the dashboard).
    pub(super) fn sweeper_last(&self) -> String {
        format!("{}seckill:{{sweeper}}:last", self.prefix)
    }

    /// The set of every warmed sale.
    pub(super) fn registry(&self) -> String {
        format!("{}seckill:sales", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_sale_shares_its_hash_tag() {
        let layout = KeyLayout::new("p:");
        let sale = SaleKey::from_raw(7, 9).unwrap();
        let k = layout.sale(sale);
        for key in [&k.meta, &k.stock, &k.buyers, &k.orders, &k.reserved, &k.seq, &k.compensated, &k.written_off] {
            assert!(key.starts_with("p:seckill:{7:9}:"), "{key}");
        }
        assert_eq!(layout.sale_lock(sale, SaleLock::Warmup), "p:seckill:{7:9}:warmup");
    }

    /// What a Redis Cluster requires of every script and pipeline here: all
    /// the keys one call touches hash to one slot (the cluster refuses the
    /// call otherwise, `CROSSSLOT`: tests/e2e/redis_cluster.rs).
    #[test]
    fn every_key_of_a_sale_hashes_to_one_slot() {
        use redis::cluster_routing::Slot;
        let layout = KeyLayout::new("t0123:");
        for (a, s) in [(1, 2), (1001, 2001), (987_654, 3)] {
            let sale = SaleKey::from_raw(a, s).unwrap();
            let k = layout.sale(sale);
            let slot = Slot::for_key(&k.meta);
            let mut keys: Vec<String> = k.every_key().into_iter().cloned().collect();
            keys.extend([
                k.call("00ff"),
                layout.sale_lock(sale, SaleLock::Deduction),
                layout.sale_lock(sale, SaleLock::Warmup),
            ]);
            for key in keys {
                assert_eq!(Slot::for_key(&key), slot, "{key}");
            }
        }
        let other = layout.sale(SaleKey::from_raw(1, 3).unwrap());
        assert_ne!(Slot::for_key(&other.meta), Slot::for_key(&layout.sale(SaleKey::from_raw(1, 2).unwrap()).meta));
    }
}
