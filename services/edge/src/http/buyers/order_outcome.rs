//! What each outcome of placing an order answers: the deduction's refusals,
//! the publish's three outcomes, a rollback judged by the order it leaves,
//! and the batcher's refusals (503 where nothing was kept, 202
//! `UNCONFIRMED` where that is not known). An order taken on ([`Taken`]:
//! both 202s) is not an error; every refusal is an [`ApiError`].

use crate::error_codes::ErrorCode;
use crate::http::auth;
use crate::http::bodies::{ErrorBody, QueuedBody};
use crate::http::error::ApiError;
use crate::http::state::Buyers;
use crate::order_answers::OrderAnswer;
use crate::publish::PublishOutcome;
use axum::http::header::RETRY_AFTER;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use backon::Retryable;
use seckill_shared::domain::{FailReason, OrderId, OrderRecord, SaleKey};
use seckill_shared::ops::retry;
use seckill_shared::stock::Deduction;
use std::time::Duration;

/// An order request the edge took on: both answered 202, neither an error.
#[derive(Debug)]
pub enum Taken {
    /// Its record delivered to Kafka (or maybe delivered: the sweeper
    /// publishes it again): a promise.
    Queued(OrderId),
    /// Redis did not confirm in time whether the request kept a unit (the
    /// deduction or its undoing was not heard, or not on the replicas):
    /// neither a promise nor "nothing kept". Answered with the order's id
    /// when it is known; the buyer polls it (or the user's result).
    Unconfirmed(Option<OrderId>),
}

/// What a placed order answers: taken on, or refused.
pub type Placed = Result<Taken, ApiError>;

/// The answer of the order table ([`OrderAnswer`]) a placed order's result
/// is: the one place every error path of the route maps into. An error the
/// order route never answers counts as `INTERNAL` (it would be a bug).
pub fn answer_of(result: &Placed) -> OrderAnswer {
    let error = match result {
        Ok(Taken::Queued(_)) => return OrderAnswer::Queued,
        Ok(Taken::Unconfirmed(_)) => return OrderAnswer::Unconfirmed,
        Err(error) => error,
    };
    match error {
        ApiError::AlreadyPurchased(_) => OrderAnswer::AlreadyPurchased,
        ApiError::LimitReached { .. } | ApiError::ReleaseLimitReached { .. } => OrderAnswer::LimitReached,
        ApiError::SoldOut | ApiError::FewerLeft(_) => OrderAnswer::SoldOut,
        ApiError::SaleNotFound => OrderAnswer::SaleNotFound,
        ApiError::SaleNotActive | ApiError::NotOpenYet(_) => OrderAnswer::SaleNotActive,
        ApiError::AdmissionRequired(_) => OrderAnswer::AdmissionRequired,
        ApiError::Unauthorized(_) => OrderAnswer::Unauthorized,
        ApiError::Forbidden(_) => OrderAnswer::Forbidden,
        ApiError::RateLimited(_) => OrderAnswer::RateLimited,
        ApiError::InvalidRequest(_) => OrderAnswer::InvalidRequest,
        ApiError::PayloadTooLarge(_) => OrderAnswer::PayloadTooLarge,
        ApiError::UnsupportedMediaType(_) => OrderAnswer::UnsupportedMediaType,
        ApiError::RequestTimeout(_) => OrderAnswer::RequestTimeout,
        ApiError::MethodNotAllowed => OrderAnswer::MethodNotAllowed,
        ApiError::TryAgain(_) => OrderAnswer::TryAgain,
        ApiError::Internal(_)
        | ApiError::ChallengeFailed(_)
        | ApiError::EntriesClosed
        | ApiError::EntriesFull
        | ApiError::OrderNotFound
        | ApiError::OrderPending
        | ApiError::PaymentConflict
        | ApiError::AlreadyPaid
        | ApiError::OrderFailed(_)
        | ApiError::NotFound
        | ApiError::SaleBusy(_)
        | ApiError::Unanswered { .. } => OrderAnswer::Internal,
    }
}

