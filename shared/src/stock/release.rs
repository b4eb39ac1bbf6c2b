//! A release: an activity whose sizes (each its own sale, `(A, S)`) share
//! one limit of units per customer ("one pair per customer"), kept in the
//! release's own slot (`{release:A}`), apart from every size's.
//!
//! An order in a release is two steps in two slots, each confirmed by the
//! replicas before the next: the customer's units are **taken** in the
//! release (`lua/release_take.lua`, refused past the limit) under the take
//! id `sku:nonce` — the nonce the order's id will end in —, then deducted
//! in the size's sale as any order, and the take **kept** with the order's
//! id (`lua/release_keep.lua`) before its record is published. A take whose
//! order was refused, undone, cancelled, expired or settled FAILED is
//! **given back** (`lua/release_give.lua`); one still pending past its time
//! (the edge died between the steps) is given back by the sweep unless its
//! order was made, which it then keeps. Keep and sweep decide in the one
//! slot: a kept take is never swept, and a swept one never kept (its order
//! is rolled back instead of published). Until then a take counts against
//! its customer, never for them.

use super::values::TakeValue;
use crate::domain::{ActivityId, OrderId, SaleKey, SkuId, UserId};
use crate::stock::conn::RedisCallError;
use redis::{AsyncCommands, Script};
use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

static RELEASE_TAKE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/release_take.lua")));
static RELEASE_KEEP: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/release_keep.lua")));
static RELEASE_GIVE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/release_give.lua")));

/// One order's take in its release: the size and the order-to-be's nonce
/// (its id's last part, without the bucket mark).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TakeId(String);

impl TakeId {
    /// The take of an order of `sku` whose id will end in `nonce`.
    pub fn new(sku: SkuId, nonce: &str) -> Self {
        Self(format!("{sku}:{nonce}"))
    }

    /// The take of `order_id`'s order.
    pub fn of_order(order_id: &OrderId) -> Self {
        Self::new(order_id.sale().sku, super::keys::order_nonce(order_id))
    }

    /// The id as the scripts take it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The size and the nonce it names.
    pub fn parts(&self) -> Option<(i64, &str)> {
        let (sku, nonce) = self.0.split_once(':')?;
        Some((sku.parse().ok()?, nonce))
    }
}

/// What taking units in a release came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// The activity declares no release: nothing taken, nothing to keep.
    NoRelease,
    /// Taken (or taken before, asked again): the user's units with it.
    Taken { held: i64, limit: i64 },
    /// The user's units plus those asked pass the limit: nothing taken.
    LimitReached { held: i64, limit: i64 },
}

