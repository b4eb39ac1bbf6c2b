//! The payment provider's notifications: the only way an order becomes
//! PAID. The signature is checked over the raw body before anything is read
//! from it (401, nothing changed, otherwise); the payment is then recorded
//! once in the ledger by its payment id ([`crate::ledger::record`]).
//! Providers retry a notification until it is answered 2xx: an order still
//! being written is answered 409 `ORDER_PENDING` (`Retry-After`) so the
//! provider comes back; a refund due is answered 200 — it is recorded.

use crate::http::bodies::{ErrorBody, PaymentNotificationBody, PaymentOutcomeCode, PaymentRecordedBody};
use crate::http::errors::{ProviderError, RequestError};
use crate::http::extract::{FromJsonBody, JsonBody};
use crate::http::state::Edge;
use crate::http::state::Provider;
use crate::ledger::{self, Outcome, Payment};
use crate::signature;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use seckill_shared::db::within;
use serde::Deserialize;

/// The notification route (called by the provider's servers: no CORS).
pub fn router() -> Router<Edge> {
    Router::new().route("/api/payments/notify", post(notify))
}

/// A body kept as sent: the signature covers these exact bytes.
pub(crate) struct RawBody(Vec<u8>);

impl FromJsonBody for RawBody {
    fn from_json(bytes: &[u8]) -> Result<Self, RequestError> {
        Ok(Self(bytes.to_vec()))
    }
}

/// Records a payment the provider reports.
#[utoipa::path(
    post,
    path = "/api/payments/notify",
    tag = "payments",
    request_body(content = PaymentNotificationBody, content_type = "application/json"),
    params(("seckill-signature" = String, Header, description = "t=<unix seconds>,v1=<hex HMAC-SHA256(SECKILL_PAYMENT_WEBHOOK_SECRET, \"<t>.<raw body>\")>; several v1 allowed; t within payment_signature_tolerance_secs (300) of now")),
    responses(
        (status = 200, description = "Recorded (now, or before: a repeat of the payment id answers the same): APPLIED (the order is PAID), REFUND_DUE (owed back, why in refundReason), or IGNORED (not SUCCEEDED)", body = PaymentRecordedBody),
        (status = 400, description = "INVALID_REQUEST: the signed body is not a notification", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED: a missing, malformed, stale or wrong signature, or no secret configured; nothing changed", body = ErrorBody),
        (status = 409, description = "ORDER_PENDING: the order is still being written (Retry-After; the provider retries). PAYMENT_CONFLICT: the payment id was recorded for another order", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE", body = ErrorBody),
        (status = 503, description = "TRY_AGAIN: PostgreSQL or Redis unavailable; nothing changed", body = ErrorBody),
    )
)]
pub(crate) async fn notify(
    State(state): State<Provider>,
    headers: HeaderMap,
    JsonBody(RawBody(raw)): JsonBody<RawBody>,
) -> Result<Json<PaymentRecordedBody>, ProviderError> {
    let settings = &state.settings;
    let checked = match settings.payment_webhook_secret.as_ref().map(seckill_shared::config::Secret::expose) {
        None => Err(signature::Refused::NotConfigured),
        Some(secret) => signature::verify(
            secret.as_bytes(),
            headers.get(signature::HEADER).and_then(|v| v.to_str().ok()),
            &raw,
            chrono::Utc::now().timestamp(),
            i64::try_from(settings.payment_signature_tolerance_secs).unwrap_or(i64::MAX),
        ),
    };
    if let Err(why) = checked {
        tracing::warn!(reason = %why, "payment notification refused");
        metrics::counter!("seckill_payment_notifications_refused_total").increment(1);
        return Err(RequestError::Unauthorized("bad or missing Seckill-Signature".into()).into());
    }
    let notification: serde_json::Value =
        serde_json::from_slice(&raw).map_err(|e| RequestError::InvalidRequest(format!("request body: {e}")))?;
    let body = PaymentNotificationBody::deserialize(&notification)
        .map_err(|e| RequestError::InvalidRequest(format!("request body: {e}")))?;
    for (value, name) in [(&body.payment_id, "paymentId"), (&body.order_id, "orderId")] {
        if value.is_empty() || value.len() > 128 || !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ProviderError::invalid(format!("{name} must be 1 to 128 visible ASCII characters")));
        }
    }
    let answer = |outcome, refund_reason| {
        Json(PaymentRecordedBody {
            payment_id: body.payment_id.clone(),
            order_id: body.order_id.clone(),
            outcome,
            refund_reason,
        })
    };
    if body.status != "SUCCEEDED" {
        return Ok(answer(PaymentOutcomeCode::Ignored, None));
    }
    let payment = Payment { payment_id: &body.payment_id, order_id: &body.order_id, notification: &notification };
    let outcome = within(state.db_deadline(), ledger::record(&state.stock, &state.db, &payment)).await?;
    Ok(match outcome {
        Outcome::Applied => answer(PaymentOutcomeCode::Applied, None),
        Outcome::RefundDue(reason) => answer(PaymentOutcomeCode::RefundDue, Some(reason)),
    })
}