impl IntoResponse for Taken {
    fn into_response(self) -> Response {
        match self {
            Self::Queued(order_id) => (StatusCode::ACCEPTED, Json(QueuedBody::new(&order_id))).into_response(),
            Self::Unconfirmed(order_id) => {
                let mut body = ErrorBody::new(
                    ErrorCode::Unconfirmed,
                    "whether this request holds a unit is not confirmed yet; poll the order (or the user's result)"
                        .into(),
                );
                body.order_id = order_id.map(|id| id.to_string());
                let status = StatusCode::from_u16(ErrorCode::Unconfirmed.status()).expect("202");
                (status, [(RETRY_AFTER, "1")], Json(body)).into_response()
            }
        }
    }
}

/// 503: nothing was kept, for `why`.
pub(super) fn nothing_kept(why: &str) -> ApiError {
    ApiError::TryAgain(anyhow::anyhow!("{why}: nothing was kept"))
}

/// What a deduction accepted: the order, its round, when, and the user's
/// place it holds.
pub(super) struct Won {
    pub(super) order_id: OrderId,
    pub(super) round: i64,
    pub(super) accepted_at: i64,
    pub(super) slot: u32,
}

/// The order a deduction accepted, or the answer its refusal gets.
pub(super) fn accepted(state: &Buyers, sale: SaleKey, deduction: Deduction) -> Result<Won, ApiError> {
    match deduction {
        Deduction::Accepted { order_id, round, accepted_at, slot, .. } => {
            Ok(Won { order_id, round, accepted_at, slot })
        }
        Deduction::SaleNotFound => Err(ApiError::SaleNotFound),
        Deduction::NotActive => Err(ApiError::SaleNotActive),
        // Its id only to a buyer who proved who they are: otherwise anyone
        // naming a user id would learn that user's order.
        Deduction::AlreadyPurchased { order_id } => {
            Err(ApiError::AlreadyPurchased(order_id.filter(|_| auth::identified(&state.users))))
        }
        // None left: the edge answers the sale's next requests itself. Some
        // left, fewer than asked: a smaller order may still be taken.
        Deduction::SoldOut { available: 0 } => {
            state.sold_out.mark(sale);
            Err(ApiError::SoldOut)
        }
        Deduction::SoldOut { available } => Err(ApiError::FewerLeft(available)),
        Deduction::LimitReached { held, limit } => Err(ApiError::LimitReached { held, limit }),
        Deduction::OverMaxPerOrder { max } => {
            Err(ApiError::InvalidRequest(format!("quantity is above this sale's maxPerOrder ({max})")))
        }
        Deduction::Voided => Err(nothing_kept("the deduction was voided")),
        Deduction::Warming => Err(nothing_kept("a warm-up is replacing the sale's round")),
        Deduction::AdmissionRequired => Err(ApiError::AdmissionRequired(
            "the sale admits through its waiting room: join it (POST /api/seckill/queue) and order with the admission token (Seckill-Admission)".into(),
        )),
        Deduction::OtherBucket => Err(nothing_kept(
            "the sale's buckets changed while the request was decided (or the lock deduction met a sale in buckets)",
        )),
    }
}

/// What the buyer hears once the publish of `record` came to `outcome`.
pub(super) async fn published(
    state: &Buyers,
    record: &OrderRecord,
    outcome: PublishOutcome,
    deadline: Duration,
) -> Placed {
    let order_id = &record.order_id;
    match outcome {
        PublishOutcome::Delivered => Ok(Taken::Queued(order_id.clone())),
        PublishOutcome::Ambiguous(why) => {
            // The record may be in the log: rolling back could sell the unit
            // twice. The order stays QUEUED and is a promise: the order
            // service writes it if the record landed; if it never did, the
            // reservation sweeper publishes it again. The client follows it
            // with GET /api/seckill/order/{id}.
            tracing::warn!(order_id = %order_id, reason = %why, "publish outcome unknown; the sweeper publishes it again if it never landed");
            metrics::counter!("seckill_edge_publish_ambiguous_total").increment(1);
            Ok(Taken::Queued(order_id.clone()))
        }
        PublishOutcome::NotPersisted(why) => {
            tracing::warn!(order_id = %order_id, reason = %why, "publish failed; rolling back");
            match roll_back(state, record, deadline).await {
                RolledBack::Undone => {
                    state.sold_out.clear(record.sale());
                    Err(ApiError::TryAgain(anyhow::anyhow!("publish failed, deduction rolled back: {why}")))
                }
                // Not undone: the order stands (past its publish deadline the
                // sweeper publishes it again; or it was written meanwhile).
                RolledBack::Stands => {
                    tracing::warn!(order_id = %order_id, "not rolled back: the order stands, published again later");
                    Ok(Taken::Queued(order_id.clone()))
                }
                RolledBack::Unknown => {
                    tracing::error!(order_id = %order_id, "whether the rollback landed is not confirmed");
                    metrics::counter!("seckill_edge_rollback_failed_total").increment(1);
                    Ok(Taken::Unconfirmed(Some(order_id.clone())))
                }
            }
        }
    }
}

