//! `/healthz` (the process is alive), `/readyz` (Redis and Kafka answer, as
//! a background check found it at most a second or so ago) and `/metrics`
//! (Prometheus text).

use super::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use parking_lot::RwLock;
use std::convert::Infallible;

use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Health routes: the probes and metrics (the buyers' address).
pub fn router() -> Router<AppState> {
    probes().route("/metrics", get(metrics))
}

/// The probes alone (the operators' address too).
pub fn probes() -> Router<AppState> {
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
/// found by [`watch_readiness`], never computed for the caller: a flood of
/// probes costs the brokers nothing.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "ready", content_type = "text/plain", body = String),
        (status = 503, description = "What is not reachable, in a word or two (the cause is logged, never answered); `starting` before the first check", content_type = "text/plain", body = String),
    )
)]
pub(super) async fn ready(State(state): State<AppState>) -> (StatusCode, String) {
    state.readiness.latest()
}

/// The last readiness found.
pub struct Readiness {
    latest: RwLock<(StatusCode, String)>,
}

impl Default for Readiness {
    fn default() -> Self {
        Self { latest: RwLock::new((StatusCode::SERVICE_UNAVAILABLE, "starting".into())) }
    }
}

impl Readiness {
    fn latest(&self) -> (StatusCode, String) {
        self.latest.read().clone()
    }

    fn set(&self, found: (StatusCode, String)) {
        *self.latest.write() = found;
    }
}

/// How long after one readiness check the next one starts.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Checks readiness until shutdown, one check at a time, the next a second
/// after the last ended: at most one round trip to the brokers a second
/// whatever asks `/readyz`, and none of the buyers' capacity.
pub(super) async fn watch_readiness(state: AppState, shutdown: CancellationToken) -> Result<(), Infallible> {
    seckill_shared::ops::shutdown::every("readiness", CHECK_EVERY, shutdown, || async {
        let found = readiness(&state).await;
        // For alerting on an edge that stays unready (k8s probes it every 2 s).
        metrics::gauge!("seckill_edge_ready").set(if found.0 == StatusCode::OK { 1.0 } else { 0.0 });
        metrics::counter!("seckill_edge_readiness_checks_total").increment(1);
        state.readiness.set(found);
        Ok::<(), Infallible>(())
    })
    .await
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
