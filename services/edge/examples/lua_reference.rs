//! The references for `make bench`: the smallest axum handler that does the
//! same deduction (same script, same answer shape) and nothing else — no
//! rate limit, no sold-out flag, no Kafka. The edge's accepted path is
//! reported as a ratio to this.
//!
//! With `--publish` it also publishes each accepted order exactly as the edge
//! does (the edge's own `Publisher`: acks=all, idempotent, delivery awaited)
//! to a topic of its own: the ceiling of the pipeline's first half on this
//! machine, which tells the edge's own overhead apart from Kafka's.
//!
//! With `--seed` it runs the seed article's own four-command script instead
//! (`seed_seckill.lua`; its stock key `{prefix}seed:stock:{a}:{s}` is set by
//! the caller) and mints order ids from a counter: the minimal handler the
//! edge's accepted path is measured against (`--seed --publish`).
//!
//! `cargo run --release --example lua_reference -- 127.0.0.1:8090 [--publish] [--seed]`

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use seckill_edge::publish::{PublishOutcome, Publisher};
use seckill_shared::config::KafkaSettings;
use seckill_shared::domain::{OrderRecord, SaleKey, UserId};
use seckill_shared::stock::{Deduction, Stock};
use serde_json::{json, Value};

// The edge's allocator, so the ratio measures handlers, not allocators.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct OrderRequest {
    activity_id: i64,
    sku_id: i64,
    user_id: i64,
}

#[derive(Clone)]
struct Reference {
    stock: Stock,
    publisher: Option<Publisher>,
    /// `--seed`: the seed's script and key prefix, and the order counter.
    seed: Option<(std::sync::Arc<redis::Script>, String, std::sync::Arc<std::sync::atomic::AtomicU64>)>,
}

/// The seed's script, answered in the edge's terms.
async fn seed_deduct(reference: &Reference, sale: SaleKey, user: UserId) -> Result<Deduction, String> {
    let (script, prefix, counter) = reference.seed.as_ref().expect("seed mode");
    let mut conn = reference.stock.connection();
    let code: i64 = script
        .key(format!("{prefix}seed:stock:{}:{}", sale.activity, sale.sku))
        .key(format!("{prefix}seed:users:{}:{}", sale.activity, sale.sku))
        .arg(user.get())
        .invoke_async(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    Ok(match code {
        1 => {
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            let order_id = seckill_shared::domain::OrderId::parse(&format!("{}-{}-{n}-5eed", sale.activity, sale.sku))
                .map_err(|e| e.to_string())?;
            Deduction::Accepted {
                order_id,
                round: 1,
                stock_left: None,
                accepted_at: chrono::Utc::now().timestamp_millis(),
                slot: 0,
            }
        }
        0 => Deduction::SoldOut { available: 0 },
        2 => Deduction::AlreadyPurchased { order_id: None },
        _ => Deduction::SaleNotFound,
    })
}

async fn order(State(reference): State<Reference>, Json(request): Json<OrderRequest>) -> (StatusCode, Json<Value>) {
    let (Ok(sale), Ok(user)) = (SaleKey::from_raw(request.activity_id, request.sku_id), UserId::new(request.user_id))
    else {
        return (StatusCode::BAD_REQUEST, Json(json!({"code": "INVALID_REQUEST"})));
    };
    let deduction = match reference.seed {
        Some(_) => seed_deduct(&reference, sale, user).await,
        None => reference
            .stock
            .orders()
            .deduct(sale, user, 1, "ref00000", std::time::Duration::from_secs(10))
            .await
            .map_err(|e| e.to_string()),
    };
    match deduction {
        Ok(Deduction::Accepted { order_id, round, accepted_at, .. }) => {
            if let Some(publisher) = &reference.publisher {
                let record = OrderRecord::new(order_id.clone(), sale, user, accepted_at).in_round(round);
                if let outcome @ (PublishOutcome::NotPersisted(_) | PublishOutcome::Ambiguous(_)) =
                    publisher.publish(&record, Default::default(), seckill_edge::publish::Admission::Through).await
                {
                    return (
                        StatusCode::SERVICE_UNAVAILABLE,
                        Json(json!({"code": "TRY_AGAIN", "message": format!("{outcome:?}")})),
                    );
                }
            }
            (StatusCode::ACCEPTED, Json(json!({"code": "QUEUED", "orderId": order_id.as_str()})))
        }
        Ok(Deduction::SoldOut { .. }) => (StatusCode::GONE, Json(json!({"code": "SOLD_OUT"}))),
        Ok(other) => (StatusCode::CONFLICT, Json(json!({"code": format!("{other:?}")}))),
        Err(error) => {
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"code": "TRY_AGAIN", "message": error.to_string()})))
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = args.iter().find(|a| !a.starts_with("--")).cloned().unwrap_or_else(|| "127.0.0.1:8090".into());
    let env = |name: &str| std::env::var(name).ok();
    let redis = seckill_shared::config::RedisSettings {
        url: env("SECKILL_REDIS_URL").unwrap_or_else(|| "redis://127.0.0.1:6379/0".into()),
        key_prefix: env("SECKILL_KEY_PREFIX").unwrap_or_default(),
        ..Default::default()
    };
    let publisher = if args.iter().any(|a| a == "--publish") {
        let kafka = KafkaSettings {
            brokers: env("SECKILL_KAFKA_BROKERS").unwrap_or_else(|| KafkaSettings::default().brokers),
            topic_prefix: format!("{}reference.", env("SECKILL_TOPIC_PREFIX").unwrap_or_default()),
            ..Default::default()
        };
        let topics = seckill_shared::kafka::ensure_topics(&kafka).await?;
        Some(Publisher::new(&kafka, topics.orders)?)
    } else {
        None
    };
    let seed = args.iter().any(|a| a == "--seed").then(|| {
        let script = std::sync::Arc::new(redis::Script::new(include_str!("seed_seckill.lua")));
        (script, redis.key_prefix.clone(), std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0)))
    });
    let stock = Stock::connect(&redis).await?;
    let app = Router::new().route("/api/seckill/order", post(order)).with_state(Reference { stock, publisher, seed });
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    axum::serve(listener, app).await?;
    Ok(())
}
