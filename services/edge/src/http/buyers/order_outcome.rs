//! What each outcome of placing an order answers: the deduction's refusals,
//! the publish's three outcomes, a rollback judged by the order it leaves,
//! and the batcher's refusals (503 where nothing was kept, 202
//! `UNCONFIRMED` where that is not known). An order taken on ([`Taken`]:
//! both 202s) is not an error; every refusal is a [`BuyerError`].

use crate::batch::NotDecided;
use crate::error_codes::ErrorCode;
use crate::http::auth;
use crate::http::bodies::{ErrorBody, QueuedBody};
use crate::http::errors::{BuyerError, RequestError};
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
use std::sync::Arc;
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
pub type Placed = Result<Taken, BuyerError>;

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
        BuyerError::Request(error) => match error {
            RequestError::Unauthorized(_) => OrderAnswer::Unauthorized,
            RequestError::Forbidden(_) => OrderAnswer::Forbidden,
            RequestError::RateLimited(_) => OrderAnswer::RateLimited,
            RequestError::InvalidRequest(_) => OrderAnswer::InvalidRequest,
            RequestError::PayloadTooLarge(_) => OrderAnswer::PayloadTooLarge,
            RequestError::UnsupportedMediaType(_) => OrderAnswer::UnsupportedMediaType,
            RequestError::RequestTimeout(_) => OrderAnswer::RequestTimeout,
            RequestError::MethodNotAllowed => OrderAnswer::MethodNotAllowed,
            RequestError::TryAgain(_) => OrderAnswer::TryAgain,
            RequestError::Internal(_) | RequestError::NotFound => OrderAnswer::Internal,
        },
        BuyerError::AlreadyPurchased(_) => OrderAnswer::AlreadyPurchased,
        BuyerError::LimitReached { .. } | BuyerError::ReleaseLimitReached { .. } => OrderAnswer::LimitReached,
        BuyerError::SoldOut | BuyerError::FewerLeft(_) => OrderAnswer::SoldOut,
        BuyerError::SaleNotFound => OrderAnswer::SaleNotFound,
        BuyerError::SaleNotActive | BuyerError::NotOpenYet(_) => OrderAnswer::SaleNotActive,
        BuyerError::AdmissionRequired(_) => OrderAnswer::AdmissionRequired,
        BuyerError::ChallengeFailed(_)
        | BuyerError::EntriesClosed
        | BuyerError::EntriesFull
        | BuyerError::OrderNotFound
        | BuyerError::Payment(_) => OrderAnswer::Internal,
    }
}

impl IntoResponse for Taken {
    fn into_response(self) -> Response {
        match self {
            Self::Queued(order_id) => {
                (status_of(OrderAnswer::Queued), Json(QueuedBody::new(&order_id))).into_response()
            }
            Self::Unconfirmed(order_id) => {
                let mut body = ErrorBody::new(
                    ErrorCode::Unconfirmed,
                    "whether this request holds a unit is not confirmed yet; poll the order (or the user's result)"
                        .into(),
                );
                body.order_id = order_id.map(|id| id.to_string());
                (status_of(OrderAnswer::Unconfirmed), [(RETRY_AFTER, "1")], Json(body)).into_response()
            }
        }
    }
}

/// The status the order table writes for `answer`.
fn status_of(answer: OrderAnswer) -> StatusCode {
    StatusCode::from_u16(answer.row().status).expect("every row's status is a valid one")
}

