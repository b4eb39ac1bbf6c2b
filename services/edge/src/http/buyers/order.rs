//! The buyer's API: place an order, read an order, read a user's result.

use super::order_admission;
use super::order_outcome::{self as outcome, Placed};
use super::order_release;
use super::order_request::OrderRequest;
use crate::client_addr::ClientAddr;
use crate::http::auth;
use crate::http::bodies::{ErrorBody, OrderRequestBody, OrderStatusBody, QueuedBody};
use crate::http::errors::{BuyerError, RequestError};
use crate::http::extract::JsonBody;
use crate::http::state::Buyers;
use crate::http::state::Edge;
use crate::lookup::{self, LookupError, OrderView};
use crate::settings::DeductionMode;
use axum::extract::{Extension, Path, Query, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use seckill_shared::db::within;
use seckill_shared::domain::{ActivityId, OrderId, OrderRecord, SaleKey, SkuId, UserId};
use seckill_shared::kafka::{REQUEST_ID_HEADER, TRACEPARENT_HEADER};
use seckill_shared::ops::trace_export;
use seckill_shared::stock::{DeductRequest, Deduction};
use std::collections::HashMap;
use std::time::Instant;
use tracing::Instrument;

/// Buyer routes.
pub fn router() -> Router<Edge> {
    Router::new()
        .route("/api/seckill/order", post(place_order))
        .route("/api/seckill/order/{order_id}", get(get_order))
        .route("/api/seckill/result", get(get_result))
}

/// Places an order (`quantity` units, one when absent): rate limits, one atomic
/// deduction in Redis, a publish to Kafka acknowledged by every in-sync replica.
#[utoipa::path(
    post,
    path = "/api/seckill/order",
    tag = "buyer",
    request_body(content = OrderRequestBody, content_type = "application/json"),
    security((), ("user" = [])),
    params(
        ("x-request-id" = Option<String>, Header, description = "At most 128 visible ASCII characters; else one is made"),
        ("seckill-admission" = Option<String>, Header, description = "The admission token of the sale's waiting room (a join's or poll's `admission`), for a sale that has one"),
    ),
    responses(
        (status = 202, description = "QUEUED: accepted; follow it with GET /api/seckill/order/{orderId}. UNCONFIRMED (an error body, Retry-After: 1): Redis did not confirm in time whether this request holds a unit; poll the order (orderId, when known) or GET /api/seckill/result", body = QueuedBody,
            links(("order" = (operation_id = "get_order", parameters(("orderId" = "$response.body#/orderId")), description = "The order this request placed")))),
        (status = 400, description = "INVALID_REQUEST: not JSON, a missing, unknown or repeated field, an id not a positive 64-bit integer", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED: user auth is on and the bearer JWT is missing or invalid", body = ErrorBody),
        (status = 403, description = "SALE_NOT_ACTIVE: before the sale's start or after its end; FORBIDDEN: the JWT's subject is another user; ADMISSION_REQUIRED: the sale admits through its waiting room and the Seckill-Admission header holds no valid token of this user, sale and round (or one used already)", body = ErrorBody),
        (status = 404, description = "SALE_NOT_FOUND: unknown or not warmed up", body = ErrorBody),
        (status = 405, description = "METHOD_NOT_ALLOWED (with Allow)", body = ErrorBody),
        (status = 409, description = "ALREADY_PURCHASED: one order per user per sale (orderId: theirs, when the user was identified by a token or auth.allow_anonymous is on)", body = ErrorBody),
        (status = 410, description = "SOLD_OUT", body = ErrorBody),
        (status = 408, description = "REQUEST_TIMEOUT: the body did not arrive within connections.body_timeout_ms (the connection is closed)", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE: over the body limit (default 4 KiB)", body = ErrorBody),
        (status = 415, description = "UNSUPPORTED_MEDIA_TYPE: not declared application/json", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 503, description = "TRY_AGAIN: Redis or Kafka unavailable, or the edge at connections.max_in_flight; nothing was kept (a deduction undone is on the replicas before this is answered)", body = ErrorBody),
    )
)]
pub(crate) async fn place_order(
    State(state): State<Buyers>,
    Extension(client): Extension<ClientAddr>,
    headers: HeaderMap,
    JsonBody(request): JsonBody<OrderRequest>,
) -> Placed {
    // A task of its own: a client that hangs up (or a drain that ends)
    // drops this request, not the order. Its claim, deduction, publish,
    // rollback and settling run to their end, and are answered to no one.
    let orders = state.orders.clone();
    let order = async move {
        let result = place_order_inner(&state, client, &headers, request).await;
        outcome::answer_of(&result).count();
        result
    };
    // Boxed: the task then holds a pointer, and the order's whole state
    // (some kilobytes) is not copied each time the task's future moves.
    orders
        .spawn(Box::pin(order).in_current_span())
        .await
        .unwrap_or_else(|error| Err(anyhow::anyhow!("placing the order stopped: {error}").into()))
}

async fn place_order_inner(state: &Buyers, client: ClientAddr, headers: &HeaderMap, request: OrderRequest) -> Placed {
    auth::require_user(&state.users, headers, request.user)?;
    let sale = SaleKey::new(request.activity, request.sku);
    // A sale known sold out is answered before the rate limits: the answer
    // costs nothing and touches nothing, so there is nothing to protect.
    if state.sold_out.is_sold_out(sale) {
        return Err(BuyerError::SoldOut);
    }
    state.limits.check_client(client.0).map_err(RequestError::RateLimited)?;
    state.limits.check(request.user).map_err(RequestError::RateLimited)?;
    // Nothing deducted that could not be published: a producer retired by a
    // fatal error, or no broker taking records (the circuit), is a 503 now.
    let permit = state.publisher.admit().map_err(BuyerError::try_again)?;
    // The observe middleware gave every request both.
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let trace =
        crate::publish::Trace { request_id: header(REQUEST_ID_HEADER), traceparent: header(TRACEPARENT_HEADER) };
    let admitted = order_admission::claim(state, headers, sale, request.user).await?;
    let result = deduct_and_publish(state, request, admitted.is_some(), trace, permit).await;
    if let Some(token) = &admitted {
        order_admission::settle(state, token, &result).await;
    }
    result
}

/// The order's take in its release (when its activity is one), the
/// deduction (`admitted`: the order's admission token is claimed) and,
/// when it accepted, the publish; the answer either comes to.
async fn deduct_and_publish(
    state: &Buyers,
    request: OrderRequest,
    admitted: bool,
    trace: crate::publish::Trace<'_>,
    permit: crate::publish::Admission<'_>,
) -> Placed {
    // 64 random bits: ids stay unique even if the order counter went back.
    let nonce = format!("{:016x}", rand::random::<u64>());
    let taken = order_release::take(state, &request, &nonce).await?;
    let order = Order { request, admitted, nonce, taken: taken.as_ref() };
    let result = deduct_then_publish(state, order, trace, permit).await;
    if let Some(taken) = &taken {
        order_release::settle(state, taken, &result).await;
    }
    result
}

/// One order on its way: what was asked, its admission, the nonce its id
/// will end in and its take in its release.
struct Order<'a> {
    request: OrderRequest,
    admitted: bool,
    nonce: String,
    taken: Option<&'a order_release::ReleaseTake>,
}

