//! The key layout: the only code that knows how a sale's keys are named.
//!
//! Every key of one sale carries the hash tag `{activity:sku}`, so each script
//! touches a single slot and runs unchanged on Redis Cluster:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P seckill:{A:S}:meta` | hash | total, starts, ends (ms), round, limit and max (units per user and per order) |
//! | `…:stock` | string | units left |
//! | `…:buyers` | hash | user id → order id (the latest, with a limit above one) |
//! | `…:orders` | hash | order id → `STATUS\|user\|reason\|accepted_ms` |
//! | `…:reserved` | zset | order ids accepted but not yet settled, by time |
//! | `…:seq` | string | order counter (never reset) |
//! | `…:compensated` | set | order ids whose unit was restored |
//! | `…:written_off` | set | order ids whose unit the database never had |
//! | `…:trace` | hash | order id → `round\|request id\|traceparent\|quantity\|slot` while reserved: what a republish needs |
//! | `…:held` | hash | a limit above one: `user/slot` → `order id\|quantity`, each place a live order holds |
//! | `…:lent` | hash | transfer id → `to\|units\|round\|at_ms`: units this bucket lent another (`lua/lend.lua`) |
//! | `…:received` | set | transfer ids whose units this bucket took in (`lua/receive.lua`) |
//! | `…:call:<id>` | string | a deduction call's outcome (or `V`, voided), kept a short while |
//! | `…:lock`, `…:warmup` | string | the sale's locks (lock deduction, warm-up) |
//! | `…:q:meta`, `…:q:line`, `…:q:tickets`, `…:q:users`, `…:q:active`, `…:q:seen`, `…:q:log`, `…:q:challenges` | | the sale's waiting room (`lua/queue_setup.lua` says what each holds), in bucket 0's slot |
//! | `P seckill:{sweeper}:lock` | string | the reservation sweeper's lock |
//! | `P seckill:sales` | set | every warmed sale (`A:S`), for the sweeper |
//! | `P seckill:rooms` | set | every sale with a waiting room (`A:S`), for the edges' admission passes |
//! | `P seckill:{release:A}:meta`, `…:held`, `…:takes`, `…:pending` | | a release's limit and its customers' takes (`lua/release_take.lua`), read and written in `release.rs` |
//! | `P seckill:releases` | set | every declared release (`A`), for the sweep |
//!
//! `P` is the deployment's key prefix (`SECKILL_KEY_PREFIX`).
//!
//! **Buckets.** A hot sale's stock may be spread over buckets, each a full
//! key set of its own in a slot of its own: bucket 0 is the sale's keys
//! above, bucket `n > 0` has the same keys under `{A:S:n}`. An order id
//! names its bucket (its nonce ends in `k<n>`, none for bucket 0), so what
//! settles an order finds its keys from the id alone.

use crate::domain::{ActivityId, OrderId, SaleKey};

/// Names keys under one deployment's prefix.
#[derive(Debug, Clone)]
pub struct KeyLayout {
    prefix: String,
    /// Each bucket's keys as the deduction asked for them last: named once
    /// per bucket, not once per call (a dozen strings formatted per call
    /// were a tenth of the edge's work on the accepted path).
    named: std::sync::Arc<parking_lot::RwLock<Named>>,
}

/// Buckets' keys, named.
type Named = std::collections::HashMap<(SaleKey, Bucket), std::sync::Arc<SaleKeys>>;

/// Buckets whose keys are kept named before the set is dropped and named
/// again as they are asked for.
const MOST_NAMED: usize = 4_096;

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
    pub(super) lent: String,
    pub(super) received: String,
    /// A limit above one unit per user: each user's places and the orders
    /// holding them.
    pub(super) held: String,
    base: String,
}

/// One of a sale's stock buckets: 0 is the sale's own keys, `n > 0` a key
/// set of its own under the hash tag `{A:S:n}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bucket(pub u32);

impl Bucket {
    /// The sale's own keys.
    pub const FIRST: Bucket = Bucket(0);

