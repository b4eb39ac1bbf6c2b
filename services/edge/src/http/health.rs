//! `/healthz` (the process is alive), `/readyz` (Redis and Kafka answer) and
//! `/metrics` (Prometheus text).

use super::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

/// Health routes.
pub fn router() -> Router<AppState> {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(ready)).route("/metrics", get(metrics))
}

/// Liveness: the process answers (no dependency is checked).
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "ok", content_type = "text/plain", body = String)))]
pub(super) async fn healthz() -> &'static str {
    "ok"
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String)))]
pub(super) async fn metrics() -> String {
    seckill_shared::telemetry::metrics_handle().render()
}

/// Readiness: Redis and Kafka answer, with a usable producer.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "ready", content_type = "text/plain", body = String),
        (status = 503, description = "What is not reachable, in a word or two (the cause is logged, never answered)", content_type = "text/plain", body = String),
    )
)]
pub(super) async fn ready(State(state): State<AppState>) -> (StatusCode, String) {
    let (status, why) = readiness(&state).await;
    // For alerting on an edge that stays unready (k8s probes it every 2 s).
    metrics::gauge!("seckill_edge_ready").set(if status == StatusCode::OK { 1.0 } else { 0.0 });
    (status, why)
}

/// What is not reachable; the cause goes to the log only (the probe is
/// open to anyone who reaches the port, and an error names hosts, ports and
/// versions).
async fn readiness(state: &AppState) -> (StatusCode, String) {
    if let Some(crate::identity::Identity::Keys(keys)) = state.identity.as_deref() {
        if !keys.loaded() {
            return (StatusCode::SERVICE_UNAVAILABLE, "user keys not loaded".into());
        }
    }
    if let Err(error) = state.stock.connection().ping().await {
        tracing::warn!(%error, "not ready: redis unreachable");
        return (StatusCode::SERVICE_UNAVAILABLE, "redis unreachable".into());
    }
    let publisher = state.publisher.clone();
    let timeout = state.settings.servers.kafka.admin_timeout();
    let kafka = tokio::task::spawn_blocking(move || publisher.ping(timeout)).await;
    match kafka {
        Ok(Ok(())) if state.identity.is_none() && state.settings.auth.allow_anonymous => {
            (StatusCode::OK, "ready (auth.allow_anonymous: no user identity)".into())
        }
        Ok(Ok(())) => (StatusCode::OK, "ready".into()),
        Ok(Err(error)) => {
            tracing::warn!(%error, "not ready");
            (StatusCode::SERVICE_UNAVAILABLE, error.word().into())
        }
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "kafka check failed".into()),
    }
}