/// The deduction and, when it accepted (and its release's take is kept),
/// the publish.
async fn deduct_then_publish(
    state: &Buyers,
    order: Order<'_>,
    trace: crate::publish::Trace<'_>,
    permit: crate::publish::Admission<'_>,
) -> Placed {
    let Order { request, admitted, nonce, taken } = order;
    let sale = SaleKey::new(request.activity, request.sku);
    let deadline = state.publisher.deadline();
    let started = Instant::now();
    let span = trace_export::span_in(trace.traceparent, || {
        tracing::info_span!(
            "deduct",
            otel.name = "EVALSHA deduct",
            otel.kind = "client",
            db.system.name = "redis",
            db.operation.name = "EVALSHA",
            sale = %sale,
        )
    });
    let deduction = deduct(state, request, admitted, nonce, trace, deadline).instrument(span).await;
    crate::hot_metrics::DEDUCT_SECONDS.record(started.elapsed().as_secs_f64());
    // Not decided: answered without a deduction (503, or 202 UNCONFIRMED).
    let deduction = match deduction {
        Ok(deduction) => deduction,
        Err(answer) => return answer,
    };
    let won = outcome::accepted(state, sale, deduction)?;
    tracing::Span::current().record("order_id", won.order_id.as_str());

    let record = OrderRecord::new(won.order_id, sale, request.user, won.accepted_at)
        .in_round(won.round)
        .holding(request.quantity, won.slot);
    if let Some(refused) = match taken {
        Some(taken) => order_release::keep(state, taken, &record).await,
        None => None,
    } {
        return refused;
    }
    let started = Instant::now();
    crate::hot_metrics::PUBLISHES_IN_FLIGHT.increment(1.0);
    let published = state.publisher.publish(&record, trace, permit).await;
    crate::hot_metrics::PUBLISHES_IN_FLIGHT.decrement(1.0);
    crate::hot_metrics::PUBLISH_SECONDS.record(started.elapsed().as_secs_f64());
    outcome::published(state, &record, published, deadline).await
}

