//! A sale's whole Redis state as the reconciliation and the sweeper read
//! it: counters, and which of a list of orders Redis accepted or settled.

use super::keys::Bucket;
use crate::domain::SaleKey;
use crate::stock::conn::RedisCallError;
use redis::AsyncCommands;

/// A sale's Redis state.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SaleSnapshot {
    /// Whether the sale exists in Redis at all.
    pub exists: bool,
    pub round: i64,
    /// Units warmed up.
    pub total: i64,
    pub remaining: i64,
    /// Users holding an order.
    pub buyers: i64,
    /// Accepted orders not yet seen by the order service.
    pub reservations: i64,
    /// Orders accepted and not yet settled either way.
    pub queued: i64,
    /// The units those orders hold.
    pub queued_units: i64,
    /// Units one user may hold in the round.
    pub per_user_limit: i64,
    /// Units one order may hold.
    pub max_per_order: i64,
    /// Orders Redis knows as CREATED.
    pub created: i64,
    /// Orders Redis knows as FAILED.
    pub failed: i64,
    /// Units restored by the compensator or sweeper.
    pub compensated: i64,
    /// Units written off (the database never had them).
    pub written_off: i64,
    /// Orders Redis knows as CANCELLED.
    pub cancelled: i64,
    /// Units cancelled orders gave back.
    pub returned: i64,
    /// Units lent by one bucket and not yet received by another (counted in
    /// `remaining`: they are the sale's, unsold).
    pub in_transit: i64,
    /// Each bucket of a sale warmed with several (none listed for one).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<BucketState>,
}

/// One bucket of a sale's round.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BucketState {
    /// Its number (0: the sale's own keys).
    pub bucket: u32,
    /// Units it was warmed with.
    pub total: i64,
    /// Units it holds now.
    pub remaining: i64,
    /// Users whose order it keeps (its buyers are the users it serves).
    pub buyers: i64,
    /// Its orders accepted and not yet settled.
    pub queued: i64,
    /// Units it gave other buckets, and took from them.
    pub lent: i64,
    pub borrowed: i64,
}

