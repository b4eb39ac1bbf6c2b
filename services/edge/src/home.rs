//! A request's deduction in its user's home bucket, and the units that
//! bucket borrows when it ran out.
//!
//! A sale warmed with several stock buckets serves each user from one of
//! them (their home: user id mod the number of buckets, in the list bucket
//! 0 keeps), so one order per user holds as within one bucket. This edge
//! keeps each sale's list for a short while; `lua/deduct.lua` refuses a
//! request sent to a bucket that is not the user's home in the round it
//! holds (a list of another round), and the list is read again at once.
//!
//! When the home bucket answers SOLD_OUT and the sale has other buckets,
//! units move to it from one that has some (`BucketMoves::borrow`: half the
//! lender's units, so buckets that drained unevenly even out) and the
//! request is decided there again. One borrowing per bucket at a time on
//! this edge: requests that waited for it ask their bucket again rather
//! than borrow once more. The sale is sold out only when no bucket had a
//! unit to lend and none is on its way, and the home bucket, asked again
//! after that, had none either (the last units may have come home between
//! a request's deduction and its borrowing).

use crate::batch::{Answer, Batcher, NotDecided};
use parking_lot::{Mutex, RwLock};
use seckill_shared::domain::SaleKey;
use seckill_shared::stock::conn::RedisCallError;
use seckill_shared::stock::{Borrowed, Bucket, DeductRequest, Deduction, Directory, Stock};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many times one request may find units still on their way between
/// buckets before it is answered 503. Finding that a borrowing brought
/// units (which others of the crowd may have taken first) is progress, not
/// a stall: the sale's units are finite, so a request that keeps losing the
/// race ends in its unit or in SOLD_OUT, within [`MOST_ROUNDS`].
const STALLS: usize = 6;

/// Most times one request is decided, whatever moved (a bound on its
/// latency when a crowd at one home races for each borrowed handful).
const MOST_ROUNDS: usize = 48;

/// How long this edge keeps a sale's list of buckets.
const LIST_KEPT: Duration = Duration::from_secs(1);

/// Lists kept before the stale ones are dropped.
const MOST_LISTS: usize = 4_096;

/// A read of the sale's buckets Redis did not answer: the deduction did
/// not run.
fn not_run(error: RedisCallError) -> Arc<NotDecided> {
    Arc::new(NotDecided::Refused(Arc::new(error)))
}

/// One borrowing at a time for a bucket, and what the last one found.
type Gate = Arc<tokio::sync::Mutex<Option<Borrowed>>>;

/// The sales' lists of buckets as this edge knows them, and the borrowings
/// under way.
pub struct Homes {
    stock: Stock,
    lists: RwLock<HashMap<SaleKey, (Instant, Arc<Directory>)>>,
    borrowing: Mutex<HashMap<(SaleKey, Bucket), Gate>>,
}

impl Homes {
    /// Homes read from `stock`.
    pub fn new(stock: Stock) -> Self {
        Self { stock, lists: RwLock::default(), borrowing: Mutex::default() }
    }

