//! Loading a sale round into its buckets (`lua/freeze.lua`,
//! `lua/warmup.lua`), and closing it (`lua/close.lua`).

use super::directory::Directory;
use super::keys::Bucket;
use super::with_keys;
use crate::domain::{Limits, SaleKey};
use crate::stock::conn::RedisCallError;
use redis::Script;
use std::sync::LazyLock;

static WARMUP: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/warmup.lua")));
static FREEZE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/freeze.lua")));
static CLOSE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/close.lua")));

/// One round of a sale, as Redis loads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// Units on sale.
    pub stock: i64,
    /// Window start (ms), 0 = open.
    pub starts_ms: i64,
    /// Window end (ms), 0 = open.
    pub ends_ms: i64,
    /// The round number PostgreSQL gave it.
    pub round: i64,
    /// When the keys expire (ms), 0 = never (the order counter never does).
    pub expire_at_ms: i64,
    /// Replace the previous round even if it has orders in flight.
    pub force: bool,
    /// Sold only with an admission from the sale's waiting room.
    pub admission: bool,
    /// Units per user and per order.
    pub limits: Limits,
}

/// Where one bucket stands in its round's list of buckets.
#[derive(Debug, Clone, Copy)]
struct Place<'a> {
    /// The round's buckets, as meta keeps them.
    list: &'a str,
    /// How many.
    of: usize,
    /// This bucket's place (-1: a bucket retired, serving no one).
    home: i64,
    /// Its units.
    units: i64,
}

