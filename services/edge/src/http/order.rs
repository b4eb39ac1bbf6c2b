//! The buyer's API: place an order, read an order, read a user's result.

use super::{auth, ApiError, AppState};
use crate::publish::PublishOutcome;
use crate::settings::DeductionMode;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use seckill_shared::db::OrderRow;
use seckill_shared::domain::{ActivityId, FailReason, OrderId, OrderRecord, SaleKey, SkuId, UserId};
use seckill_shared::stock::{Deduction, OrderState};
use serde_json::{json, Map, Value};
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
struct OrderRequest {
    activity: ActivityId,
    sku: SkuId,
    user: UserId,
}

/// Reads the body within the limit: 413 over it, 400 when it cannot be read.
async fn read_body(body: Body, limit: usize) -> Result<axum::body::Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|error| {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
        let mut too_large = false;
        while let Some(current) = source {
            too_large |= current.is::<http_body_util::LengthLimitError>();
            source = current.source();
        }
        if too_large {
            ApiError::PayloadTooLarge(limit)
        } else {
            ApiError::InvalidRequest(format!("could not read the request body: {error}"))
        }
    })
}

const ORDER_FIELDS: [&str; 3] = ["activityId", "skuId", "userId"];

/// Strict parse: a JSON object with exactly the three ids, each a positive
/// integer within i64. Every refusal names the field.
/// The well-formed body, parsed without building a JSON tree (the hot path).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FastOrderRequest {
    activity_id: i64,
    sku_id: i64,
    user_id: i64,
}

fn parse_order_request(bytes: &[u8]) -> Result<OrderRequest, ApiError> {
    // A derived struct would also take `[1,2,3]`: only objects qualify.
    let is_object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    if let Some(Ok(fast)) = is_object.then(|| serde_json::from_slice::<FastOrderRequest>(bytes)) {
        if let (Ok(activity), Ok(sku), Ok(user)) =
            (ActivityId::new(fast.activity_id), SkuId::new(fast.sku_id), UserId::new(fast.user_id))
        {
            return Ok(OrderRequest { activity, sku, user });
        }
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
        activity: ActivityId::new(positive_field(&object, "activityId")?).map_err(invalid)?,
        sku: SkuId::new(positive_field(&object, "skuId")?).map_err(invalid)?,
        user: UserId::new(positive_field(&object, "userId")?).map_err(invalid)?,
    })
}