impl crate::stock::Releases<'_> {
    /// Declares `activity` a release of at most `limit` units per customer
    /// across its sizes (a new limit replaces the old; the units held
    /// stand), confirmed by the replicas.
    pub async fn declare_release(self, activity: ActivityId, limit: u32) -> Result<(), RedisCallError> {
        let keys = self.keys.release(activity);
        let mut conn = self.conn.clone();
        self.conn.bounded(conn.sadd::<_, _, ()>(self.keys.releases(), activity.get())).await?;
        let mut set = redis::cmd("HSET");
        set.arg(&keys.meta).arg("limit").arg(limit);
        let (replicas, timeout) = self.replica_acks;
        let (_, confirmed): (i64, u32) = self.conn.write_then_wait(set, replicas, timeout).await?;
        if confirmed < replicas {
            return Err(RedisCallError::NotConfirmed { script: "HSET release", asked: replicas, confirmed });
        }
        Ok(())
    }

    /// The release's limit, when `activity` is one.
    pub async fn release_limit(self, activity: ActivityId) -> Result<Option<i64>, RedisCallError> {
        let mut conn = self.conn.clone();
        self.conn.bounded(conn.hget(&self.keys.release(activity).meta, "limit")).await
    }

    /// Every declared release.
    pub async fn declared(self) -> Result<Vec<ActivityId>, RedisCallError> {
        let mut conn = self.conn.clone();
        let ids: Vec<i64> = self.conn.bounded(conn.smembers(self.keys.releases())).await?;
        Ok(ids.into_iter().filter_map(|id| ActivityId::new(id).ok()).collect())
    }

    /// Takes `quantity` units for `user` in `activity`'s release under
    /// `take` (idempotent), confirmed by the replicas; a pending take is
    /// the sweep's after `pending_for`.
    pub async fn release_take(
        self,
        activity: ActivityId,
        take: &TakeId,
        user: UserId,
        quantity: u32,
        pending_for: Duration,
    ) -> Result<Take, RedisCallError> {
        let k = self.keys.release(activity);
        let keys = [k.meta.as_str(), &k.held, &k.takes, &k.pending];
        let args =
            [take.as_str(), &user.get().to_string(), &quantity.to_string(), &pending_for.as_millis().to_string()];
        let answer: Vec<i64> = self.release_step(&RELEASE_TAKE, "release_take.lua", &keys, &args).await?;
        use super::protocol::release_take::*;
        match answer[..] {
            [NO_RELEASE] => Ok(Take::NoRelease),
            [TAKEN, held, limit] => Ok(Take::Taken { held, limit }),
            [LIMIT_REACHED, held, limit] => Ok(Take::LimitReached { held, limit }),
            _ => Err(RedisCallError::Unexpected { script: "release_take.lua", answer: format!("{answer:?}") }),
        }
    }

    /// Keeps `take` for `order_id`'s order, confirmed by the replicas:
    /// `false` when the take is gone (the sweep gave it back): the order
    /// must not be published.
    pub async fn release_keep(self, take: &TakeId, order_id: &OrderId) -> Result<bool, RedisCallError> {
        let k = self.keys.release(order_id.sale().activity);
        let keys = [k.takes.as_str(), &k.pending];
        let answer: i64 =
            self.release_step(&RELEASE_KEEP, "release_keep.lua", &keys, &[take.as_str(), order_id.as_str()]).await?;
        use super::protocol::release_keep::*;
        match answer {
            KEPT => Ok(true),
            GONE => Ok(false),
            _ => Err(RedisCallError::Unexpected { script: "release_keep.lua", answer: answer.to_string() }),
        }
    }

    /// Gives `takes` of `activity`'s release back (`only_pending`: those
    /// not kept meanwhile), confirmed by the replicas; the units given back
    /// now.
    pub async fn release_give(
        self,
        activity: ActivityId,
        takes: &[TakeId],
        only_pending: bool,
    ) -> Result<i64, RedisCallError> {
        if takes.is_empty() {
            return Ok(0);
        }
        let k = self.keys.release(activity);
        let keys = [k.held.as_str(), &k.takes, &k.pending];
        let mut args = vec![if only_pending { "pending" } else { "any" }];
        args.extend(takes.iter().map(TakeId::as_str));
        let answer: Vec<i64> = self.release_step(&RELEASE_GIVE, "release_give.lua", &keys, &args).await?;
        Ok(answer.first().copied().unwrap_or(0))
    }

    /// Gives back the takes of `orders` (their units went back to their
    /// sales), release by release; a sale in no release costs one read.
    pub async fn release_give_orders(self, orders: &[OrderId]) -> Result<i64, RedisCallError> {
        let mut by_release: BTreeMap<ActivityId, Vec<TakeId>> = BTreeMap::new();
        for order in orders {
            by_release.entry(order.sale().activity).or_default().push(TakeId::of_order(order));
        }
        let mut units = 0;
        for (activity, takes) in by_release {
            if self.release_limit(activity).await?.is_some() {
                units += self.release_give(activity, &takes, false).await?;
            }
        }
        Ok(units)
    }

    /// Up to `most` pending takes of `activity`'s release whose time passed
    /// by Redis's clock, with their values.
    pub async fn stale_takes(
        self,
        activity: ActivityId,
        most: isize,
    ) -> Result<Vec<(TakeId, TakeValue)>, RedisCallError> {
        let k = self.keys.release(activity);
        let now = self.now_ms().await?;
        let mut conn = self.conn.clone();
        let ids: Vec<String> = self.conn.bounded(conn.zrangebyscore_limit(&k.pending, "-inf", now, 0, most)).await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let values: Vec<Option<String>> = self.conn.bounded(conn.hmget(&k.takes, &ids)).await?;
        Ok(ids
            .into_iter()
            .zip(values)
            .filter_map(|(id, value)| Some((TakeId(id), TakeValue::parse(&value?)?)))
            .collect())
    }

    /// The order made with `take` for `user`, if the size's sale holds it
    /// live: among the user's orders in their home bucket (their latest,
    /// and each place a live order holds), the one whose id ends in the
    /// take's nonce.
    pub async fn order_of_take(
        self,
        activity: ActivityId,
        take: &TakeId,
        user: UserId,
    ) -> Result<Option<OrderId>, RedisCallError> {
        let Some(sale) = take.parts().and_then(|(sku, _)| SaleKey::from_raw(activity.get(), sku).ok()) else {
            return Ok(None);
        };
        let k = self.keys.bucket(sale, self.bucket_moves().directory(sale).await?.home(user));
        let mut conn = self.conn.clone();
        let limit: Option<u32> = self.conn.bounded(conn.hget(&k.meta, "limit")).await?;
        let places: Vec<String> = (0..limit.unwrap_or(1).max(1)).map(|slot| format!("{user}/{slot}")).collect();
        let mut pipe = redis::pipe();
        pipe.hget(&k.buyers, user.get()).hmget(&k.held, &places);
        let (latest, held): (Option<String>, Vec<Option<String>>) = self.conn.pipe(&pipe).await?.unwrap_or_default();
        let nonce = take.parts().map(|(_, nonce)| nonce).unwrap_or_default();
        let candidates = latest.into_iter().chain(
            held.into_iter().flatten().filter_map(|place| place.split_once('|').map(|(order, _)| order.to_owned())),
        );
        Ok(candidates.filter_map(|id| OrderId::parse(&id).ok()).find(|id| super::keys::order_nonce(id) == nonce))
    }

    /// A page of `activity`'s takes from `cursor` (`HSCAN`, about `count`
    /// a page): the cursor of the next page (0: the last page) and the
    /// takes kept for orders, each with its order's status in Redis (`None`
    /// when Redis no longer holds the order).
    pub async fn kept_takes_page(
        self,
        activity: ActivityId,
        cursor: u64,
        count: usize,
    ) -> Result<(u64, Vec<(TakeId, OrderId, Option<crate::domain::OrderStatus>)>), RedisCallError> {
        let mut conn = self.conn.clone();
        let mut scan = redis::cmd("HSCAN");
        scan.arg(&self.keys.release(activity).takes).arg(cursor).arg("COUNT").arg(count);
        let (next, flat): (u64, Vec<String>) = self.conn.bounded(scan.query_async(&mut conn)).await?;
        let mut kept = Vec::new();
        for pair in flat.chunks_exact(2) {
            if let Some(order_id) = TakeValue::parse(&pair[1]).and_then(|take| take.order_id) {
                let status = self.orders().order_state(&order_id).await?.map(|state| state.status);
                kept.push((TakeId(pair[0].clone()), order_id, status));
            }
        }
        Ok((next, kept))
    }

    /// The units each customer holds in `activity`'s release, as its takes
    /// count them (pending ones included).
    pub async fn release_held(self, activity: ActivityId) -> Result<BTreeMap<i64, i64>, RedisCallError> {
        let mut conn = self.conn.clone();
        self.conn.bounded(conn.hgetall(&self.keys.release(activity).held)).await
    }

    /// How many of `activity`'s takes are pending (their order not yet
    /// known to be made): the pending set's size.
    pub async fn takes_pending(self, activity: ActivityId) -> Result<i64, RedisCallError> {
        let mut conn = self.conn.clone();
        self.conn.bounded(conn.zcard(&self.keys.release(activity).pending)).await
    }

    /// One release script, confirmed by the replicas a deduction must be
    /// (each is idempotent: asked again, it is confirmed or made again the
    /// same).
    async fn release_step<T: redis::FromRedisValue>(
        self,
        script: &Script,
        name: &'static str,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T, RedisCallError> {
        let (replicas, timeout) = self.replica_acks;
        let (answer, confirmed): (T, u32) = self.conn.script_then_wait(script, keys, args, replicas, timeout).await?;
        if confirmed < replicas {
            return Err(RedisCallError::NotConfirmed { script: name, asked: replicas, confirmed });
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_take_is_named_by_its_size_and_its_orders_nonce() {
        let order = OrderId::parse("7-9-12-00000000deadbeefk2").unwrap();
        assert_eq!(TakeId::of_order(&order).as_str(), "9:00000000deadbeef");
        assert_eq!(TakeId::new(SkuId::new(9).unwrap(), "00000000deadbeef"), TakeId::of_order(&order));
        assert_eq!(TakeId::of_order(&order).parts(), Some((9, "00000000deadbeef")));
    }
}
