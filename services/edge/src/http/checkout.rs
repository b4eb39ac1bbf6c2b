//! The buyer's payment confirmation and cancel of a CREATED order.

use super::bodies::{ErrorBody, OrderOwnerBody, OrderStatusBody};
use super::body::{from_serde, FromJsonBody, JsonBody};
use super::order::status_body;
use super::{auth, ApiError, AppState};
use crate::lookup::LookupError;
use crate::payment::{self, PaymentError};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use seckill_shared::domain::{OrderId, UserId};

/// Payment and cancel routes (buyer's API: CORS as the rest of it).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/seckill/order/{order_id}/pay", post(pay))
        .route("/api/seckill/order/{order_id}/cancel", post(cancel))
}

impl FromJsonBody for OrderOwnerBody {
    fn from_json(bytes: &[u8]) -> Result<Self, ApiError> {
        from_serde(bytes)
    }
}

/// The header a payment confirmation may carry to make repeats safe.
const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The checks both routes make first: the token (when user auth is on)
/// names the body's user, the per-user limit, a well-formed order id.
fn admit(
    state: &AppState,
    headers: &HeaderMap,
    raw: &str,
    body: &OrderOwnerBody,
) -> Result<(OrderId, UserId), ApiError> {
    let user = UserId::new(body.user_id).map_err(ApiError::invalid)?;
    auth::require_user(state, headers, user)?;
    state.limits.check(user).map_err(ApiError::RateLimited)?;
    let order_id = OrderId::parse(raw).map_err(ApiError::invalid)?;
    Ok((order_id, user))
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else { return Ok(None) };
    match value.to_str() {
        Ok(key) if !key.is_empty() && key.len() <= 128 && key.bytes().all(|b| b.is_ascii_graphic()) => Ok(Some(key)),
        _ => Err(ApiError::invalid("Idempotency-Key must be 1 to 128 visible ASCII characters")),
    }
}

fn refusal(error: PaymentError) -> ApiError {
    match error {
        PaymentError::NotFound | PaymentError::Lookup(LookupError::NotFound) => ApiError::OrderNotFound,
        PaymentError::Pending => ApiError::OrderPending,
        PaymentError::NotOwner => ApiError::Forbidden("the order is another user's".into()),
        PaymentError::PaymentLate => ApiError::PaymentLate,
        PaymentError::AlreadyPaid => ApiError::AlreadyPaid,
        PaymentError::Failed(reason) => ApiError::OrderFailed(reason),
        unavailable @ (PaymentError::Lookup(_) | PaymentError::Db(_)) => ApiError::TryAgain(unavailable.into()),
    }
}

/// Confirms the payment of a CREATED order (standing in for the payment
/// provider's confirmation).
#[utoipa::path(
    post,
    path = "/api/seckill/order/{orderId}/pay",
    tag = "buyer",
    security((), ("user" = [])),
    request_body(content = OrderOwnerBody, content_type = "application/json"),
    params(
        ("orderId" = String, Path, description = "As answered by POST /api/seckill/order"),
        ("idempotency-key" = Option<String>, Header, description = "1 to 128 visible ASCII characters: a repeat with the same key answers the same 200"),
    ),
    responses(
        (status = 200, description = "PAID (now, or by an earlier confirmation with the same key or none)", body = OrderStatusBody),
        (status = 400, description = "INVALID_REQUEST: a bad order id, body or Idempotency-Key", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED", body = ErrorBody),
        (status = 403, description = "FORBIDDEN: the order, or the JWT's subject, is another user's", body = ErrorBody),
        (status = 404, description = "ORDER_NOT_FOUND", body = ErrorBody),
        (status = 409, description = "PAYMENT_LATE: the order was cancelled (its deadline passed); the payment is recorded for a refund. ALREADY_PAID: paid with another Idempotency-Key. ORDER_PENDING: not written yet (Retry-After). ORDER_FAILED", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 503, description = "TRY_AGAIN: PostgreSQL unavailable; nothing changed", body = ErrorBody),
    )
)]
pub(super) async fn pay(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(raw): Path<String>,
    JsonBody(body): JsonBody<OrderOwnerBody>,
) -> Result<Json<OrderStatusBody>, ApiError> {
    let (order_id, user) = admit(&state, &headers, &raw, &body)?;
    let key = idempotency_key(&headers)?;
    let view = payment::pay(&state.stock, &state.db, &order_id, user, key).await.map_err(refusal)?;
    Ok(status_body(&view))
}

/// Cancels a CREATED order; its unit goes back on sale.
#[utoipa::path(
    post,
    path = "/api/seckill/order/{orderId}/cancel",
    tag = "buyer",
    security((), ("user" = [])),
    request_body(content = OrderOwnerBody, content_type = "application/json"),
    params(("orderId" = String, Path, description = "As answered by POST /api/seckill/order")),
    responses(
        (status = 200, description = "CANCELLED (now, or before: nothing is given back twice)", body = OrderStatusBody),
        (status = 400, description = "INVALID_REQUEST: a bad order id or body", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED", body = ErrorBody),
        (status = 403, description = "FORBIDDEN: the order, or the JWT's subject, is another user's", body = ErrorBody),
        (status = 404, description = "ORDER_NOT_FOUND", body = ErrorBody),
        (status = 409, description = "ALREADY_PAID, ORDER_FAILED, or ORDER_PENDING: not written yet (Retry-After)", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 503, description = "TRY_AGAIN: PostgreSQL unavailable; nothing changed", body = ErrorBody),
    )
)]
pub(super) async fn cancel(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(raw): Path<String>,
    JsonBody(body): JsonBody<OrderOwnerBody>,
) -> Result<Json<OrderStatusBody>, ApiError> {
    let (order_id, user) = admit(&state, &headers, &raw, &body)?;
    let view = payment::cancel(&state.stock, &state.db, &order_id, user).await.map_err(refusal)?;
    // Its unit is back: this edge stops trusting a sold-out flag at once.
    state.sold_out.clear(order_id.sale());
    Ok(status_body(&view))
}