    /// Decides `request` in its user's home bucket (through `batcher`),
    /// borrowing units for it when it ran out. Answers as one bucket would,
    /// SOLD_OUT only when every bucket is empty.
    pub async fn deduct(
        &self,
        batcher: &Arc<Batcher>,
        sale: SaleKey,
        request: DeductRequest,
        publish_deadline: Duration,
    ) -> Answer {
        // Bucket 0 not heard and no list kept: bucket 0 decides (the
        // deduction asks again as it does for any sale; a sale in buckets
        // answers OTHER_BUCKET for the users it does not serve).
        let mut list = match self.list(sale, false).await {
            Ok(list) => list,
            Err(_) => Arc::new(Directory::single(0)),
        };
        let mut read_again = false;
        let mut stalls = 0;
        // Nothing left to lend was found once: the home bucket is asked
        // again before SOLD_OUT is answered (see below).
        let mut nothing_to_lend = false;
        for _ in 0..MOST_ROUNDS {
            let home = list.home(request.user);
            let answer: Answer = batcher.deduct(sale, home, request.clone(), publish_deadline).await;
            match answer? {
                // A list of another round: read it again, once.
                Deduction::OtherBucket if !read_again => {
                    (list, read_again) = (self.list(sale, true).await.map_err(not_run)?, true);
                }
                Deduction::SaleNotFound if list.buckets.len() > 1 && !read_again => {
                    (list, read_again) = (self.list(sale, true).await.map_err(not_run)?, true);
                }
                // Fewer units at home than asked: more from the others
                // (each move at least half of a lender's), then again.
                Deduction::SoldOut { available } if list.buckets.len() > 1 => {
                    match self.borrow(sale, &list, home).await.map_err(not_run)? {
                        Borrowed::Units(_) => {}
                        Borrowed::InTransit => {
                            stalls += 1;
                            if stalls == STALLS {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        Borrowed::Nothing => {
                            // Nothing to lend in the round this list names: sold
                            // out, unless the sale holds another round now, or
                            // another borrower (another edge's, or one of this
                            // edge's that finished between this request's
                            // deduction and its borrowing) moved the last units
                            // home meanwhile. Asked once more now that nothing
                            // is anywhere else, home holds every unit left.
                            let now = self.list(sale, true).await.map_err(not_run)?;
                            if now.round == list.round && nothing_to_lend {
                                return Ok(Deduction::SoldOut { available });
                            }
                            nothing_to_lend = now.round == list.round;
                            list = now;
                        }
                    }
                }
                decided => return Ok(decided),
            }
        }
        metrics::counter!("seckill_edge_borrow_gave_up_total").increment(1);
        Err(Arc::new(NotDecided::StillMoving))
    }

    /// Forgets what this edge knows of `sale`'s buckets (it was warmed up
    /// through this edge).
    pub fn forget(&self, sale: SaleKey) {
        self.lists.write().remove(&sale);
    }

    /// The sale's list: the one kept, unless it is older than
    /// [`LIST_KEPT`] or `fresh` is asked for. While bucket 0 cannot be read
    /// (its primary failing over), the one kept, however old: the other
    /// buckets go on selling, and a bucket a list of another round names
    /// refuses the request anyway.
    async fn list(&self, sale: SaleKey, fresh: bool) -> Result<Arc<Directory>, RedisCallError> {
        let kept = self.lists.read().get(&sale).cloned();
        if let Some((read_at, list)) = &kept {
            if !fresh && read_at.elapsed() < LIST_KEPT {
                return Ok(list.clone());
            }
            if !fresh {
                // Grown old: one request reads it again, the others go on
                // with it meanwhile (a burst does not read it 256 times).
                let mut lists = self.lists.write();
                match lists.get_mut(&sale) {
                    Some((read_at, list)) if read_at.elapsed() < LIST_KEPT => return Ok(list.clone()),
                    Some((read_at, _)) => *read_at = Instant::now(),
                    None => {}
                }
            }
        }
        let list = match self.stock.bucket_moves().directory(sale).await {
            Ok(list) => Arc::new(list),
            Err(error) => return kept.map(|(_, list)| list).ok_or(error),
        };
        // A sale Redis does not hold is not kept: requests naming any ids
        // must not fill this map (its deduction answers SALE_NOT_FOUND).
        if list.round != 0 {
            let mut lists = self.lists.write();
            if lists.len() >= MOST_LISTS {
                lists.retain(|_, (read_at, _)| read_at.elapsed() < LIST_KEPT);
            }
            lists.insert(sale, (Instant::now(), list.clone()));
        }
        Ok(list)
    }

    /// Units for `home` from the sale's other buckets. While another
    /// request of this edge borrows for the same bucket, this one waits for
    /// it and takes its finding: units came (`Units(0)`: ask the bucket
    /// again), units still on their way (or the borrowing failed: look
    /// again shortly), or none is left anywhere (the crowd behind a
    /// sold-out bucket is not sent round the buckets once more each).
    async fn borrow(&self, sale: SaleKey, list: &Directory, home: Bucket) -> Result<Borrowed, RedisCallError> {
        let gate = self.borrowing.lock().entry((sale, home)).or_default().clone();
        let mut turn = match gate.try_lock() {
            Ok(turn) => turn,
            Err(_) => {
                return Ok(match *gate.lock().await {
                    Some(Borrowed::Nothing) => Borrowed::Nothing,
                    Some(Borrowed::Units(_)) => Borrowed::Units(0),
                    Some(Borrowed::InTransit) | None => Borrowed::InTransit,
                });
            }
        };
        metrics::counter!("seckill_edge_borrowings_total").increment(1);
        let borrowed = self.stock.bucket_moves().borrow(sale, &list.buckets, home, list.round).await;
        if let Ok(Borrowed::Units(units)) = borrowed {
            metrics::counter!("seckill_edge_units_borrowed_total").increment(units as u64);
        }
        *turn = borrowed.as_ref().ok().copied();
        borrowed
    }
}
