//! What each outcome of placing an order answers: the deduction's refusals,
//! the publish's three outcomes, a rollback judged by the order it leaves,
//! and the batcher's refusals (503 where nothing was kept, 202
//! `UNCONFIRMED` where that is not known).

use crate::http::bodies::QueuedBody;
use crate::http::{auth, ApiError, AppState};
use crate::publish::PublishOutcome;
use axum::http::StatusCode;
use axum::Json;
use backon::Retryable;
use seckill_shared::domain::{FailReason, OrderId, OrderRecord, SaleKey, UserId};
use seckill_shared::ops::retry;
use seckill_shared::stock::Deduction;
use std::time::Duration;

/// The order a deduction accepted (its id, round and time), or the answer
/// its refusal gets.
pub(super) fn accepted(
    state: &AppState,
    sale: SaleKey,
    deduction: Option<Deduction>,
) -> Result<(OrderId, i64, i64), ApiError> {
    let nothing_kept = |why: &str| ApiError::TryAgain(anyhow::anyhow!("{why}: nothing was kept"));
    match deduction {
        None => Err(nothing_kept("the sale's lock was not had within its wait")),
        Some(Deduction::Accepted { order_id, round, accepted_at, .. }) => Ok((order_id, round, accepted_at)),
        Some(Deduction::SaleNotFound) => Err(ApiError::SaleNotFound),
        Some(Deduction::NotActive) => Err(ApiError::SaleNotActive),
        // Its id only to a buyer who proved who they are: otherwise anyone
        // naming a user id would learn that user's order.
        Some(Deduction::AlreadyPurchased { order_id }) => {
            Err(ApiError::AlreadyPurchased(order_id.filter(|_| auth::identified(state))))
        }
        Some(Deduction::SoldOut) => {
            state.sold_out.mark(sale);
            Err(ApiError::SoldOut)
        }
        Some(Deduction::Voided) => Err(nothing_kept("the deduction was voided")),
        Some(Deduction::Warming) => Err(nothing_kept("a warm-up is replacing the sale's round")),
        Some(Deduction::AdmissionRequired) => Err(ApiError::AdmissionRequired(
            "the sale admits through its waiting room: join it (POST /api/seckill/queue) and order with the admission token (Seckill-Admission)".into(),
        )),
        Some(Deduction::OtherBucket) => Err(nothing_kept(
            "the sale's buckets changed while the request was decided (or the lock deduction met a sale in buckets)",
        )),
    }
}

/// What the buyer hears once the publish of `record` came to `outcome`.
pub(super) async fn published(
    state: &AppState,
    record: &OrderRecord,
    outcome: PublishOutcome,
    deadline: Duration,
) -> Result<(StatusCode, Json<QueuedBody>), ApiError> {
    let order_id = &record.order_id;
    match outcome {
        PublishOutcome::Delivered => Ok(queued(order_id)),
        PublishOutcome::Ambiguous(why) => {
            // The record may be in the log: rolling back could sell the unit
            // twice. The order stays QUEUED and is a promise: the order
            // service writes it if the record landed; if it never did, the
            // reservation sweeper publishes it again. The client follows it
            // with GET /api/seckill/order/{id}.
            tracing::warn!(order_id = %order_id, reason = %why, "publish outcome unknown; the sweeper publishes it again if it never landed");
            metrics::counter!("seckill_edge_publish_ambiguous_total").increment(1);
            Ok(queued(order_id))
        }
        PublishOutcome::NotPersisted(why) => {
            tracing::warn!(order_id = %order_id, reason = %why, "publish failed; rolling back");
            match roll_back(state, order_id, record.user_id, deadline).await {
                RolledBack::Undone => {
                    state.sold_out.clear(record.sale());
                    Err(ApiError::TryAgain(anyhow::anyhow!("publish failed, deduction rolled back: {why}")))
                }
                // Not undone: the order stands (past its publish deadline the
                // sweeper publishes it again; or it was written meanwhile).
                RolledBack::Stands => {
                    tracing::warn!(order_id = %order_id, "not rolled back: the order stands, published again later");
                    Ok(queued(order_id))
                }
                RolledBack::Unknown => {
                    tracing::error!(order_id = %order_id, "whether the rollback landed is not confirmed");
                    metrics::counter!("seckill_edge_rollback_failed_total").increment(1);
                    Err(ApiError::Unconfirmed(Some(order_id.to_string())))
                }
            }
        }
    }
}

/// The answer the buyer gets when the batcher did not decide: 503 where
/// nothing was kept, 202 `UNCONFIRMED` where that is not known.
pub(super) fn not_decided(error: crate::home::Undecided) -> ApiError {
    match &error {
        crate::home::Undecided::Batcher(inner) => match inner.as_ref() {
            crate::batch::NotDecided::Unconfirmed(order_id) => {
                ApiError::Unconfirmed(order_id.as_ref().map(ToString::to_string))
            }
            _ => ApiError::TryAgain(error.into()),
        },
        _ => ApiError::TryAgain(error.into()),
    }
}

/// What a rollback of a definitely unpublished deduction came to.
enum RolledBack {
    /// The unit is back and the order FAILED, on the replicas.
    Undone,
    /// The order stands: QUEUED past its publish deadline (the sweeper's),
    /// or written since.
    Stands,
    /// Not known: Redis did not answer, or the undoing is not on the
    /// replicas yet.
    Unknown,
}

/// Rolls a definitely unpublished deduction back, trying a few times (the
/// script is idempotent: it undoes only an order still QUEUED and before
/// its publish deadline), then reads what the order is — as the replicas
/// have it — and answers by that, not by what the script said: a rollback
/// that did nothing (the order was written, or its deadline passed) leaves
/// an order that stands.
async fn roll_back(state: &AppState, order_id: &OrderId, user: UserId, deadline: Duration) -> RolledBack {
    // What the script answered does not matter: the order read below does.
    let _ = (|| state.stock.rollback(order_id, user, FailReason::PublishFailed, deadline))
        .retry(retry::times(std::time::Duration::from_millis(100), 2))
        .notify(|error, _| tracing::warn!(order_id = %order_id, %error, "rollback failed; again"))
        .await;
    use seckill_shared::domain::OrderStatus;
    use seckill_shared::stock::Confirmation;
    match state.stock.order_confirmed(order_id).await {
        Ok(Confirmation::Confirmed(order)) if order.status == OrderStatus::Failed => RolledBack::Undone,
        Ok(Confirmation::Confirmed(_)) => RolledBack::Stands,
        Ok(Confirmation::Unconfirmed(order)) if order.status != OrderStatus::Failed => RolledBack::Stands,
        Ok(_) => RolledBack::Unknown,
        Err(error) => {
            tracing::warn!(order_id = %order_id, %error, "reading the order after its rollback failed");
            RolledBack::Unknown
        }
    }
}

pub(super) fn queued(order_id: &OrderId) -> (StatusCode, Json<QueuedBody>) {
    (StatusCode::ACCEPTED, Json(QueuedBody::new(order_id)))
}
