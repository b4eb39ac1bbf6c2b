//! The releases' sweep: a take still pending past its time — its customer's
//! units taken in a release, its order not known to be made (the edge died
//! between the take and the deduction, or between the deduction and the
//! keep) — is settled: kept for its order when the size's sale holds one
//! made with it, else given back. The keep and the give decide in the
//! release's slot against the edge's own keep, whichever comes first (a
//! take kept meanwhile stays). Within the take's time (the publish
//! deadline twice plus 20 s at the edge) and one sweep interval, a take
//! whose order never came counts for nothing again.

use seckill_shared::stock::Stock;

/// What one sweep of the releases did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseSweep {
    /// Pending takes kept for the order found made with them.
    pub kept: usize,
    /// Pending takes given back (no order made with them).
    pub given_back: usize,
}

/// Settles up to `batch` stale takes of every release.
pub async fn sweep_releases(stock: &Stock, batch: usize) -> anyhow::Result<ReleaseSweep> {
    let mut done = ReleaseSweep::default();
    for activity in stock.releases().await? {
        for (take, value) in stock.stale_takes(activity, batch as isize).await? {
            match stock.order_of_take(activity, &take, value.user).await? {
                Some(order_id) => {
                    if stock.release_keep(&take, &order_id).await? {
                        done.kept += 1;
                    }
                }
                None => {
                    if stock.release_give(activity, std::slice::from_ref(&take), true).await? > 0 {
                        tracing::warn!(%activity, take = take.as_str(), "a release's take whose order never came is given back");
                        done.given_back += 1;
                    }
                }
            }
        }
    }
    metrics::counter!("seckill_release_takes_given_back_total").increment(done.given_back as u64);
    Ok(done)
}
