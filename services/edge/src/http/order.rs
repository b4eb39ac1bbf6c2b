//! The buyer's API: place an order, read an order, read a user's result.

use super::bodies::{ErrorBody, OrderRequestBody, OrderStatusBody, QueuedBody};
use super::extract::{FromJsonBody, JsonBody};
use super::{auth, ApiError, AppState};
use crate::client_addr::ClientAddr;
use crate::lookup::{self, LookupError, OrderView};
use crate::publish::PublishOutcome;
use crate::settings::DeductionMode;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use backon::Retryable;
use seckill_shared::domain::{ActivityId, FailReason, OrderId, OrderRecord, SaleKey, SkuId, UserId};
use seckill_shared::kafka::{REQUEST_ID_HEADER, TRACEPARENT_HEADER};
use seckill_shared::ops::retry;
use seckill_shared::stock::{DeductRequest, Deduction};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::time::Instant;

/// Buyer routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/seckill/order", post(place_order))
        .route("/api/seckill/order/{order_id}", get(get_order))
        .route("/api/seckill/result", get(get_result))
}

/// A validated order request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OrderRequest {
    activity: ActivityId,
    sku: SkuId,
    user: UserId,
}

const ORDER_FIELDS: [&str; 3] = ["activityId", "skuId", "userId"];

impl FromJsonBody for OrderRequest {
    fn from_json(bytes: &[u8]) -> Result<Self, ApiError> {
        parse_order_request(bytes)
    }
}

/// Strict parse: a JSON object with exactly the three ids, each a positive
/// integer within i64. Every refusal names the field.
fn parse_order_request(bytes: &[u8]) -> Result<OrderRequest, ApiError> {
    // A derived struct would also take `[1,2,3]`: only objects qualify.
    let is_object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    match is_object.then(|| serde_json::from_slice::<OrderRequestBody>(bytes)) {
        Some(Ok(fast)) => {
            if let (Ok(activity), Ok(sku), Ok(user)) =
                (ActivityId::new(fast.activity_id), SkuId::new(fast.sku_id), UserId::new(fast.user_id))
            {
                return Ok(OrderRequest { activity, sku, user });
            }
        }
        // The derived parse refuses a key given twice; a JSON tree would
        // silently keep the last one.
        Some(Err(error)) if error.to_string().starts_with("duplicate field") => {
            return Err(ApiError::InvalidRequest(format!("request body: {error}")));
        }
        _ => {}
    }
    // Anything else is refused; this slower path finds the words for why.
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::InvalidRequest(format!("request body is not valid JSON: {e}")))?;
    let Value::Object(object) = value else {
        return Err(ApiError::InvalidRequest("request body must be a JSON object".into()));
    };
    if let Some(unknown) = object.keys().find(|k| !ORDER_FIELDS.contains(&k.as_str())) {
        return Err(ApiError::InvalidRequest(format!("unknown field '{unknown}'")));
    }
    Ok(OrderRequest {
        activity: ActivityId::new(positive_field(&object, "activityId")?).map_err(ApiError::invalid)?,
        sku: SkuId::new(positive_field(&object, "skuId")?).map_err(ApiError::invalid)?,
        user: UserId::new(positive_field(&object, "userId")?).map_err(ApiError::invalid)?,
    })
}

