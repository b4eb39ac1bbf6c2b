//! `/healthz` (the process is alive), `/readyz` (Redis and Kafka answer) and
//! `/metrics` (Prometheus text).

use super::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

/// Health routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(|| async { seckill_shared::telemetry::metrics_handle().render() }))
}

async fn ready(State(state): State<AppState>) -> (StatusCode, String) {
    if let Err(error) = state.stock.connection().ping().await {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("redis unreachable: {error}"));
    }
    let publisher = state.publisher.clone();
    let timeout = state.settings.servers.kafka.admin_timeout();
    let kafka = tokio::task::spawn_blocking(move || publisher.ping(timeout)).await;
    match kafka {
        Ok(Ok(())) => (StatusCode::OK, "ready".into()),
        Ok(Err(error)) => (StatusCode::SERVICE_UNAVAILABLE, format!("kafka unreachable: {error}")),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "kafka check failed".into()),
    }
}