/// The answer the buyer gets when the batcher did not decide: 503 where
/// nothing was kept, 202 `UNCONFIRMED` where that is not known.
pub(super) fn not_decided(error: crate::home::Undecided) -> Placed {
    match &error {
        crate::home::Undecided::Batcher(inner) => match inner.as_ref() {
            crate::batch::NotDecided::Unconfirmed(order_id) => Ok(Taken::Unconfirmed(order_id.clone())),
            _ => Err(ApiError::TryAgain(error.into())),
        },
        _ => Err(ApiError::TryAgain(error.into())),
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
async fn roll_back(state: &Buyers, record: &OrderRecord, deadline: Duration) -> RolledBack {
    let (order_id, user, held) = (&record.order_id, record.user_id, record.held());
    // What the script answered does not matter: the order read below does.
    let _ = (|| state.stock.rollback(order_id, user, held, FailReason::PublishFailed, deadline))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A placed order's result of each answer.
    fn sample(answer: OrderAnswer) -> Placed {
        let why = || anyhow::anyhow!("x");
        Err(match answer {
            OrderAnswer::Queued => {
                return Ok(Taken::Queued(seckill_shared::domain::OrderId::parse("1-2-3-ab").unwrap()))
            }
            OrderAnswer::Unconfirmed => return Ok(Taken::Unconfirmed(None)),
            OrderAnswer::AlreadyPurchased => ApiError::AlreadyPurchased(None),
            OrderAnswer::LimitReached => ApiError::LimitReached { held: 1, limit: 2 },
            OrderAnswer::SoldOut => ApiError::SoldOut,
            OrderAnswer::SaleNotFound => ApiError::SaleNotFound,
            OrderAnswer::SaleNotActive => ApiError::SaleNotActive,
            OrderAnswer::AdmissionRequired => ApiError::AdmissionRequired("x".into()),
            OrderAnswer::Unauthorized => ApiError::Unauthorized("x".into()),
            OrderAnswer::Forbidden => ApiError::Forbidden("x".into()),
            OrderAnswer::RateLimited => ApiError::RateLimited(std::time::Duration::from_secs(1)),
            OrderAnswer::InvalidRequest => ApiError::InvalidRequest("x".into()),
            OrderAnswer::PayloadTooLarge => ApiError::PayloadTooLarge(1),
            OrderAnswer::UnsupportedMediaType => ApiError::UnsupportedMediaType("x".into()),
            OrderAnswer::RequestTimeout => ApiError::RequestTimeout(std::time::Duration::from_secs(1)),
            OrderAnswer::MethodNotAllowed => ApiError::MethodNotAllowed,
            OrderAnswer::TryAgain => ApiError::TryAgain(why()),
            OrderAnswer::Internal => ApiError::Internal(why()),
        })
    }

    #[test]
    fn each_row_says_what_its_answer_does() {
        use axum::response::IntoResponse;
        for &answer in OrderAnswer::ALL {
            let row = answer.row();
            assert_eq!(answer_of(&sample(answer)), answer);
            let known = std::iter::once("QUEUED").chain(ErrorCode::ALL.iter().map(|c| c.as_str()));
            assert!(known.clone().any(|c| c == answer.code()), "{answer:?}: a contract code");
            let response = match sample(answer) {
                Ok(taken) => taken.into_response(),
                Err(error) => {
                    assert_eq!(error.code().as_str(), row.code, "{answer:?}");
                    error.into_response()
                }
            };
            assert_eq!(response.status().as_u16(), row.status, "{answer:?}");
            let kept_nothing = row.promise.starts_with("nothing was kept") || row.promise.starts_with("nothing new");
            assert_eq!(answer.may_have_kept(), !kept_nothing, "{answer:?}");
        }
    }
}