fn positive_field(object: &Map<String, Value>, name: &str) -> Result<i64, ApiError> {
    match object.get(name) {
        None | Some(Value::Null) => Err(ApiError::InvalidRequest(format!("missing field '{name}'"))),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(v) if v > 0 => Ok(v),
            _ => Err(ApiError::InvalidRequest(format!("{name} must be a positive integer within i64, got {n}"))),
        },
        Some(other) => {
            Err(ApiError::InvalidRequest(format!("{name} must be a positive integer, got {}", json_type(other))))
        }
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Places an order for one unit: rate limits, one atomic deduction in Redis,
/// a publish to Kafka acknowledged by every in-sync replica.
#[utoipa::path(
    post,
    path = "/api/seckill/order",
    tag = "buyer",
    request_body(content = OrderRequestBody, content_type = "application/json"),
    security((), ("user" = [])),
    params(("x-request-id" = Option<String>, Header, description = "At most 128 visible ASCII characters; else one is made")),
    responses(
        (status = 202, description = "QUEUED: accepted; follow it with GET /api/seckill/order/{orderId}. UNCONFIRMED (an error body, Retry-After: 1): Redis did not confirm in time whether this request holds a unit; poll the order (orderId, when known) or GET /api/seckill/result", body = QueuedBody),
        (status = 400, description = "INVALID_REQUEST: not JSON, a missing, unknown or repeated field, an id not a positive 64-bit integer", body = ErrorBody),
        (status = 401, description = "UNAUTHORIZED: user auth is on and the bearer JWT is missing or invalid", body = ErrorBody),
        (status = 403, description = "SALE_NOT_ACTIVE: before the sale's start or after its end; FORBIDDEN: the JWT's subject is another user", body = ErrorBody),
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
pub(super) async fn place_order(
    State(state): State<AppState>,
    Extension(client): Extension<ClientAddr>,
    headers: HeaderMap,
    JsonBody(request): JsonBody<OrderRequest>,
) -> Result<(StatusCode, Json<QueuedBody>), ApiError> {
    let result = place_order_inner(&state, client, &headers, request).await;
    let outcome = match &result {
        Ok(_) => "QUEUED",
        Err(error) => error.code().as_str(),
    };
    metrics::counter!("seckill_edge_orders_total", "outcome" => outcome).increment(1);
    result
}

async fn place_order_inner(
    state: &AppState,
    client: ClientAddr,
    headers: &HeaderMap,
    request: OrderRequest,
) -> Result<(StatusCode, Json<QueuedBody>), ApiError> {
    auth::require_user(state, headers, request.user)?;
    let sale = SaleKey::new(request.activity, request.sku);
    // A sale known sold out is answered before the rate limits: the answer
    // costs nothing and touches nothing, so there is nothing to protect.
    if state.sold_out.is_sold_out(sale) {
        return Err(ApiError::SoldOut);
    }
    state.limits.check_client(client.0).map_err(ApiError::RateLimited)?;
    state.limits.check(request.user).map_err(ApiError::RateLimited)?;
    // Nothing deducted that could not be published: a producer retired by a
    // fatal error, or no broker taking records (the circuit), is a 503 now.
    let admission = state.publisher.admit().map_err(|e| ApiError::TryAgain(e.into()))?;

    // The observe middleware gave every request both.
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let trace =
        crate::publish::Trace { request_id: header(REQUEST_ID_HEADER), traceparent: header(TRACEPARENT_HEADER) };
    // 64 random bits: ids stay unique even if the order counter went back.
    let nonce = format!("{:016x}", rand::random::<u64>());
    let deadline = state.publisher.deadline();
    let started = Instant::now();
    let deduction = match state.settings.deduction {
        DeductionMode::Lua => {
            let deduct = DeductRequest {
                user: request.user,
                nonce,
                request_id: trace.request_id.unwrap_or_default().to_owned(),
                traceparent: trace.traceparent.unwrap_or_default().to_owned(),
            };
            state.homes.deduct(&state.batcher, sale, deduct, deadline).await.map(Some).map_err(not_decided)
        }
        DeductionMode::Lock => {
            let (locks, lock) = (&state.locks, &state.settings.lock);
            state
                .stock
                .deduct_with_lock(locks, lock, sale, request.user, &nonce, deadline)
                .await
                .map_err(|e| ApiError::TryAgain(e.into()))
        }
    };
    metrics::histogram!("seckill_edge_deduct_seconds").record(started.elapsed().as_secs_f64());
    // Every refusal of the batcher keeps nothing (it resolves or voids a
    // call it did not hear, and confirms the void) but an unconfirmed one.
    let deduction = deduction?;
    let (order_id, round, accepted_at) = match deduction {
        None => return Err(ApiError::TryAgain(anyhow::anyhow!("the sale's lock was not had within its wait"))),
        Some(Deduction::Accepted { order_id, round, accepted_at, .. }) => (order_id, round, accepted_at),
        Some(Deduction::SaleNotFound) => return Err(ApiError::SaleNotFound),
        Some(Deduction::NotActive) => return Err(ApiError::SaleNotActive),
        // Its id only to a buyer who proved who they are: otherwise anyone
        // naming a user id would learn that user's order.
        Some(Deduction::AlreadyPurchased { order_id }) => {
            return Err(ApiError::AlreadyPurchased(order_id.filter(|_| auth::identified(state))))
        }
        Some(Deduction::SoldOut) => {
            state.sold_out.mark(sale);
            return Err(ApiError::SoldOut);
        }
        Some(Deduction::Voided) => {
            return Err(ApiError::TryAgain(anyhow::anyhow!("the deduction was voided: nothing was kept")))
        }
        Some(Deduction::Warming) => {
            return Err(ApiError::TryAgain(anyhow::anyhow!(
                "a warm-up is replacing the sale's round: nothing was kept"
            )))
        }
        Some(Deduction::OtherBucket) => {
            return Err(ApiError::TryAgain(anyhow::anyhow!(
                "the sale's buckets changed while the request was decided (or the lock deduction met a sale in buckets): nothing was kept"
            )))
        }
    };

    tracing::Span::current().record("order_id", order_id.as_str());

    let record = OrderRecord::new(order_id.clone(), sale, request.user, accepted_at).in_round(round);
    let started = Instant::now();
    metrics::gauge!("seckill_edge_publishes_in_flight").increment(1.0);
    let outcome = state.publisher.publish(&record, trace, admission).await;
    metrics::gauge!("seckill_edge_publishes_in_flight").decrement(1.0);
    metrics::histogram!("seckill_edge_publish_seconds").record(started.elapsed().as_secs_f64());
    match outcome {
        PublishOutcome::Delivered => Ok(queued(&order_id)),
        PublishOutcome::Ambiguous(why) => {
            // The record may be in the log: rolling back could sell the unit
            // twice. The order stays QUEUED and is a promise: the order
            // service writes it if the record landed; if it never did, the
            // reservation sweeper publishes it again. The client follows it
            // with GET /api/seckill/order/{id}.
            tracing::warn!(order_id = %order_id, reason = %why, "publish outcome unknown; the sweeper publishes it again if it never landed");
            metrics::counter!("seckill_edge_publish_ambiguous_total").increment(1);
            Ok(queued(&order_id))
        }
        PublishOutcome::NotPersisted(why) => {
            tracing::warn!(order_id = %order_id, reason = %why, "publish failed; rolling back");
            match roll_back(state, &order_id, request.user, deadline).await {
                RolledBack::Undone => {
                    state.sold_out.clear(sale);
                    Err(ApiError::TryAgain(anyhow::anyhow!("publish failed, deduction rolled back: {why}")))
                }
                // Not undone: the order stands (past its publish deadline the
                // sweeper publishes it again; or it was written meanwhile).
                RolledBack::Stands => {
                    tracing::warn!(order_id = %order_id, "not rolled back: the order stands, published again later");
                    Ok(queued(&order_id))
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
fn not_decided(error: crate::home::NotDecided) -> ApiError {
    match &error {
        crate::home::NotDecided::Batcher(inner) => match inner.as_ref() {
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
async fn roll_back(state: &AppState, order_id: &OrderId, user: UserId, deadline: std::time::Duration) -> RolledBack {
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

fn queued(order_id: &OrderId) -> (StatusCode, Json<QueuedBody>) {
    (StatusCode::ACCEPTED, Json(QueuedBody::new(order_id)))
}

/// An order's status as the buyer's API answers it.
pub(super) fn status_body(view: &OrderView) -> Json<OrderStatusBody> {
    Json(OrderStatusBody::from(view))
}

fn lookup_error(error: LookupError) -> ApiError {
    match error {
        LookupError::NotFound => ApiError::OrderNotFound,
        unavailable => ApiError::TryAgain(unavailable.into()),
    }
}

/// An order's status (Redis first, PostgreSQL when Redis no longer has it).
#[utoipa::path(
    get,
    path = "/api/seckill/order/{orderId}",
    tag = "buyer",
    security((), ("user" = [])),
    params(("orderId" = String, Path, description = "As answered by POST /api/seckill/order", pattern = "^[1-9][0-9]*-[1-9][0-9]*-[1-9][0-9]*-[0-9A-Za-z]+$")),
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
pub(super) async fn get_order(
    State(state): State<AppState>,
    Extension(client): Extension<ClientAddr>,
    headers: HeaderMap,
    Path(raw): Path<String>,
) -> Result<Json<OrderStatusBody>, ApiError> {
    // With user auth on, the token comes first: whether an order id exists
    // is told to its owner only. Without it, the client is what is limited.
    let caller = auth::caller(&state, &headers)?;
    match caller {
        Some(user) => state.limits.check(user),
        None => state.limits.check_global().and_then(|()| state.status_reads.check_client(client.0)),
    }
    .map_err(ApiError::RateLimited)?;
    let order_id = OrderId::parse(&raw).map_err(ApiError::invalid)?;
    if state.status_reads.known_missing(order_id.as_str()) {
        return Err(ApiError::OrderNotFound);
    }
    let view = match lookup::order(&state.stock, &state.status_db, &order_id).await {
        Err(LookupError::NotFound) => {
            state.status_reads.missed(order_id.as_str());
            return Err(ApiError::OrderNotFound);
        }
        other => other.map_err(lookup_error)?,
    };
    match caller {
        Some(user) if user.get() != view.user_id => Err(ApiError::Forbidden("the order is another user's".into())),
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
pub(super) async fn get_result(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<OrderStatusBody>, ApiError> {
    let field = |name: &str| -> Result<&str, ApiError> {
        query
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| ApiError::invalid(format!("missing query parameter '{name}'")))
    };
    let activity: ActivityId = field("activityId")?.parse().map_err(ApiError::invalid)?;
    let sku: SkuId = field("skuId")?.parse().map_err(ApiError::invalid)?;
    let user: UserId = field("userId")?.parse().map_err(ApiError::invalid)?;
    auth::require_identity(&state, &headers, user)?;
    state.limits.check(user).map_err(ApiError::RateLimited)?;
    let view = lookup::user_order(&state.stock, &state.status_db, SaleKey::new(activity, sku), user)
        .await
        .map_err(lookup_error)?;
    Ok(status_body(&view))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_bodies_are_refused_naming_the_field() {
        for (body, needle, why) in [
            (r#"{"activityId":1,"skuId":2}"#, "userId", "missing field"),
            (r#"{"activityId":1,"skuId":2,"userId":"42"}"#, "userId", "string id"),
            (r#"{"activityId":0,"skuId":2,"userId":4}"#, "activityId", "zero id"),
            (r#"{"activityId":1,"skuId":-2,"userId":4}"#, "skuId", "negative id"),
            (r#"{"activityId":1.5,"skuId":2,"userId":4}"#, "activityId", "fractional id"),
            (r#"{"activityId":99999999999999999999,"skuId":2,"userId":4}"#, "activityId", "beyond i64"),
            (r#"{"activityId":1,"skuId":2,"userId":4,"extra":1}"#, "extra", "unknown field"),
            (r#"{"activityId":1,"skuId":2,"userId":null}"#, "userId", "null id"),
            (r#"[1,2,3]"#, "object", "not an object"),
            (r#"{"activityId":1,"#, "JSON", "truncated JSON"),
            (r#"{"activityId":1,"skuId":2,"userId":4,"userId":5}"#, "duplicate field `userId`", "a key given twice"),
        ] {
            let error = parse_order_request(body.as_bytes()).expect_err(why);
            assert_eq!(error.code().as_str(), "INVALID_REQUEST", "{why}");
            assert!(error.to_string().contains(needle), "{why}: '{error}' should name {needle}");
        }
    }

    #[test]
    fn good_bodies_parse() {
        let request = parse_order_request(br#"{"activityId":1001,"skuId":2001,"userId":42}"#).unwrap();
        assert_eq!(request.user.get(), 42);
    }
}