fn positive_field(object: &Map<String, Value>, name: &str) -> Result<i64, ApiError> {
    match object.get(name) {
        None | Some(Value::Null) => Err(ApiError::InvalidRequest(format!("missing field '{name}'"))),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(v) if v > 0 => Ok(v),
            _ => Err(ApiError::InvalidRequest(format!("{name} must be a positive integer within i64, got {n}"))),
        },
        Some(other) => Err(ApiError::InvalidRequest(format!(
            "{name} must be a positive integer, got {}",
            json_type(other)
        ))),
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

fn invalid(error: seckill_shared::domain::IdError) -> ApiError {
    ApiError::InvalidRequest(error.to_string())
}

async fn place_order(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let result = place_order_inner(&state, &headers, body).await;
    let outcome = match &result {
        Ok(_) => "QUEUED",
        Err(error) => error.code(),
    };
    metrics::counter!("seckill_edge_orders_total", "outcome" => outcome).increment(1);
    result
}

async fn place_order_inner(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let bytes = read_body(body, state.settings.body_limit_bytes).await?;
    let request = parse_order_request(&bytes)?;
    auth::require_user(state, headers, request.user)?;
    let sale = SaleKey::new(request.activity, request.sku);
    // A sale known sold out is answered before the rate limits: the answer
    // costs nothing and touches nothing, so there is nothing to protect.
    if state.sold_out.is_sold_out(sale) {
        return Err(ApiError::SoldOut);
    }
    state.limits.check(request.user).map_err(ApiError::RateLimited)?;

    let nonce = format!("{:08x}", rand::random::<u32>());
    let accepted_at = seckill_shared::now_ms();
    let started = Instant::now();
    let deduction = match state.settings.deduction {
        DeductionMode::Lua => state.stock.deduct(sale, request.user, accepted_at, &nonce).await.map(Some),
        DeductionMode::Lock => {
            state
                .stock
                .deduct_with_lock(&state.locks, &state.settings.lock, sale, request.user, accepted_at, &nonce)
                .await
        }
    };
    metrics::histogram!("seckill_edge_deduct_seconds").record(started.elapsed().as_secs_f64());
    // A Redis error may come after the script ran; then the reservation it
    // left is settled by the sweeper. Either way the client may try again.
    let deduction = deduction.map_err(|e| ApiError::TryAgain(format!("stock service unavailable: {e}")))?;
    let order_id = match deduction {
        None => return Err(ApiError::TryAgain("the sale is busy (lock wait timed out); try again".into())),
        Some(Deduction::Accepted { order_id, .. }) => order_id,
        Some(Deduction::SaleNotFound) => return Err(ApiError::SaleNotFound),
        Some(Deduction::NotActive) => return Err(ApiError::SaleNotActive),
        Some(Deduction::AlreadyPurchased { order_id }) => return Err(ApiError::AlreadyPurchased(order_id)),
        Some(Deduction::SoldOut) => {
            state.sold_out.mark(sale);
            return Err(ApiError::SoldOut);
        }
    };

    let record = OrderRecord::new(order_id.clone(), sale, request.user, accepted_at);
    let request_id = headers.get("x-request-id").and_then(|v| v.to_str().ok());
    let started = Instant::now();
    metrics::gauge!("seckill_edge_publishes_in_flight").increment(1.0);
    let outcome = state.publisher.publish(&record, request_id).await;
    metrics::gauge!("seckill_edge_publishes_in_flight").decrement(1.0);
    metrics::histogram!("seckill_edge_publish_seconds").record(started.elapsed().as_secs_f64());
    match outcome {
        PublishOutcome::Delivered => Ok(queued(&order_id)),
        PublishOutcome::Ambiguous(why) => {
            // The record may be in the log: rolling back could sell the unit
            // twice. The order stays QUEUED; the order service (if the record
            // landed) or the reservation sweeper (if not) settles it, and the
            // client follows it with GET /api/seckill/order/{id}.
            tracing::warn!(order_id = %order_id, reason = %why, "publish outcome unknown; left to the sweeper");
            metrics::counter!("seckill_edge_publish_ambiguous_total").increment(1);
            Ok(queued(&order_id))
        }
        PublishOutcome::NotPersisted(why) => {
            tracing::warn!(order_id = %order_id, reason = %why, "publish failed; rolling back");
            match state.stock.rollback(&order_id, request.user, FailReason::PublishFailed).await {
                Ok(_) => state.sold_out.clear(sale),
                // The reservation stays; the sweeper restores the unit.
                Err(error) => tracing::error!(order_id = %order_id, %error, "rollback failed; left to the sweeper"),
            }
            Err(ApiError::TryAgain("the order could not be queued and nothing was kept; try again".into()))
        }
    }
}

fn queued(order_id: &OrderId) -> (StatusCode, Json<Value>) {
    (StatusCode::ACCEPTED, Json(json!({ "code": "QUEUED", "orderId": order_id.as_str() })))
}

fn status_body(order_id: &str, sale: SaleKey, user_id: i64, status: &str, reason: Option<&str>) -> Json<Value> {
    let mut body = json!({
        "orderId": order_id,
        "activityId": sale.activity.get(),
        "skuId": sale.sku.get(),
        "userId": user_id,
        "status": status,
    });
    if let Some(reason) = reason {
        body["reason"] = Value::String(reason.to_owned());
    }
    Json(body)
}

fn from_redis(order_id: &OrderId, state: &OrderState) -> Json<Value> {
    status_body(order_id.as_str(), order_id.sale(), state.user_id, state.status.as_str(), state.reason.as_deref())
}

fn from_db(row: &OrderRow) -> Json<Value> {
    status_body(&row.order_id, row.sale, row.user_id, row.status.as_str(), row.reason.as_deref())
}

/// Redis first; PostgreSQL when Redis no longer has the order (expired keys,
/// a Redis that lost data) or does not answer.
async fn lookup_order(state: &AppState, order_id: &OrderId) -> Result<Json<Value>, ApiError> {
    let redis_error = match state.stock.order_state(order_id).await {
        Ok(Some(found)) => return Ok(from_redis(order_id, &found)),
        Ok(None) => None,
        Err(error) => Some(error),
    };
    match seckill_shared::db::find_order(&state.db, order_id).await {
        Ok(Some(row)) => Ok(from_db(&row)),
        Ok(None) => match redis_error {
            Some(error) => Err(ApiError::TryAgain(format!("order status unavailable: {error}"))),
            None => Err(ApiError::OrderNotFound),
        },
        Err(error) => Err(ApiError::TryAgain(format!("order status unavailable: {error}"))),
    }
}

async fn get_order(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(raw): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let order_id = OrderId::parse(&raw).map_err(invalid)?;
    let body = lookup_order(&state, &order_id).await?;
    if state.settings.user_jwt_secret.is_some() {
        let owner = body.0["userId"].as_i64().and_then(|u| UserId::new(u).ok());
        match owner {
            Some(owner) => auth::require_user(&state, &headers, owner)?,
            None => return Err(ApiError::OrderNotFound),
        }
    }
    Ok(body)
}

async fn get_result(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let field = |name: &str| -> Result<i64, ApiError> {
        let raw = query.get(name).ok_or_else(|| ApiError::InvalidRequest(format!("missing query parameter '{name}'")))?;
        raw.parse::<i64>()
            .ok()
            .filter(|v| *v > 0)
            .ok_or_else(|| ApiError::InvalidRequest(format!("{name} must be a positive integer within i64, got '{raw}'")))
    };
    let sale = SaleKey::from_raw(field("activityId")?, field("skuId")?).map_err(invalid)?;
    let user = UserId::new(field("userId")?).map_err(invalid)?;
    auth::require_user(&state, &headers, user)?;
    match state.stock.user_order(sale, user).await {
        Ok(Some(raw)) => {
            if let Ok(order_id) = OrderId::parse(&raw) {
                return lookup_order(&state, &order_id).await;
            }
        }
        Ok(None) => {}
        Err(error) => tracing::warn!(%error, "redis unavailable for a result lookup; asking the database"),
    }
    match seckill_shared::db::find_user_order(&state.db, sale, user).await {
        Ok(Some(row)) => Ok(from_db(&row)),
        Ok(None) => Err(ApiError::OrderNotFound),
        Err(error) => Err(ApiError::TryAgain(format!("order status unavailable: {error}"))),
    }
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
        ] {
            let error = parse_order_request(body.as_bytes()).expect_err(why);
            assert_eq!(error.code(), "INVALID_REQUEST", "{why}");
            assert!(error.to_string().contains(needle), "{why}: '{error}' should name {needle}");
        }
    }

    #[test]
    fn good_bodies_parse() {
        let request = parse_order_request(br#"{"activityId":1001,"skuId":2001,"userId":42}"#).unwrap();
        assert_eq!(request.user.get(), 42);
    }
}
