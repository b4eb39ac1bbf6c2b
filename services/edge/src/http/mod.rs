//! The edge's HTTP surface: shared state and the two listeners' routers.
//! Its rooms are by audience, each a folder with its own router:
//! [`buyers`] and the payment [`provider`] on `http_addr`, the
//! [`operators`] on `admin_addr`. Beside them: [`observe`] wraps every
//! request (ids, span, metrics, the one log line of a failure);
//! [`extract`] is the one way a JSON body is read; [`auth`] checks the
//! admin token, sessions and user tokens; [`health`] and [`openapi`] are
//! served on the buyers' address.

mod auth;
pub mod bodies;
pub mod buyers;
mod error;
mod extract;
mod health;
mod observe;
pub mod openapi;
pub mod operators;
mod pages;
pub mod provider;

pub use error::ApiError;

use crate::limit::RateLimits;
use crate::publish::Publisher;
use crate::settings::Settings;
use crate::sold_out::SoldOutFlags;
use axum::error_handling::HandleErrorLayer;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::BoxError;
use axum::Router;
use seckill_shared::ops::lock::LockClient;
use seckill_shared::ops::shutdown::Background;
use seckill_shared::stock::Stock;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::ServiceBuilder;

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
    pub settings: Arc<Settings>,
    pub stock: Stock,
    /// PostgreSQL: pay, cancel, status fall-backs, the warm-up resumer.
    pub db: PgPool,
    /// PostgreSQL for the operators' console: a pool of its own.
    pub console_db: PgPool,
    /// PostgreSQL for buyers' status reads: a pool of their own.
    pub status_db: PgPool,
    /// Per-client limits and remembered misses of status reads.
    pub status_reads: Arc<crate::status_reads::StatusReads>,
    pub publisher: Publisher,
    pub limits: Arc<RateLimits>,
    pub sold_out: Arc<SoldOutFlags>,
    /// Locks for the lock deduction and the warm-up.
    pub locks: LockClient,
    /// How requests name their user; `None`: no identity configured.
    pub identity: Option<Arc<crate::identity::Identity>>,
    /// The dashboard's browser sessions.
    pub sessions: operators::session::Sessions,
    /// Failed admin authentications, per client.
    pub admin_throttle: Arc<operators::admin_guard::AdminThrottle>,
    /// The proxies whose word about a request's client is taken.
    pub proxies: Arc<crate::client_addr::TrustedProxies>,
    /// What `/readyz` answers, as the background check last found it.
    pub readiness: health::Readiness,
    /// The dashboard's figures.
    pub dashboard: Arc<crate::dashboard::Dashboard>,
    /// Deductions, batched per sale's bucket.
    pub batcher: Arc<crate::batch::Batcher>,
    /// Orders being placed, each a task of its own: a client that hangs up
    /// drops its request, not its order (waited for at shutdown).
    pub orders: tokio_util::task::TaskTracker,
    /// The sales' buckets, and units borrowed between them.
    pub homes: crate::home::Homes,
    /// Signs and checks admission tokens and join challenges.
    pub signer: crate::admission::Signer,
}

