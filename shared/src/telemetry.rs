//! Logging (`tracing`) and metrics (Prometheus), plus the small health and
//! metrics HTTP server the order service and the compensator expose.

use crate::config::TelemetrySettings;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

/// Installs the tracing subscriber. Call once, from `main`.
pub fn init_tracing(settings: &TelemetrySettings) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(settings.filter.as_deref().unwrap_or("info")))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(true);
    // A second init (tests starting several services) keeps the first one.
    if settings.json {
        let _ = builder.json().try_init();
    } else {
        let _ = builder.try_init();
    }
}

/// The process-wide Prometheus recorder, installed on first use so that
/// several services in one test process share it.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(&[
                    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                ])
                .expect("static buckets are valid")
                .build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder was installed first; then our
            // handle renders nothing, which the metrics test would show.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// Why a service is not ready: what it is waiting for, in words.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotReady(pub &'static str);

/// A readiness probe: resolves to `Ok` when every dependency answers.
pub type ReadinessCheck =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), NotReady>> + Send>> + Send + Sync>;

/// `/healthz` (alive), `/readyz` (dependencies answer) and `/metrics`.
pub fn health_router(ready: ReadinessCheck) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    match ready().await {
                        Ok(()) => (StatusCode::OK, "ready".to_owned()).into_response(),
                        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why.to_string()).into_response(),
                    }
                }
            }),
        )
        .route("/metrics", get(|| async { metrics_handle().render() }))
}

/// Serves [`health_router`] on a bound listener until `shutdown`.
pub async fn serve_health(
    listener: tokio::net::TcpListener,
    ready: ReadinessCheck,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, health_router(ready))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