    /// What the deduction appends to a 16-hex-digit nonce so the order id
    /// names this bucket (nothing for bucket 0: every id minted before
    /// buckets existed names bucket 0).
    pub fn nonce_suffix(self) -> String {
        if self.0 == 0 {
            String::new()
        } else {
            format!("{BUCKET_MARK}{}", self.0)
        }
    }

    /// The bucket an order id names.
    pub fn of_order(order_id: &OrderId) -> Bucket {
        let nonce = order_id.as_str().rsplit('-').next().unwrap_or_default();
        nonce
            .get(NONCE_DIGITS..)
            .and_then(|rest| rest.strip_prefix(BUCKET_MARK))
            .and_then(|n| n.parse().ok())
            .map_or(Bucket::FIRST, Bucket)
    }
}

/// The hex digits of an order id's nonce, and the mark after them that
/// introduces its bucket (not a hex digit, so it cannot be read as one).
const NONCE_DIGITS: usize = 16;
const BUCKET_MARK: char = 'k';

/// The nonce an order id ends in (the edge's), without its bucket mark.
pub(super) fn order_nonce(order_id: &OrderId) -> &str {
    let nonce = order_id.as_str().rsplit('-').next().unwrap_or_default();
    nonce.get(..NONCE_DIGITS).unwrap_or(nonce)
}

impl SaleKeys {
    /// Every key of the round, in the order `lua/warmup.lua` and
    /// `lua/close.lua` take them.
    pub(super) fn every_key(&self) -> [&String; 13] {
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
            &self.lent,
            &self.received,
            &self.held,
        ]
    }

    /// The key of one deduction call's outcome.
    pub(super) fn call(&self, call_id: &str) -> String {
        format!("{}:call:{call_id}", self.base)
    }
}

/// The keys of a sale's waiting room, in the order `lua/queue_setup.lua`
/// takes them; all in the sale's own slot (its bucket 0's).
#[derive(Debug, Clone)]
pub struct QueueKeys {
    pub(super) keys: [String; 9],
}

impl QueueKeys {
    /// The room's hash (its settings and counters), for readers of its
    /// expiry (tests).
    pub fn meta(&self) -> &str {
        &self.keys[0]
    }

    /// All of them, for the scripts that take all.
    pub(crate) fn all(&self) -> [&String; 9] {
        self.keys.each_ref()
    }

    /// The four `lua/queue_claim.lua` takes: meta, tickets, active, events.
    pub(super) fn claim(&self) -> [&String; 4] {
        [&self.keys[0], &self.keys[2], &self.keys[4], &self.keys[8]]
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
        Self { prefix: prefix.into(), named: Default::default() }
    }

    /// [`KeyLayout::bucket`], named once and kept: for the calls made for
    /// every request.
    pub fn bucket_kept(&self, sale: SaleKey, bucket: Bucket) -> std::sync::Arc<SaleKeys> {
        if let Some(keys) = self.named.read().get(&(sale, bucket)) {
            return keys.clone();
        }
        let keys = std::sync::Arc::new(self.bucket(sale, bucket));
        let mut named = self.named.write();
        if named.len() >= MOST_NAMED {
            named.clear();
        }
        named.insert((sale, bucket), keys.clone());
        keys
    }

    /// What every key of `sale` starts with, its hash tag included: the one
    /// slot a Redis Cluster keeps all of them in.
    pub fn sale_base(&self, sale: SaleKey) -> String {
        format!("{}seckill:{{{}:{}}}", self.prefix, sale.activity, sale.sku)
    }

    /// What every key of one bucket of `sale` starts with (bucket 0: the
    /// sale's own, [`KeyLayout::sale_base`]).
    pub fn bucket_base(&self, sale: SaleKey, bucket: Bucket) -> String {
        match bucket.0 {
            0 => self.sale_base(sale),
            n => format!("{}seckill:{{{}:{}:{n}}}", self.prefix, sale.activity, sale.sku),
        }
    }

    /// Every key of one sale (its bucket 0).
    pub fn sale(&self, sale: SaleKey) -> SaleKeys {
        self.bucket(sale, Bucket::FIRST)
    }

