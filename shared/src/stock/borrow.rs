//! Units for a bucket that ran out, from the sale's other buckets: the path
//! a request takes when its user's home bucket answers SOLD_OUT and the sale
//! has more buckets. Each user's order lives in their home bucket (its
//! buyers hash is the one that keeps one order per user), so units move to
//! the buyer's bucket, never the buyer to another: no script ever spans two
//! slots, and one order per user holds exactly as with one bucket.

use super::keys::Bucket;
use super::lend::{Finished, Lent};
use super::values::Transfer;
use crate::domain::SaleKey;
use crate::stock::conn::RedisCallError;

/// What borrowing for an empty bucket came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Borrowed {
    /// The home bucket received these units: deduct there again.
    Units(i64),
    /// No bucket had a unit to spare, but units are on their way from one
    /// bucket to another: ask again in a moment, not sold out yet.
    InTransit,
    /// No bucket of the round has a unit, none is on its way: sold out.
    Nothing,
}

impl crate::stock::BucketMoves<'_> {
    /// Moves units to `home` from the first of the sale's other `buckets`
    /// (in their order after `home`, wrapping) that has any: half its units,
    /// rounded up, so buckets that drained unevenly even out. Answers the
    /// units `home` received ([`Borrowed::Units`]); that units are on their
    /// way between other buckets ([`Borrowed::InTransit`]); or that no other
    /// bucket had one ([`Borrowed::Nothing`]: sold out, as far as this round
    /// goes, also when `home` holds another round now).
    ///
    /// An answer not heard is asked again with the same transfer (both
    /// scripts answer a repeat without moving anything twice), and each step
    /// is on the replicas before the next is built on it
    /// ([`BucketMoves::finish_transfer`](crate::stock::BucketMoves::finish_transfer)); a caller that gives up leaves the
    /// transfer in the lender's log, complete or not, for
    /// [`BucketMoves::transfers_lent`](crate::stock::BucketMoves::transfers_lent) to finish.
    ///
    /// A pass that found nothing may have missed units moving between two
    /// other buckets while it asked them (a unit hopping into a bucket
    /// already asked). So "nothing" is answered only by a second pass
    /// during which no bucket's `lent` or `borrowed` counter moved — every
    /// transfer changes both — else the pass is made again (three times at
    /// most; after that [`Borrowed::InTransit`]).
    pub async fn borrow(
        self,
        sale: SaleKey,
        buckets: &[Bucket],
        home: Bucket,
        round: i64,
    ) -> Result<Borrowed, RedisCallError> {
        let found = self.borrow_pass(sale, buckets, home, round).await?;
        if found != Borrowed::Nothing {
            return Ok(found);
        }
        for _ in 0..PASSES {
            let before = self.moves(sale, buckets).await?;
            let found = self.borrow_pass(sale, buckets, home, round).await?;
            if found != Borrowed::Nothing {
                return Ok(found);
            }
            if self.moves(sale, buckets).await? == before {
                return Ok(Borrowed::Nothing);
            }
        }
        Ok(Borrowed::InTransit)
    }

    /// Every bucket's `lent` and `borrowed` counters, all at once.
    async fn moves(self, sale: SaleKey, buckets: &[Bucket]) -> Result<Vec<(i64, i64)>, RedisCallError> {
        futures::future::try_join_all(buckets.iter().map(|bucket| {
            let mut conn = self.conn.clone();
            let meta = self.keys.bucket(sale, *bucket).meta;
            async move {
                let (lent, borrowed): (Option<i64>, Option<i64>) =
                    self.conn.bounded(redis::AsyncCommands::hmget(&mut conn, meta, &["lent", "borrowed"])).await?;
                Ok((lent.unwrap_or(0), borrowed.unwrap_or(0)))
            }
        }))
        .await
    }

    /// One pass over the other buckets, as [`BucketMoves::borrow`](crate::stock::BucketMoves::borrow) describes.
    async fn borrow_pass(
        self,
        sale: SaleKey,
        buckets: &[Bucket],
        home: Bucket,
        round: i64,
    ) -> Result<Borrowed, RedisCallError> {
        let at = buckets.iter().position(|b| *b == home).unwrap_or(0);
        let donors = buckets.iter().cycle().skip(at + 1).take(buckets.len().saturating_sub(1));
        let mut in_transit = false;
        for donor in donors.filter(|d| **d != home) {
            let transfer = Transfer::new(*donor, home, round);
            let units = match self.asked_again(|| self.lend(sale, &transfer)).await? {
                Lent::Units(units) => units,
                Lent::InTransit => {
                    in_transit = true;
                    continue;
                }
                Lent::Nothing | Lent::OtherRound => continue,
            };
            return Ok(match self.finish_transfer(sale, &transfer, units).await? {
                Finished::Arrived(_) => Borrowed::Units(units),
                // Lent in a round the home bucket no longer holds: back to
                // the lender (or gone with the lender's round).
                Finished::GivenBack(_) => Borrowed::Nothing,
                // A step not on the replicas yet: not built on; the move
                // stays logged and is finished later (by this request's
                // next look, or the sweeper).
                Finished::Pending => Borrowed::InTransit,
            });
        }
        // Units the home bucket itself lent may still be on their way out.
        in_transit = in_transit || !self.transfers_lent(sale, home).await?.is_empty();
        Ok(if in_transit { Borrowed::InTransit } else { Borrowed::Nothing })
    }
}

/// How many passes after a first one found nothing, before units still
/// moving are answered [`Borrowed::InTransit`].
const PASSES: u32 = 3;