impl crate::stock::WarmUps<'_> {
    /// Loads a sale round into `buckets` (bucket 0 first; one for a sale
    /// without buckets), its stock shared among them, replacing the
    /// previous round — unless that one has orders in flight in any of its
    /// buckets and `force` is off: then nothing changes and this answers
    /// `false`. Registers the sale for the sweeper. (Redis alone: the warm-up
    /// of a sale is [`crate::sales::warmup`], which commits the round in
    /// PostgreSQL between holding the buckets still and loading them.)
    pub async fn warmup(self, sale: SaleKey, buckets: &[Bucket], round: Round) -> Result<bool, RedisCallError> {
        let of = buckets.len().max(1) as i64;
        let share = |i: usize| round.stock / of + i64::from((i as i64) < round.stock % of);
        let shares: Vec<(Bucket, i64)> = buckets.iter().enumerate().map(|(i, b)| (*b, share(i))).collect();
        self.warmup_shares(sale, &shares, round).await
    }

    /// [`WarmUps::warmup`](crate::stock::WarmUps::warmup) with each bucket's units given (`round.stock` is
    /// not read): buckets loaded unevenly, as a test of the moves between
    /// them needs.
    pub async fn warmup_shares(
        self,
        sale: SaleKey,
        shares: &[(Bucket, i64)],
        round: Round,
    ) -> Result<bool, RedisCallError> {
        let buckets: Vec<Bucket> = shares.iter().map(|(b, _)| *b).collect();
        let previous = self.bucket_moves().directory(sale).await?.buckets;
        let retired: Vec<Bucket> = previous.iter().copied().filter(|b| !buckets.contains(b)).collect();
        let every: Vec<Bucket> = buckets.iter().chain(&retired).copied().collect();
        if !self.freeze(sale, &every, round.force).await? {
            return Ok(false);
        }
        let id = format!("r-{:016x}", rand::random::<u64>());
        self.load_shares(sale, shares, &retired, Round { force: true, ..round }, &id).await?;
        Ok(true)
    }

    /// Loads a round into `buckets` (its stock shared among them) once
    /// they are held still ([`WarmUps::freeze`](crate::stock::WarmUps::freeze)), for the warm-up `warmup_id`:
    /// `retired` (the previous round's buckets it lists no more) first, as
    /// serving no one, then the round's, bucket 0 (whose list the edges
    /// read) last, then the retired ones deleted; registers the sale. A
    /// bucket this warm-up loaded before is left as it is (it may be
    /// selling): run again, this finishes what a run that stopped began.
    #[tracing::instrument(name = "load_round", skip_all, fields(%sale, warmup_id))]
    pub async fn load_round(
        self,
        sale: SaleKey,
        buckets: &[Bucket],
        retired: &[Bucket],
        round: Round,
        warmup_id: &str,
    ) -> Result<(), RedisCallError> {
        let of = buckets.len().max(1) as i64;
        let share = |i: usize| round.stock / of + i64::from((i as i64) < round.stock % of);
        let shares: Vec<(Bucket, i64)> = buckets.iter().enumerate().map(|(i, b)| (*b, share(i))).collect();
        self.load_shares(sale, &shares, retired, round, warmup_id).await
    }

    async fn load_shares(
        self,
        sale: SaleKey,
        shares: &[(Bucket, i64)],
        retired: &[Bucket],
        round: Round,
        warmup_id: &str,
    ) -> Result<(), RedisCallError> {
        let buckets: Vec<Bucket> = shares.iter().map(|(b, _)| *b).collect();
        let list = Directory::encode(&buckets);
        let of = buckets.len();
        for bucket in retired {
            let place = Place { list: &list, of, home: -1, units: 0 };
            self.warmup_bucket(sale, *bucket, round, place, warmup_id).await?;
        }
        for (i, (bucket, units)) in shares.iter().enumerate().rev() {
            let place = Place { list: &list, of, home: i as i64, units: *units };
            self.warmup_bucket(sale, *bucket, round, place, warmup_id).await?;
        }
        for bucket in retired {
            self.delete_bucket(sale, *bucket).await?;
        }
        let mut register = redis::pipe();
        register.sadd(self.keys.registry(), sale.to_string()).ignore();
        self.conn.pipe::<()>(&register).await?;
        Ok(())
    }

    /// Whether the replicas have what was last written to one bucket's
    /// round (a load, a close: its meta), and everything before it.
    pub async fn round_confirmed(self, sale: SaleKey, bucket: Bucket) -> Result<bool, RedisCallError> {
        let k = self.keys.bucket(sale, bucket);
        Ok(self.orders().confirm_field(&k.meta, &k.meta, "round").await?.confirmed())
    }

    /// Holds `buckets` still for a warm-up (`lua/freeze.lua`); when one
    /// refuses (orders in flight), lets the others go again and answers
    /// `false`.
    pub async fn freeze(self, sale: SaleKey, buckets: &[Bucket], force: bool) -> Result<bool, RedisCallError> {
        for (i, bucket) in buckets.iter().enumerate() {
            let k = self.keys.bucket(sale, *bucket);
            let mut invocation = with_keys(&FREEZE, &[&k.meta, &k.reserved]);
            invocation.arg(if force { "1" } else { "0" });
            let frozen: i64 = self.conn.invoke(&invocation).await?;
            if frozen == super::protocol::freeze::REFUSED {
                for thawed in &buckets[..i] {
                    let mut thaw = redis::pipe();
                    thaw.hdel(&self.keys.bucket(sale, *thawed).meta, "warming").ignore();
                    self.conn.pipe::<()>(&thaw).await?;
                }
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Loads one bucket of a sale round with `place.units` units: checked
    /// and loaded in one script (`lua/warmup.lua`); a bucket `warmup_id`
    /// loaded before is left as it is.
    async fn warmup_bucket(
        self,
        sale: SaleKey,
        bucket: Bucket,
        round: Round,
        place: Place<'_>,
        warmup_id: &str,
    ) -> Result<bool, RedisCallError> {
        let mut invocation = with_keys(&WARMUP, &self.keys.bucket(sale, bucket).every_key());
        invocation
            .arg(place.units)
            .arg(round.starts_ms)
            .arg(round.ends_ms)
            .arg(round.round)
            .arg(round.expire_at_ms)
            .arg(if round.force { "1" } else { "0" })
            .arg(place.list)
            .arg(place.of)
            .arg(place.home)
            .arg(warmup_id)
            .arg(if round.admission { "1" } else { "0" })
            .arg(round.limits.per_user_limit)
            .arg(round.limits.max_per_order);
        let loaded: i64 = self.conn.invoke(&invocation).await?;
        use super::protocol::warmup::{LOADED, LOADED_BEFORE};
        Ok(matches!(loaded, LOADED | LOADED_BEFORE))
    }

    /// Deletes every key of one bucket of a sale at once (what a benchmark
    /// wrote: left to expire, a few runs fill a bounded node).
    pub async fn delete_bucket(self, sale: SaleKey, bucket: Bucket) -> Result<(), RedisCallError> {
        let mut pipe = redis::pipe();
        pipe.del(&self.keys.bucket(sale, bucket).every_key()).ignore();
        self.conn.pipe::<()>(&pipe).await.map(drop)
    }

    /// Closes a sale's round now (an end only moves earlier), in each of
    /// its buckets: no order is accepted after it, and every key of the
    /// sale expires once the payment window (`window_secs`) and the margin
    /// have passed. The end in force (ms, bucket 0's), or `None` when Redis
    /// holds no round of the sale.
    pub async fn close(self, sale: SaleKey, window_secs: i64) -> Result<Option<i64>, RedisCallError> {
        let expire_at = self.sale_keys_expire_at(0, window_secs);
        let mut first = None;
        // Bucket 0, whose list the edges read, last.
        for bucket in self.bucket_moves().directory(sale).await?.buckets.iter().rev() {
            let mut invocation = with_keys(&CLOSE, &self.keys.bucket(sale, *bucket).every_key());
            invocation.arg(expire_at);
            let ends: i64 = self.conn.invoke(&invocation).await?;
            first = (ends > 0).then_some(ends);
        }
        Ok(first)
    }
}
