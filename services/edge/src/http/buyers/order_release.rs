//! An order's take in its release (an activity whose sizes share one limit
//! per customer, `shared/src/stock/release.rs`): the customer's units taken
//! in the release before the deduction, the take kept once the order is
//! made and before its record is published, given back when the order kept
//! nothing. A sale in no release skips all three.

use super::order_outcome::{self as outcome, Placed, Taken};
use super::order_request::OrderRequest;
use crate::http::errors::BuyerError;
use crate::http::state::Buyers;
use crate::publish::PublishOutcome;
use seckill_shared::domain::{ActivityId, OrderRecord};
use seckill_shared::stock::{Take, TakeId};
use std::time::Duration;

/// How long a take may stay pending — taken, its order not yet known to be
/// made — beyond the publish deadline, before the sweep may give it back:
/// longer than an edge takes from the take to the keep (an edge slower than
/// that finds its take gone, and rolls its order back).
const PENDING_MARGIN: Duration = Duration::from_secs(20);

/// An order's take in its release.
pub(super) struct ReleaseTake {
    activity: ActivityId,
    take: TakeId,
}

/// Takes the order's units in its release, when its activity is one
/// (`nonce`: the order-to-be's): refused past the release's limit
/// (`LIMIT_REACHED` naming the release), nothing kept.
pub(super) async fn take(
    state: &Buyers,
    request: &OrderRequest,
    nonce: &str,
) -> Result<Option<ReleaseTake>, BuyerError> {
    if !state.releases.is_release(request.activity) {
        return Ok(None);
    }
    let taken = ReleaseTake { activity: request.activity, take: TakeId::new(request.sku, nonce) };
    let pending_for = state.publisher.deadline() * 2 + PENDING_MARGIN;
    let asked =
        state.stock.releases().release_take(request.activity, &taken.take, request.user, request.quantity, pending_for);
    match asked.await {
        Ok(Take::NoRelease) => Ok(None),
        Ok(Take::Taken { .. }) => Ok(Some(taken)),
        Ok(Take::LimitReached { held, limit }) => {
            Err(BuyerError::ReleaseLimitReached { held, limit, release: request.activity.get() })
        }
        Err(error) => {
            // It may have landed, its answer lost: given back (else the
            // sweep gives it back, no order being made with it).
            give(state, &taken).await;
            Err(BuyerError::try_again(anyhow::anyhow!("taking the units in the release: {error}")))
        }
    }
}

/// Keeps `taken` for `record`'s order before it is published; when the
/// take is gone (the sweep gave it back) or not confirmed, the order is
/// rolled back instead — nothing published — and the answer is what the
/// rollback leaves: 503, or 202 `UNCONFIRMED` when the order may stand
/// (never `QUEUED`: a standing order is the sweeper's, which keeps the take
/// or rolls the order back).
pub(super) async fn keep(state: &Buyers, taken: &ReleaseTake, record: &OrderRecord) -> Option<Placed> {
    let why = match state.stock.releases().release_keep(&taken.take, &record.order_id).await {
        Ok(true) => return None,
        Ok(false) => "the release's take was given back before the order could keep it".to_owned(),
        Err(error) => format!("keeping the release's take: {error}"),
    };
    tracing::warn!(order_id = %record.order_id, reason = %why, "rolling the order back");
    let deadline = state.publisher.deadline();
    Some(match outcome::published(state, record, PublishOutcome::NotPersisted(why), deadline).await {
        Ok(Taken::Queued(order_id)) => Ok(Taken::Unconfirmed(Some(order_id))),
        other => other,
    })
}

/// After the order: its take given back when it kept nothing; else it
/// stays (kept, or pending for the sweep to settle).
pub(super) async fn settle(state: &Buyers, taken: &ReleaseTake, result: &Placed) {
    if !outcome::answer_of(result).may_have_kept() {
        give(state, taken).await;
    }
}

/// Gives `taken` back; a failure is left to the sweep (a pending take) or
/// to its backstop (a kept one whose order ended).
async fn give(state: &Buyers, taken: &ReleaseTake) {
    if let Err(error) =
        state.stock.releases().release_give(taken.activity, std::slice::from_ref(&taken.take), false).await
    {
        tracing::warn!(take = taken.take.as_str(), %error, "giving a release's take back failed; the sweep will");
        metrics::counter!("seckill_edge_release_give_failed_total").increment(1);
    }
}
