//! A sale's buckets as its round lists them: every bucket's meta holds the
//! list (`buckets`, "0,5,17"), how many there are (`of`) and its own place
//! in it (`home`); the edge reads the list from bucket 0. A user's home is
//! the bucket at `user id mod of`, and `lua/deduct.lua` refuses a request
//! sent to any other bucket, so an edge reading a list of another round
//! can never give a user a second order in a second bucket.

use super::keys::Bucket;
use crate::domain::{SaleKey, UserId};
use crate::stock::conn::RedisCallError;
use redis::AsyncCommands;

/// Most buckets one sale may have.
pub const MAX_BUCKETS: u32 = 64;

/// The buckets of one round of a sale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directory {
    /// The round they hold (0: Redis holds no round of the sale).
    pub round: i64,
    /// Bucket 0 first; a sale warmed without buckets has only it.
    pub buckets: Vec<Bucket>,
}

impl Directory {
    /// A sale of one bucket (or none in Redis yet: its deduction says so).
    pub fn single(round: i64) -> Self {
        Self { round, buckets: vec![Bucket::FIRST] }
    }

    /// The bucket that keeps `user`'s order.
    pub fn home(&self, user: UserId) -> Bucket {
        self.buckets[home_index(user, self.buckets.len())]
    }

    /// The list as meta keeps it.
    pub(super) fn encode(buckets: &[Bucket]) -> String {
        buckets.iter().map(|b| b.0.to_string()).collect::<Vec<_>>().join(",")
    }

    fn parse(round: i64, list: Option<&str>) -> Self {
        let buckets: Vec<Bucket> =
            list.unwrap_or_default().split(',').filter_map(|n| n.trim().parse().ok()).map(Bucket).collect();
        if buckets.is_empty() {
            Self::single(round)
        } else {
            Self { round, buckets }
        }
    }
}

/// Where in a list of `count` buckets `user` lives (as `lua/deduct.lua`
/// computes it, digit by digit, so ids beyond 2^53 agree too).
pub fn home_index(user: UserId, count: usize) -> usize {
    (user.get().unsigned_abs() % count.max(1) as u64) as usize
}

impl crate::stock::BucketMoves<'_> {
    /// The buckets of the round Redis holds of `sale` (one, bucket 0, when
    /// it was warmed without buckets or is not in Redis).
    pub async fn directory(self, sale: SaleKey) -> Result<Directory, RedisCallError> {
        let mut conn = self.conn.clone();
        let (round, list): (Option<i64>, Option<String>) =
            self.conn.bounded(conn.hmget(&self.keys.sale(sale).meta, &["round", "buckets"])).await?;
        Ok(Directory::parse(round.unwrap_or(0), list.as_deref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_reads_back_and_every_user_has_one_home() {
        let buckets = vec![Bucket(0), Bucket(5), Bucket(17)];
        let directory = Directory::parse(3, Some(&Directory::encode(&buckets)));
        assert_eq!(directory, Directory { round: 3, buckets: buckets.clone() });
        for (user, home) in [(1, 5), (2, 17), (3, 0), (9_007_199_254_740_993, 0)] {
            assert_eq!(directory.home(UserId::new(user).unwrap()), Bucket(home), "user {user}");
        }
        assert_eq!(Directory::parse(2, None), Directory::single(2));
        assert_eq!(Directory::parse(2, Some("")).buckets, vec![Bucket::FIRST]);
    }
}
