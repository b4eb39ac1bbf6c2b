//! The buyer's cancel of a CREATED order. (Payments come from the payment
//! provider: [`crate::http::provider::payments`].)

use super::order::status_body;
use crate::http::auth;
use crate::http::bodies::{ErrorBody, OrderOwnerBody, OrderStatusBody};
use crate::http::errors::{BuyerError, RequestError};
use crate::http::extract::{from_serde, FromJsonBody, JsonBody};
use crate::http::state::Buyers;
use crate::http::state::Edge;
use crate::ledger;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use seckill_shared::db::within;
use seckill_shared::domain::{OrderId, UserId};

/// The cancel route (buyer's API: CORS as the rest of it).
pub fn router() -> Router<Edge> {
    Router::new().route("/api/seckill/order/{order_id}/cancel", post(cancel))
}

impl FromJsonBody for OrderOwnerBody {
    fn from_json(bytes: &[u8]) -> Result<Self, RequestError> {
        from_serde(bytes)
    }
}

/// The checks the route makes first: the token (when user auth is on)
/// names the body's user, the per-user limit, a well-formed order id.
fn admit(
    state: &Buyers,
    headers: &HeaderMap,
    raw: &str,
    body: &OrderOwnerBody,
) -> Result<(OrderId, UserId), BuyerError> {
    let user = UserId::new(body.user_id).map_err(BuyerError::invalid)?;
    auth::require_identity(&state.users, headers, user)?;
    state.limits.check(user).map_err(RequestError::RateLimited)?;
    let order_id = OrderId::parse(raw).map_err(BuyerError::invalid)?;
    Ok((order_id, user))
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
        (status = 401, description = "UNAUTHORIZED: the JWT is missing or invalid, or no user identity is configured (and auth.allow_anonymous is off)", body = ErrorBody),
        (status = 403, description = "FORBIDDEN: the order, or the JWT's subject, is another user's", body = ErrorBody),
        (status = 404, description = "ORDER_NOT_FOUND", body = ErrorBody),
        (status = 409, description = "ALREADY_PAID, ORDER_FAILED, or ORDER_PENDING: not written yet (Retry-After)", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 503, description = "TRY_AGAIN: PostgreSQL unavailable; nothing changed", body = ErrorBody),
    )
)]
pub(crate) async fn cancel(
    State(state): State<Buyers>,
    headers: HeaderMap,
    Path(raw): Path<String>,
    JsonBody(body): JsonBody<OrderOwnerBody>,
) -> Result<Json<OrderStatusBody>, BuyerError> {
    let (order_id, user) = admit(&state, &headers, &raw, &body)?;
    let view = within(state.db_deadline(), ledger::cancel(&state.stock, &state.db, &order_id, user))
        .await
        .map_err(BuyerError::Payment)?;
    // Its unit is back: this edge stops trusting a sold-out flag at once.
    state.sold_out.clear(order_id.sale());
    Ok(status_body(&view))
}