/// 503: nothing was kept, for `why`.
pub(super) fn nothing_kept(why: &str) -> BuyerError {
    BuyerError::try_again(anyhow::anyhow!("{why}: nothing was kept"))
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
pub(super) fn accepted(state: &Buyers, sale: SaleKey, deduction: Deduction) -> Result<Won, BuyerError> {
    match deduction {
        Deduction::Accepted { order_id, round, accepted_at, slot, .. } => {
            Ok(Won { order_id, round, accepted_at, slot })
        }
        Deduction::SaleNotFound => Err(BuyerError::SaleNotFound),
        Deduction::NotActive => Err(BuyerError::SaleNotActive),
        // Its id only to a buyer who proved who they are: otherwise anyone
        // naming a user id would learn that user's order.
        Deduction::AlreadyPurchased { order_id } => {
            Err(BuyerError::AlreadyPurchased(order_id.filter(|_| auth::identified(&state.users))))
        }
        // None left: the edge answers the sale's next requests itself. Some
        // left, fewer than asked: a smaller order may still be taken.
        Deduction::SoldOut { available: 0 } => {
            state.sold_out.mark(sale);
            Err(BuyerError::SoldOut)
        }
        Deduction::SoldOut { available } => Err(BuyerError::FewerLeft(available)),
        Deduction::LimitReached { held, limit } => Err(BuyerError::LimitReached { held, limit }),
        Deduction::OverMaxPerOrder { max } => {
            Err(BuyerError::invalid(format!("quantity is above this sale's maxPerOrder ({max})")))
        }
        Deduction::Voided => Err(nothing_kept("the deduction was voided")),
        Deduction::Warming => Err(nothing_kept("a warm-up is replacing the sale's round")),
        Deduction::AdmissionRequired => Err(BuyerError::AdmissionRequired(
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
            roll_back(state, record, deadline, &why).await
        }
    }
}

/// The answer the buyer gets when the batcher did not decide: 503 where
/// nothing was kept, 202 `UNCONFIRMED` where that is not known.
pub(super) fn not_decided(error: Arc<NotDecided>) -> Placed {
    match error.as_ref() {
        NotDecided::Unconfirmed(order_id) => Ok(Taken::Unconfirmed(order_id.clone())),
        NotDecided::QueueFull
        | NotDecided::Refused(_)
        | NotDecided::NotReplicated
        | NotDecided::Voided
        | NotDecided::StillMoving => Err(BuyerError::try_again(anyhow::anyhow!("{error}"))),
    }
}

/// Rolls a definitely unpublished deduction back (`why`: its publish's
/// failure), trying a few times (the script is idempotent: it undoes only
/// an order still QUEUED and before its publish deadline), then reads what
/// the order is — as the replicas have it — and answers by that, not by
/// what the script said: the unit back and the order FAILED is 503; an
/// order that stands (QUEUED past its publish deadline, which the sweeper
/// publishes again, or written since) is a promise; not known (Redis did
/// not answer, or the undoing is not on the replicas yet) is 202
/// `UNCONFIRMED`.
async fn roll_back(state: &Buyers, record: &OrderRecord, deadline: Duration, why: &str) -> Placed {
    let (order_id, user, held) = (&record.order_id, record.user_id, record.held());
    // What the script answered does not matter: the order read below does.
    let _ = (|| state.stock.orders().rollback(order_id, user, held, FailReason::PublishFailed, deadline))
        .retry(retry::times(std::time::Duration::from_millis(100), 2))
        .notify(|error, _| tracing::warn!(order_id = %order_id, %error, "rollback failed; again"))
        .await;
    use seckill_shared::domain::OrderStatus;
    use seckill_shared::stock::Confirmation;
    let stands = || {
        tracing::warn!(order_id = %order_id, "not rolled back: the order stands, published again later");
        Ok(Taken::Queued(order_id.clone()))
    };
    match state.stock.orders().order_confirmed(order_id).await {
        Ok(Confirmation::Confirmed(order)) if order.status == OrderStatus::Failed => {
            state.sold_out.clear(record.sale());
            Err(BuyerError::try_again(anyhow::anyhow!("publish failed, deduction rolled back: {why}")))
        }
        Ok(Confirmation::Confirmed(_)) => stands(),
        Ok(Confirmation::Unconfirmed(order)) if order.status != OrderStatus::Failed => stands(),
        unknown => {
            if let Err(error) = unknown {
                tracing::warn!(order_id = %order_id, %error, "reading the order after its rollback failed");
            }
            tracing::error!(order_id = %order_id, "whether the rollback landed is not confirmed");
            metrics::counter!("seckill_edge_rollback_failed_total").increment(1);
            Ok(Taken::Unconfirmed(Some(order_id.clone())))
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
            OrderAnswer::AlreadyPurchased => BuyerError::AlreadyPurchased(None),
            OrderAnswer::LimitReached => BuyerError::LimitReached { held: 1, limit: 2 },
            OrderAnswer::SoldOut => BuyerError::SoldOut,
            OrderAnswer::SaleNotFound => BuyerError::SaleNotFound,
            OrderAnswer::SaleNotActive => BuyerError::SaleNotActive,
            OrderAnswer::AdmissionRequired => BuyerError::AdmissionRequired("x".into()),
            OrderAnswer::Unauthorized => BuyerError::Request(RequestError::Unauthorized("x".into())),
            OrderAnswer::Forbidden => BuyerError::Request(RequestError::Forbidden("x".into())),
            OrderAnswer::RateLimited => {
                BuyerError::Request(RequestError::RateLimited(std::time::Duration::from_secs(1)))
            }
            OrderAnswer::InvalidRequest => BuyerError::Request(RequestError::InvalidRequest("x".into())),
            OrderAnswer::PayloadTooLarge => BuyerError::Request(RequestError::PayloadTooLarge(1)),
            OrderAnswer::UnsupportedMediaType => BuyerError::Request(RequestError::UnsupportedMediaType("x".into())),
            OrderAnswer::RequestTimeout => {
                BuyerError::Request(RequestError::RequestTimeout(std::time::Duration::from_secs(1)))
            }
            OrderAnswer::MethodNotAllowed => BuyerError::Request(RequestError::MethodNotAllowed),
            OrderAnswer::TryAgain => BuyerError::try_again(why()),
            OrderAnswer::Internal => BuyerError::Request(RequestError::Internal(why())),
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
                    assert_eq!(error.refused().body().code.as_str(), row.code, "{answer:?}");
                    error.into_response()
                }
            };
            assert_eq!(response.status().as_u16(), row.status, "{answer:?}");
            let kept_nothing = row.promise.starts_with("nothing was kept") || row.promise.starts_with("nothing new");
            assert_eq!(answer.may_have_kept(), !kept_nothing, "{answer:?}");
        }
    }
}
