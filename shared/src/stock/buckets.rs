//! Where a sale's stock buckets go: each in a slot of its own and, on a
//! Redis Cluster, spread over the primaries, so one hot sale's deductions
//! are shared by as many cores as it has buckets.

use super::keys::Bucket;
use crate::domain::SaleKey;
use crate::stock::conn::RedisCallError;
use redis::cluster_routing::Slot;
use std::collections::HashMap;

/// How far the search for a bucket on a less busy primary goes: with three
/// primaries a number lands on each about one time in three.
const CANDIDATES: u32 = 256;

impl crate::stock::BucketMoves<'_> {
    /// The buckets of a sale of `count` buckets: bucket 0 and `count - 1`
    /// more. On a Redis Cluster each next bucket goes to a primary holding
    /// the fewest of the sale's buckets so far (all primaries get one before
    /// any gets two); on one server, buckets 1, 2, …
    pub async fn place_buckets(self, sale: SaleKey, count: u32) -> Result<Vec<Bucket>, RedisCallError> {
        let Some(ranges) = self.conn.slot_primaries().await? else {
            return Ok((0..count.max(1)).map(Bucket).collect());
        };
        // The crate's slot has no number to compare with a range: a map of
        // every slot (16,384) to its primary instead.
        let serving: HashMap<Slot, &String> = ranges
            .iter()
            .flat_map(|(first, last, node)| (*first..=*last).filter_map(Slot::new).map(move |slot| (slot, node)))
            .collect();
        let primary_of = |bucket: Bucket| {
            serving.get(&Slot::for_key(&self.keys.bucket(sale, bucket).meta)).map(|node| (*node).clone())
        };
        let mut load: HashMap<String, usize> = ranges.iter().map(|(_, _, node)| (node.clone(), 0)).collect();
        let mut chosen = vec![Bucket::FIRST];
        if let Some(node) = primary_of(Bucket::FIRST) {
            *load.entry(node).or_default() += 1;
        }
        while chosen.len() < count as usize {
            let least = load.values().copied().min().unwrap_or(0);
            let candidates = (1..=CANDIDATES).map(Bucket).filter(|b| !chosen.contains(b));
            let mut best: Option<(usize, Bucket, String)> = None;
            for bucket in candidates {
                let Some(node) = primary_of(bucket) else { continue };
                let busy = load.get(&node).copied().unwrap_or(0);
                if best.as_ref().is_none_or(|(fewest, _, _)| busy < *fewest) {
                    best = Some((busy, bucket, node));
                }
                if busy == least {
                    break;
                }
            }
            let Some((_, bucket, node)) = best else {
                return Err(RedisCallError::Unexpected {
                    script: "CLUSTER SLOTS",
                    answer: "no primary serves the slots of the sale's buckets".into(),
                });
            };
            *load.entry(node).or_default() += 1;
            chosen.push(bucket);
        }
        Ok(chosen)
    }
}
