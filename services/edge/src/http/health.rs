//! `/healthz` (the process is alive), `/readyz` (Redis and Kafka answer, as
//! a background check found it at most a second or so ago:
//! [`super::readiness`]) and `/metrics` (Prometheus text).

use super::readiness::Readiness;
use super::state::Edge;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use std::sync::Arc;

/// Health routes: the probes and metrics (the buyers' address).
pub fn router() -> Router<Edge> {
    probes().route("/metrics", get(metrics))
}

/// The probes alone (the operators' address too).
pub fn probes() -> Router<Edge> {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(ready))
}

/// Liveness: the process answers (no dependency is checked).
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "ok", content_type = "text/plain", body = String)))]
pub(super) async fn healthz() -> &'static str {
    "ok"
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String)))]
pub(super) async fn metrics() -> String {
    seckill_shared::ops::telemetry::metrics_handle().render()
}

/// Readiness: Redis and Kafka answer, with a usable producer — as last
/// found by the check in the background, never computed for the caller: a
/// flood of probes costs the brokers nothing.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "ready", content_type = "text/plain", body = String),
        (status = 503, description = "What is not reachable, in a word or two (the cause is logged, never answered); `starting` before the first check", content_type = "text/plain", body = String),
    )
)]
pub(super) async fn ready(State(readiness): State<Arc<Readiness>>) -> (StatusCode, String) {
    readiness.latest()
}