    /// Every key of the bucket an order was deducted in.
    pub fn order(&self, order_id: &OrderId) -> SaleKeys {
        self.bucket(order_id.sale(), Bucket::of_order(order_id))
    }

    /// Every key of one bucket of a sale.
    pub fn bucket(&self, sale: SaleKey, bucket: Bucket) -> SaleKeys {
        let base = self.bucket_base(sale, bucket);
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
            lent: format!("{base}:lent"),
            received: format!("{base}:received"),
            held: format!("{base}:held"),
            base,
        }
    }

    /// The keys of `sale`'s waiting room.
    pub fn queue(&self, sale: SaleKey) -> QueueKeys {
        let base = self.sale_base(sale);
        let keys = ["meta", "line", "tickets", "users", "active", "seen", "log", "challenges", "events"]
            .map(|name| format!("{base}:q:{name}"));
        QueueKeys { keys }
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

    /// The set of every sale with a waiting room, for the edges' admission
    /// passes.
    pub(super) fn rooms(&self) -> String {
        format!("{}seckill:rooms", self.prefix)
    }
}

/// A release's keys, all under its hash tag `{release:A}`.
#[derive(Debug, Clone)]
pub struct ReleaseKeys {
    pub(super) meta: String,
    pub(super) held: String,
    pub(super) takes: String,
    pub(super) pending: String,
}

impl KeyLayout {
    /// The keys of activity `activity`'s release.
    pub fn release(&self, activity: ActivityId) -> ReleaseKeys {
        let base = format!("{}seckill:{{release:{activity}}}", self.prefix);
        ReleaseKeys {
            meta: format!("{base}:meta"),
            held: format!("{base}:held"),
            takes: format!("{base}:takes"),
            pending: format!("{base}:pending"),
        }
    }

    /// The set of every declared release (activity ids), for the sweep.
    pub(super) fn releases(&self) -> String {
        format!("{}seckill:releases", self.prefix)
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
            keys.extend(layout.queue(sale).all().into_iter().cloned());
            keys.extend([
                k.call("00ff"),
                layout.sale_lock(sale, SaleLock::Deduction),
                layout.sale_lock(sale, SaleLock::Warmup),
            ]);
            for key in keys {
                assert_eq!(Slot::for_key(&key), slot, "{key}");
            }
        }
        let sale = SaleKey::from_raw(1001, 2001).unwrap();
        let (first, second) = (layout.bucket(sale, Bucket(0)), layout.bucket(sale, Bucket(2)));
        assert_eq!(first.meta, layout.sale(sale).meta, "bucket 0 is the sale's own keys");
        assert_ne!(Slot::for_key(&first.meta), Slot::for_key(&second.meta), "another bucket, another slot");
        for key in second.every_key() {
            assert!(key.starts_with("t0123:seckill:{1001:2001:2}:"), "{key}");
            assert_eq!(Slot::for_key(key), Slot::for_key(&second.meta), "{key}");
        }
        let other = layout.sale(SaleKey::from_raw(1, 3).unwrap());
        assert_ne!(Slot::for_key(&other.meta), Slot::for_key(&layout.sale(SaleKey::from_raw(1, 2).unwrap()).meta));
    }

    #[test]
    fn an_order_id_names_its_bucket() {
        let layout = KeyLayout::new("p:");
        let sale = SaleKey::from_raw(7, 9).unwrap();
        for bucket in [Bucket(0), Bucket(1), Bucket(42)] {
            let id = OrderId::parse(&format!("7-9-12-00ff00ff00ff00ff{}", bucket.nonce_suffix())).unwrap();
            assert_eq!(Bucket::of_order(&id), bucket, "{id}");
            assert_eq!(layout.order(&id).meta, layout.bucket(sale, bucket).meta);
        }
        // Ids minted before buckets existed, and odd nonces, name bucket 0.
        for raw in ["7-9-12-00ff00ff00ff00ff", "7-9-12-abc", "7-9-12-00ff00ff00ff00ffkx"] {
            assert_eq!(Bucket::of_order(&OrderId::parse(raw).unwrap()), Bucket(0), "{raw}");
        }
    }
}