/// The deduction, as the settings choose it: the Lua script in the user's
/// home bucket (through the batcher), or the seed's lock; when neither
/// decided, the answer instead. Every refusal of the batcher keeps nothing
/// (it resolves or voids a call it did not hear, and confirms the void) but
/// an unconfirmed one; the lock not had within its wait kept nothing.
async fn deduct(
    state: &Buyers,
    request: OrderRequest,
    admitted: bool,
    nonce: String,
    trace: crate::publish::Trace<'_>,
    deadline: std::time::Duration,
) -> Result<Deduction, Placed> {
    let (sale, user) = (SaleKey::new(request.activity, request.sku), request.user);
    match state.settings.deduction {
        DeductionMode::Lua => {
            let deduct = DeductRequest {
                user,
                nonce,
                request_id: trace.request_id.unwrap_or_default().to_owned(),
                traceparent: trace.traceparent.unwrap_or_default().to_owned(),
                admitted,
                quantity: request.quantity,
            };
            state.homes.deduct(&state.batcher, sale, deduct, deadline).await.map_err(outcome::not_decided)
        }
        DeductionMode::Lock => {
            let (locks, lock) = (&state.locks, &state.settings.lock);
            let quantity = request.quantity;
            let deduction = state
                .stock
                .orders()
                .deduct_with_lock(locks, lock, sale, user, quantity, admitted, &nonce, deadline)
                .await;
            match deduction {
                Ok(Some(deduction)) => Ok(deduction),
                Ok(None) => Err(Err(outcome::nothing_kept("the sale's lock was not had within its wait"))),
                Err(error) => Err(Err(BuyerError::try_again(error))),
            }
        }
    }
}

/// An order's status as the buyer's API answers it.
pub(super) fn status_body(view: &OrderView) -> Json<OrderStatusBody> {
    Json(OrderStatusBody::from(view))
}

fn lookup_error(error: LookupError) -> BuyerError {
    match error {
        LookupError::NotFound => BuyerError::OrderNotFound,
        unavailable => BuyerError::try_again(unavailable),
    }
}

