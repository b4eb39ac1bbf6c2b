//! `/healthz` (the process is alive), `/readyz` (Redis and Kafka answer) and
//! `/metrics` (Prometheus text).

use super::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use std::time::Duration;

/// Health routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(|| async { seckill_shared::telemetry::metrics_handle().render() }))
}

async fn ready(State(state): State<AppState>) -> (StatusCode, String) {
    let mut conn = state.stock.connection();
    let redis = tokio::time::timeout(Duration::from_secs(2), redis::cmd("PING").query_async::<String>(&mut conn)).await;
    if !matches!(redis, Ok(Ok(_))) {
        return (StatusCode::SERVICE_UNAVAILABLE, "redis unreachable".into());
    }
    let publisher = state.publisher.clone();
    let kafka = tokio::task::spawn_blocking(move || publisher.ping(Duration::from_secs(2))).await;
    match kafka {
        Ok(Ok(())) => (StatusCode::OK, "ready".into()),
        Ok(Err(error)) => (StatusCode::SERVICE_UNAVAILABLE, format!("kafka unreachable: {error}")),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "kafka check failed".into()),
    }
}