impl AppState {
    /// State from its parts; the limiter's clean-up runs on `background`.
    pub fn new(
        settings: Arc<Settings>,
        stock: Stock,
        db: PgPool,
        publisher: Publisher,
        background: &Background,
    ) -> anyhow::Result<Self> {
        let identity = crate::identity::Identity::from_settings(&settings)?.map(Arc::new);
        if let Some(crate::identity::Identity::Keys(keys)) = identity.as_deref() {
            let every = Duration::from_secs(settings.user_jwks_refresh_secs.max(1));
            background.spawn("JWKS refresh", keys.clone().refresh_every(every, background.shutdown().clone()));
        }
        if identity.is_none() && settings.auth.allow_anonymous {
            tracing::warn!(
                "auth.allow_anonymous: with no user identity, anyone may cancel any order and read orders by user id"
            );
        }
        let limits = Arc::new(RateLimits::new(&settings.rate_limit));
        let status_db = seckill_shared::db::connect_lazy(&seckill_shared::config::DbSettings {
            max_connections: settings.status_reads.pool_connections,
            ..settings.servers.database.clone()
        })?;
        let console_db = seckill_shared::db::connect_lazy(&seckill_shared::config::DbSettings {
            max_connections: settings.console.pool_connections,
            ..settings.servers.database.clone()
        })?;
        let status_reads = Arc::new(crate::status_reads::StatusReads::new(&settings.status_reads));
        let admin_throttle = Arc::new(operators::admin_guard::AdminThrottle::new(&settings.admin_auth));
        let proxies = Arc::new(crate::client_addr::TrustedProxies::parse(
            &settings.auth.trusted_proxies,
            settings.auth.client_address_header,
        )?);
        let forgetting = (limits.clone(), status_reads.clone(), admin_throttle.clone());
        background.spawn("limiter clean-up", forget_quiet_clients(forgetting, background.shutdown().clone()));
        let dashboard =
            crate::dashboard::Dashboard::new(stock.clone(), console_db.clone(), settings.servers.kafka.clone());
        let state = Self(Arc::new(Shared {
            batcher: crate::batch::Batcher::new(
                stock.clone(),
                crate::batch::BatchLimits {
                    max: settings.deduct_batch_max,
                    queue_max: settings.deduct_queue_max,
                    resolve: Duration::from_millis(settings.deduct_resolve_ms),
                },
                background.clone(),
            ),
            homes: crate::home::Homes::new(stock.clone()),
            orders: tokio_util::task::TaskTracker::new(),
            signer: crate::admission::Signer::new(settings.admission.signing_key.as_ref().map(|k| k.expose())),
            sessions: operators::session::Sessions::new(settings.behind_tls),
            console_db,
            status_reads: status_reads.clone(),
            status_db,
            admin_throttle,
            proxies,
            readiness: health::Readiness::default(),
            dashboard,
            sold_out: Arc::new(SoldOutFlags::new(Duration::from_millis(settings.sold_out_flag_ms))),
            locks: LockClient::new(stock.connection(), background.clone()),
            limits,
            identity,
            settings,
            stock,
            db,
            publisher,
        }));
        background.spawn("readiness", health::watch_readiness(state.clone(), background.shutdown().clone()));
        let tick = Duration::from_millis(state.settings.admission.tick_ms);
        let grace = state.publisher.deadline();
        let passes =
            crate::admission::ticker::admit_every(state.stock.clone(), tick, grace, background.shutdown().clone());
        background.spawn("admission passes", passes);
        let resumer = crate::warmup_resume::run(state.clone(), background.clone(), background.shutdown().clone());
        background.spawn("warm-up resumer", resumer);
        let draws = crate::draw::run(state.clone(), background.clone(), background.shutdown().clone());
        background.spawn("draws", draws);
        Ok(state)
    }

    /// The bound on one call to PostgreSQL (`database.call_deadline_ms`):
    /// a server that never answers is answered 503, not waited on.
    pub fn db_deadline(&self) -> Duration {
        self.settings.servers.database.call_deadline()
    }
}

/// The limiters that keep a state per user or client.
type Forgetting = (Arc<RateLimits>, Arc<crate::status_reads::StatusReads>, Arc<operators::admin_guard::AdminThrottle>);

/// Forgets limiter state of users and clients who went quiet, blocks that
/// ended and misses remembered past their time, until shutdown.
async fn forget_quiet_clients(
    (limits, status_reads, admin_throttle): Forgetting,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), std::convert::Infallible> {
    seckill_shared::ops::shutdown::every("limiter clean-up", Duration::from_secs(30), shutdown, || async {
        limits.shrink();
        status_reads.shrink();
        admin_throttle.shrink();
        Ok(())
    })
    .await
}

/// The router of `http_addr`: the buyers' and the provider's routes within
/// `connections.max_in_flight`, the operators' too (within their own
/// budget) when the console shares the address; the probes, metrics and
/// the API document outside any budget, so an edge at its limit is still
/// seen alive and ready.
pub fn public_router(state: AppState) -> Router {
    let rooms = within(
        buyers::router(&state).merge(provider::router()),
        state.settings.connections.max_in_flight,
        "connections.max_in_flight",
    );
    let rooms = if state.settings.console_shares_address() { rooms.merge(console(&state)) } else { rooms };
    let method_not_allowed = || async { ApiError::MethodNotAllowed };
    finish(
        rooms.merge(health::router().method_not_allowed_fallback(method_not_allowed)).merge(openapi::router()),
        state,
    )
}

/// The router of `admin_addr`: the operators' routes and the probes.
pub fn console_router(state: AppState) -> Router {
    let method_not_allowed = || async { ApiError::MethodNotAllowed };
    finish(console(&state).merge(health::probes().method_not_allowed_fallback(method_not_allowed)), state)
}

/// The operators' routes within their own budget.
fn console(state: &AppState) -> Router<AppState> {
    within(operators::router(state), state.settings.console.max_in_flight, "console.max_in_flight")
}

/// `routes`, with requests beyond `max` answered 503 at once, nothing done.
fn within(routes: Router<AppState>, max: usize, setting: &'static str) -> Router<AppState> {
    routes.layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(move |_: BoxError| async move {
                ApiError::TryAgain(anyhow::anyhow!("the edge is at {setting}"))
            }))
            .load_shed()
            .layer(GlobalConcurrencyLimitLayer::new(max)),
    )
}

/// Every path or method nothing serves answers the contract's JSON error;
/// the body limit is enforced by our own extractor (413 with the
/// contract's body), so axum's default limit must not answer first.
fn finish(routes: Router<AppState>, state: AppState) -> Router {
    routes
        .fallback(|| async { ApiError::NotFound })
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn(observe::observe))
        .with_state(state)
}
