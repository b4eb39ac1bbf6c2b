//! The releases' sweep: a take still pending past its time — its customer's
//! units taken in a release, its order not known to be made (the edge died
//! between the take and the deduction, or between the deduction and the
//! keep) — is settled: kept for its order when the size's sale holds one
//! made with it, else given back. The keep and the give decide in the
//! release's slot against the edge's own keep, whichever comes first (a
//! take kept meanwhile stays). Within the take's time (the publish
//! deadline twice plus 20 s at the edge) and one sweep interval, a take
//! whose order never came counts for nothing again.
//!
//! And a backstop for the ways back: a page of each release's kept takes
//! per sweep (the whole release within a few sweeps, from where the last
//! page stopped) is read beside their orders, and a take whose order Redis
//! holds FAILED or CANCELLED — its units back in its sale, its take not
//! (an edge's rollback it could not confirm, a give that failed) — is given
//! back.

use parking_lot::Mutex;
use seckill_shared::domain::{ActivityId, OrderStatus};
use seckill_shared::stock::Stock;
use std::collections::BTreeMap;

/// Where each release's pages of kept takes stopped.
#[derive(Default)]
pub struct Cursors(Mutex<BTreeMap<ActivityId, u64>>);

/// What one sweep of the releases did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseSweep {
    /// Pending takes kept for the order found made with them.
    pub kept: usize,
    /// Pending takes given back (no order made with them).
    pub given_back: usize,
    /// Kept takes given back (their orders ended without giving them).
    pub ended: usize,
}

/// Settles up to `batch` stale takes of every release, and reads a page of
/// its kept takes from where `cursors` says.
pub async fn sweep_releases(stock: &Stock, batch: usize, cursors: &Cursors) -> anyhow::Result<ReleaseSweep> {
    let mut done = ReleaseSweep::default();
    for activity in stock.releases().declared().await? {
        done.ended += kept_page(stock, activity, batch, cursors).await?;
        for (take, value) in stock.releases().stale_takes(activity, batch as isize).await? {
            match stock.releases().order_of_take(activity, &take, value.user).await? {
                Some(order_id) => {
                    if stock.releases().release_keep(&take, &order_id).await? {
                        done.kept += 1;
                    }
                }
                None => {
                    if stock.releases().release_give(activity, std::slice::from_ref(&take), true).await? > 0 {
                        tracing::warn!(%activity, take = take.as_str(), "a release's take whose order never came is given back");
                        done.given_back += 1;
                    }
                }
            }
        }
    }
    metrics::counter!("seckill_release_takes_given_back_total").increment((done.given_back + done.ended) as u64);
    Ok(done)
}

/// One page of `activity`'s kept takes: those whose order ended FAILED or
/// CANCELLED given back. How many were.
async fn kept_page(stock: &Stock, activity: ActivityId, batch: usize, cursors: &Cursors) -> anyhow::Result<usize> {
    let cursor = cursors.0.lock().get(&activity).copied().unwrap_or(0);
    let (next, kept) = stock.releases().kept_takes_page(activity, cursor, batch).await?;
    cursors.0.lock().insert(activity, next);
    let ended: Vec<_> = kept
        .into_iter()
        .filter(|(_, _, status)| matches!(status, Some(OrderStatus::Failed | OrderStatus::Cancelled)))
        .map(|(take, _, _)| take)
        .collect();
    if ended.is_empty() {
        return Ok(0);
    }
    tracing::warn!(%activity, takes = ended.len(), "kept takes whose orders ended are given back");
    stock.releases().release_give(activity, &ended, false).await?;
    Ok(ended.len())
}