/// An order's status (Redis first, PostgreSQL when Redis no longer has it).
#[utoipa::path(
    get,
    path = "/api/seckill/order/{orderId}",
    tag = "buyer",
    security((), ("user" = [])),
    params(("orderId" = String, Path, description = "As answered by POST /api/seckill/order")),
    responses(
        (status = 200, description = "The order", body = OrderStatusBody),
        (status = 400, description = "INVALID_REQUEST: not an order id", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED: user auth is on and the JWT is missing or invalid (checked before the lookup)", body = ErrorBody),
        (status = 403, description = "FORBIDDEN: the order is another user's", body = ErrorBody),
        (status = 404, description = "ORDER_NOT_FOUND", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 503, description = "TRY_AGAIN: neither Redis nor PostgreSQL answered", body = ErrorBody),
    )
)]
pub(crate) async fn get_order(
    State(state): State<Buyers>,
    Extension(client): Extension<ClientAddr>,
    headers: HeaderMap,
    Path(raw): Path<String>,
) -> Result<Json<OrderStatusBody>, BuyerError> {
    // With user auth on, the token comes first: whether an order id exists
    // is told to its owner only. Without it, the client is what is limited.
    let caller = auth::caller(&state.users, &headers)?;
    match caller {
        Some(user) => state.limits.check(user),
        None => state.limits.check_global().and_then(|()| state.status_reads.check_client(client.0)),
    }
    .map_err(RequestError::RateLimited)?;
    let order_id = OrderId::parse(&raw).map_err(BuyerError::invalid)?;
    if state.status_reads.known_missing(order_id.as_str()) {
        return Err(BuyerError::OrderNotFound);
    }
    let view = match within(state.db_deadline(), lookup::order(&state.stock, &state.status_db, &order_id)).await {
        Err(LookupError::NotFound) => {
            state.status_reads.missed(order_id.as_str());
            return Err(BuyerError::OrderNotFound);
        }
        other => other.map_err(lookup_error)?,
    };
    match caller {
        Some(user) if user.get() != view.user_id => {
            Err(RequestError::Forbidden("the order is another user's".into()).into())
        }
        _ => Ok(status_body(&view)),
    }
}

/// A user's order in a sale's current round.
#[utoipa::path(
    get,
    path = "/api/seckill/result",
    tag = "buyer",
    security((), ("user" = [])),
    params(
        ("activityId" = i64, Query, minimum = 1),
        ("skuId" = i64, Query, minimum = 1),
        ("userId" = i64, Query, minimum = 1),
    ),
    responses(
        (status = 200, description = "The user's order", body = OrderStatusBody),
        (status = 400, description = "INVALID_REQUEST: a missing or bad parameter", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED: the JWT is missing or invalid, or no user identity is configured (and auth.allow_anonymous is off)", body = ErrorBody),
        (status = 403, description = "FORBIDDEN: the JWT's subject is another user", body = ErrorBody),
        (status = 404, description = "ORDER_NOT_FOUND: the user has no order in this sale", body = ErrorBody),
        (status = 429, description = "RATE_LIMITED", body = ErrorBody, headers(("Retry-After" = u64, description = "Seconds to wait"))),
        (status = 503, description = "TRY_AGAIN", body = ErrorBody),
    )
)]
pub(crate) async fn get_result(
    State(state): State<Buyers>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<OrderStatusBody>, BuyerError> {
    let (sale, user) = sale_and_user(&query)?;
    auth::require_identity(&state.users, &headers, user)?;
    state.limits.check(user).map_err(RequestError::RateLimited)?;
    let view = within(state.db_deadline(), lookup::user_order(&state.stock, &state.status_db, sale, user))
        .await
        .map_err(lookup_error)?;
    Ok(status_body(&view))
}

/// The sale and user a query names (`activityId`, `skuId`, `userId`).
pub(super) fn sale_and_user(query: &HashMap<String, String>) -> Result<(SaleKey, UserId), BuyerError> {
    let field = |name: &str| -> Result<&str, BuyerError> {
        query
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| BuyerError::invalid(format!("missing query parameter '{name}'")))
    };
    let activity: ActivityId = field("activityId")?.parse().map_err(BuyerError::invalid)?;
    let sku: SkuId = field("skuId")?.parse().map_err(BuyerError::invalid)?;
    let user: UserId = field("userId")?.parse().map_err(BuyerError::invalid)?;
    Ok((SaleKey::new(activity, sku), user))
}
