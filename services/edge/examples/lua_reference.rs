//! The edge+Redis reference for `make bench`: the smallest axum handler that
//! does the same deduction (same script, same parse, same answer shape) and
//! nothing else — no rate limit, no sold-out flag, no Kafka. The edge's
//! accepted path is reported as a ratio to this.
//!
//! `cargo run --release --example lua_reference -- 127.0.0.1:8090`

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use seckill_shared::domain::{SaleKey, UserId};
use seckill_shared::stock::{Deduction, Stock};
use serde_json::{json, Value};

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct OrderRequest {
    activity_id: i64,
    sku_id: i64,
    user_id: i64,
}

async fn order(State(stock): State<Stock>, Json(request): Json<OrderRequest>) -> (StatusCode, Json<Value>) {
    let (Ok(sale), Ok(user)) = (SaleKey::from_raw(request.activity_id, request.sku_id), UserId::new(request.user_id)) else {
        return (StatusCode::BAD_REQUEST, Json(json!({"code": "INVALID_REQUEST"})));
    };
    match stock.deduct(sale, user, seckill_shared::now_ms(), "ref00000").await {
        Ok(Deduction::Accepted { order_id, .. }) => {
            (StatusCode::ACCEPTED, Json(json!({"code": "QUEUED", "orderId": order_id.as_str()})))
        }
        Ok(Deduction::SoldOut) => (StatusCode::GONE, Json(json!({"code": "SOLD_OUT"}))),
        Ok(other) => (StatusCode::CONFLICT, Json(json!({"code": format!("{other:?}")}))),
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"code": "TRY_AGAIN", "message": error.to_string()}))),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8090".into());
    let settings: seckill_shared::config::RedisSettings = seckill_shared::config::RedisSettings {
        url: std::env::var("SECKILL_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/0".into()),
        key_prefix: std::env::var("SECKILL_KEY_PREFIX").unwrap_or_default(),
        ..Default::default()
    };
    let stock = Stock::connect(&settings).await?;
    let app = Router::new().route("/api/seckill/order", post(order)).with_state(stock);
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    axum::serve(listener, app).await?;
    Ok(())
}