impl crate::stock::Books<'_> {
    /// Reads everything the reconciliation needs of one sale: one round trip
    /// of constant-time reads, whatever the number of orders (the status
    /// counts are counters the scripts keep, not a scan of the orders).
    /// A sale in buckets reads each (one round trip each, all at once) and
    /// sums them, listing each in `buckets`.
    pub async fn snapshot(self, sale: SaleKey) -> Result<SaleSnapshot, RedisCallError> {
        let directory = self.bucket_moves().directory(sale).await?;
        if directory.buckets.len() == 1 {
            return self.snapshot_bucket(sale, directory.buckets[0]).await.map(|(whole, _)| whole);
        }
        let each =
            futures::future::try_join_all(directory.buckets.iter().map(|b| self.snapshot_bucket(sale, *b))).await?;
        let mut sum =
            SaleSnapshot { exists: each.iter().any(|(s, _)| s.exists), round: each[0].0.round, ..Default::default() };
        for (part, bucket) in each {
            sum.total += part.total;
            sum.remaining += part.remaining;
            sum.buyers += part.buyers;
            sum.reservations += part.reservations;
            sum.queued += part.queued;
            sum.queued_units += part.queued_units;
            sum.per_user_limit = part.per_user_limit;
            sum.max_per_order = part.max_per_order;
            sum.created += part.created;
            sum.failed += part.failed;
            sum.compensated += part.compensated;
            sum.written_off += part.written_off;
            sum.cancelled += part.cancelled;
            sum.returned += part.returned;
            sum.in_transit += bucket.lent - bucket.borrowed;
            sum.buckets.push(bucket);
        }
        sum.remaining += sum.in_transit;
        Ok(sum)
    }

    /// The same reads of one bucket of a sale, and the bucket's own line.
    pub async fn snapshot_bucket(
        self,
        sale: SaleKey,
        bucket: Bucket,
    ) -> Result<(SaleSnapshot, BucketState), RedisCallError> {
        let k = self.keys.bucket(sale, bucket);
        let mut pipe = redis::pipe();
        let fields = [
            "total",
            "round",
            "queued",
            "created",
            "failed",
            "cancelled",
            "lent",
            "borrowed",
            "queued_extra",
            "limit",
            "max",
        ];
        pipe.hmget(&k.meta, &fields)
            .get(&k.stock)
            .hlen(&k.buyers)
            .zcard(&k.reserved)
            .scard(&k.compensated)
            .scard(&k.written_off)
            .scard(&k.returned);
        type Reads = (Vec<Option<i64>>, Option<i64>, i64, i64, i64, i64, i64);
        let (meta, stock, buyers, reservations, compensated, written_off, returned): Reads =
            self.conn.pipe(&pipe).await?.unwrap_or_default();
        let field = |i: usize| meta.get(i).copied().flatten();
        let state = BucketState {
            bucket: bucket.0,
            total: field(0).unwrap_or(0),
            remaining: stock.unwrap_or(0),
            buyers,
            queued: field(2).unwrap_or(0),
            lent: field(6).unwrap_or(0),
            borrowed: field(7).unwrap_or(0),
        };
        let whole = SaleSnapshot {
            exists: field(1).is_some(),
            total: field(0).unwrap_or(0),
            round: field(1).unwrap_or(0),
            queued: field(2).unwrap_or(0),
            queued_units: field(2).unwrap_or(0) + field(8).unwrap_or(0),
            per_user_limit: field(9).unwrap_or(1),
            max_per_order: field(10).unwrap_or(1),
            created: field(3).unwrap_or(0),
            failed: field(4).unwrap_or(0),
            remaining: stock.unwrap_or(0),
            buyers,
            reservations,
            compensated,
            written_off,
            cancelled: field(5).unwrap_or(0),
            returned,
            in_transit: 0,
            buckets: Vec::new(),
        };
        Ok((whole, state))
    }

    /// Every sale whose round Redis still holds (the sweeper, the audit and
    /// the dashboard go through these). A sale whose keys expired (its end,
    /// payment window and margin passed, or it was closed) is forgotten
    /// here: removed from the registry.
    pub async fn sales(self) -> Result<Vec<SaleKey>, RedisCallError> {
        let mut conn = self.conn.clone();
        let members: Vec<String> = self.conn.bounded(conn.smembers(self.keys.registry())).await?;
        let sales: Vec<(&String, SaleKey)> = members.iter().filter_map(|m| Some((m, sale_of_member(m)?))).collect();
        // One EXISTS per sale, all at once: on a cluster each sale's meta may
        // live on another primary, and a pipeline must keep to one slot. A
        // sale whose primary does not answer is kept (and fails on its own
        // where it is used): one failing shard hides no other sale.
        let alive: Vec<bool> = futures::future::join_all(sales.iter().map(|(_, sale)| {
            let mut conn = self.conn.clone();
            let meta = self.keys.sale(*sale).meta;
            async move {
                self.conn.bounded(conn.exists::<_, bool>(meta)).await.unwrap_or_else(|error| {
                    tracing::warn!(%sale, %error, "whether a sale's keys still exist is not known; kept");
                    true
                })
            }
        }))
        .await;
        let gone: Vec<&String> =
            sales.iter().zip(&alive).filter(|(_, alive)| !**alive).map(|((member, _), _)| *member).collect();
        if !gone.is_empty() {
            let mut forget = redis::pipe();
            forget.srem(self.keys.registry(), gone).ignore();
            self.conn.pipe::<()>(&forget).await?;
        }
        Ok(sales.into_iter().zip(alive).filter(|(_, alive)| *alive).map(|((_, sale), _)| sale).collect())
    }

    /// How many of `ids` Redis has a status for (orders Redis accepted), each
    /// asked of the bucket its id names.
    pub async fn count_known_orders(self, sale: SaleKey, ids: &[String]) -> Result<i64, RedisCallError> {
        let mut count = 0;
        for (bucket, ids) in ids_by_bucket(ids) {
            let key = self.keys.bucket(sale, bucket).orders;
            count += self
                .count_in_chunks(&ids, 1, |pipe, id| {
                    pipe.hexists(&key, id);
                })
                .await?;
        }
        Ok(count)
    }

    /// How many of `ids` were settled: their unit restored or written off
    /// (in the bucket each id names).
    pub async fn count_settled(self, sale: SaleKey, ids: &[String]) -> Result<i64, RedisCallError> {
        let mut count = 0;
        for (bucket, ids) in ids_by_bucket(ids) {
            let k = self.keys.bucket(sale, bucket);
            count += self
                .count_in_chunks(&ids, 2, |pipe, id| {
                    pipe.sismember(&k.compensated, id).sismember(&k.written_off, id);
                })
                .await?;
        }
        Ok(count)
    }

    /// Asks `per_id` questions of each id, a thousand ids per round trip, and
    /// counts the ids with at least one yes.
    async fn count_in_chunks(
        self,
        ids: &[&str],
        per_id: usize,
        ask: impl Fn(&mut redis::Pipeline, &str),
    ) -> Result<i64, RedisCallError> {
        let mut count = 0;
        for chunk in ids.chunks(1000) {
            let mut pipe = redis::pipe();
            for id in chunk {
                ask(&mut pipe, id);
            }
            let answers: Vec<bool> = self.conn.pipe(&pipe).await?.unwrap_or_default();
            count += answers.chunks(per_id).filter(|yes| yes.iter().any(|y| *y)).count() as i64;
        }
        Ok(count)
    }
}

