//! The edge's HTTP surface: shared state, the router and its middleware.
//! Each submodule owns its routes.

mod admin;
mod auth;
mod error;
mod health;
mod order;

pub use error::ApiError;

use crate::limit::RateLimits;
use crate::publish::Publisher;
use crate::settings::Settings;
use crate::sold_out::SoldOutFlags;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::HeaderValue;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use seckill_shared::lock::LockClient;
use seckill_shared::stock::Stock;
use sqlx::PgPool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower_http::request_id::{MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer};

/// Everything a handler needs, behind one `Arc`: axum clones the state for
/// every request.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What the handlers share.
pub struct Shared {
    /// The edge's settings.
    pub settings: Arc<Settings>,
    /// Redis.
    pub stock: Stock,
    /// PostgreSQL (warm-up, status fall-back, reconciliation).
    pub db: PgPool,
    /// Kafka.
    pub publisher: Publisher,
    /// Rate limits.
    pub limits: Arc<RateLimits>,
    /// Local sold-out flags.
    pub sold_out: Arc<SoldOutFlags>,
    /// Locks for the lock deduction.
    pub locks: LockClient,
}

impl AppState {
    /// State from its parts.
    pub fn new(settings: Arc<Settings>, stock: Stock, db: PgPool, publisher: Publisher) -> Self {
        let limits = Arc::new(RateLimits::new(&settings.rate_limit));
        // Forget per-user limiter state of users who went quiet.
        let shrinking = Arc::downgrade(&limits);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(30));
            loop {
                tick.tick().await;
                match shrinking.upgrade() {
                    Some(limits) => limits.shrink(),
                    None => return,
                }
            }
        });
        Self(Arc::new(Shared {
            sold_out: Arc::new(SoldOutFlags::new(Duration::from_millis(settings.sold_out_flag_ms))),
            locks: LockClient::new(stock.connection()),
            limits,
            settings,
            stock,
            db,
            publisher,
        }))
    }
}

/// The whole edge router.
pub fn router(state: AppState) -> Router {
    // The body limit is enforced by our own extractor (413 with the
    // contract's body); axum's default limit must not answer first.
    Router::new()
        .merge(order::router())
        .merge(admin::router())
        .merge(health::router())
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn(observe))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(SequentialRequestId::new()))
        .with_state(state)
}

/// Request ids for requests that come without one: a random per-process
/// prefix and a counter (`1f3a9c2e-4d2`). Unique enough to follow a request
/// through the logs and the Kafka header, and costs no system call (a UUID v4
/// asks the kernel for randomness on every request).
#[derive(Clone)]
struct SequentialRequestId {
    prefix: u32,
    next: Arc<AtomicU64>,
}

impl SequentialRequestId {
    fn new() -> Self {
        Self { prefix: rand::random(), next: Arc::new(AtomicU64::new(1)) }
    }
}

impl MakeRequestId for SequentialRequestId {
    fn make_request_id<B>(&mut self, _request: &axum::http::Request<B>) -> Option<RequestId> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        HeaderValue::from_str(&format!("{:08x}-{n:x}", self.prefix)).ok().map(RequestId::new)
    }
}

/// Counts every answer by code and logs each 5xx once, with its detail.
async fn observe(request: Request, next: Next) -> Response {
    let started = Instant::now();
    // Cheap clones (shared buffers): only a failed request needs them.
    let method = request.method().clone();
    let uri = request.uri().clone();
    let request_id = request.headers().get("x-request-id").cloned();
    let response = next.run(request).await;
    let status = response.status();
    if let Some(detail) = response.extensions().get::<error::ErrorDetail>() {
        let request_id = request_id.as_ref().and_then(|v| v.to_str().ok()).unwrap_or("");
        tracing::error!(%method, path = uri.path(), request_id, status = status.as_u16(), error = %detail.0, "request failed");
    }
    metrics::histogram!("seckill_edge_request_seconds").record(started.elapsed().as_secs_f64());
    response
}