/// Order ids by the bucket each names (one that does not parse: bucket 0,
/// where it is not found either).
fn ids_by_bucket(ids: &[String]) -> std::collections::BTreeMap<Bucket, Vec<&str>> {
    let mut grouped: std::collections::BTreeMap<Bucket, Vec<&str>> = Default::default();
    for id in ids {
        let bucket = crate::domain::OrderId::parse(id).map_or(Bucket::FIRST, |id| Bucket::of_order(&id));
        grouped.entry(bucket).or_default().push(id);
    }
    grouped
}

/// The reservation sweeper's last sweep, as it recorded it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SweepMark {
    /// When it ended (ms since the epoch, the sweeper's clock).
    pub at_ms: i64,
    /// Lost publishes it published again.
    #[serde(default)]
    pub republished: u64,
    /// Reservations whose order PostgreSQL had failed.
    pub failed: u64,
    /// Reservations whose order turned out CREATED.
    pub created: u64,
    /// The lock holder that swept.
    pub holder: String,
}

impl crate::stock::Books<'_> {
    /// Records the sweeper's last sweep (kept a day).
    pub async fn record_sweep(self, mark: &SweepMark) -> Result<(), RedisCallError> {
        let mut conn = self.conn.clone();
        let value = serde_json::to_string(mark).expect("a sweep mark serializes");
        self.conn.bounded(conn.set_ex::<_, _, ()>(self.keys.sweeper_last(), value, 24 * 3600)).await
    }

    /// The sweeper's last sweep, if one was recorded.
    pub async fn last_sweep(self) -> Result<Option<SweepMark>, RedisCallError> {
        let mut conn = self.conn.clone();
        let value: Option<String> = self.conn.bounded(conn.get(self.keys.sweeper_last())).await?;
        Ok(value.and_then(|v| serde_json::from_str(&v).ok()))
    }
}

/// The sale a registry's member (`A:S`) names.
pub(super) fn sale_of_member(member: &str) -> Option<SaleKey> {
    let (a, s) = member.split_once(':')?;
    SaleKey::from_raw(a.parse().ok()?, s.parse().ok()?).ok()
}
