//! The flash-sale edge: the HTTP front door (its contract:
//! docs/buyers-api.md; the route of an order through it: ARCHITECTURE.md).
//!
//! A request to buy goes through, in order: a strict body parse, optional
//! user auth, the global and per-user rate limits, the local sold-out flag,
//! one atomic Redis deduction, and a publish to Kafka whose delivery report
//! is awaited before answering. A publish that definitely failed is rolled
//! back in one Lua call; an ambiguous one is left to the reservation sweeper.

/// What `--help` says the service does.
pub const ABOUT: &str = "The flash-sale edge: the buyer's HTTP API (place an order, read its status), the admin API (warm a sale up, reconcile it), health and Prometheus metrics. Each order: rate limits, one atomic Redis deduction, a publish to Kafka acknowledged by every in-sync replica, a rollback when the publish definitely failed.";

pub mod admission;
pub mod batch;
pub mod client_addr;
pub mod dashboard;
pub mod draw;
pub mod error_codes;
pub mod home;
pub mod hot_metrics;
pub mod http;
pub mod identity;
pub mod jwks_fetch;
pub mod known_releases;
pub mod ledger;
pub mod limit;
pub mod lookup;
pub mod metrics;
pub mod order_answers;
pub mod publish;
pub mod serve;
pub mod settings;
pub mod signature;
pub mod sold_out;
pub mod status_reads;
pub mod warmup_resume;
pub mod write_deadline;

use anyhow::Context;
use client_addr::TrustedProxies;
use http::operators::{admin_guard::AdminThrottle, session::Sessions};
use http::readiness::{self, Readiness};
use http::state::{BodyLimits, Buyers, BuyersParts, Edge, Operators, OperatorsParts, Provider, ProviderParts, Users};
use limit::RateLimits;
use publish::Publisher;
use seckill_shared::config::DbSettings;
use seckill_shared::ops::host::Binary;
use seckill_shared::ops::lock::LockClient;
use seckill_shared::ops::shutdown::Background;
use seckill_shared::stock::Stock;
use settings::ConnectionSettings;
pub use settings::Settings;
use sold_out::SoldOutFlags;
use sqlx::PgPool;
use status_reads::StatusReads;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Connections the operators' console holds open at most (its deadlines
/// are the buyers').
const CONSOLE_MAX_CONNECTIONS: usize = 256;

/// A built edge: bound to its ports, connected, ready to serve.
pub struct Application {
    listener: tokio::net::TcpListener,
    /// The operators' listener (`admin_addr`); `None` when the console
    /// shares the buyers' address.
    console: Option<tokio::net::TcpListener>,
    /// Every audience's state (the routers').
    edge: Edge,
    /// The proxies whose word about a request's client is taken.
    proxies: Arc<TrustedProxies>,
    /// The edge's background tasks (lock watchdogs, limiter clean-up),
    /// stopped after the last request is answered.
    background: Background,
}

impl Application {
    /// Connects to Redis, Kafka and PostgreSQL and binds the HTTP port
    /// (port 0 picks a free one, for tests).
    pub async fn build(mut settings: Settings) -> anyhow::Result<Self> {
        settings.validate()?;
        settings.trim_secrets();
        // Install the metrics recorder and describe every metric before
        // anything records.
        seckill_shared::ops::catalogue::publish(metrics::ALL);
        let stock =
            seckill_shared::stock::Stock::connect(&settings.servers.redis).await.context("connecting to redis")?;
        let db =
            seckill_shared::db::connect_lazy(&settings.servers.database).context("configuring the database pool")?;
        // The hot path does not need PostgreSQL; a database that is down at
        // start only delays warm-ups and status fall-backs.
        if let Err(error) = seckill_shared::db::migrate(&db).await {
            tracing::warn!(%error, "could not apply migrations at start");
        }
        let topics = seckill_shared::kafka::Topics::new(&settings.servers.kafka);
        if settings.ensure_topics {
            if let Err(error) = seckill_shared::kafka::ensure_topics(&settings.servers.kafka).await {
                // Publishes answer 503 until Kafka is back; they never sell.
                tracing::warn!(%error, "could not ensure topics at start");
            }
        }
        let publisher =
            publish::Publisher::new(&settings.servers.kafka, topics.orders.clone()).context("creating the producer")?;
        let listener = tokio::net::TcpListener::bind(&settings.http_addr)
            .await
            .with_context(|| format!("binding {}", settings.http_addr))?;
        let console = if settings.console_shares_address() {
            None
        } else {
            let bound = tokio::net::TcpListener::bind(&settings.admin_addr).await;
            Some(bound.with_context(|| format!("binding admin_addr {}", settings.admin_addr))?)
        };
        let background = Background::new(CancellationToken::new());
        let settings = Arc::new(settings);
        let proxies =
            Arc::new(TrustedProxies::parse(&settings.auth.trusted_proxies, settings.auth.client_address_header)?);
        // The declared releases read once before the first request (a Redis
        // that does not answer leaves them unknown: every order asks).
        let releases = Arc::new(known_releases::Releases::new(stock.clone()));
        releases.refresh().await;
        let edge = assemble(settings, stock, db, (publisher, releases), &background)?;
        Ok(Self { listener, console, edge, proxies, background })
    }

    /// The edge's producer, for tests that inject its faults.
    #[cfg(feature = "fault-injection")]
    pub fn publisher(&self) -> publish::Publisher {
        self.edge.buyers.publisher.clone()
    }

    /// The address the edge listens on for buyers.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// The address of the operators' console (the buyers' when shared).
    pub fn console_addr(&self) -> SocketAddr {
        self.console.as_ref().map_or_else(|| self.local_addr(), |l| l.local_addr().expect("a bound listener"))
    }

    /// Serves until `shutdown` (see [`Binary::run`]).
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        Binary::run(self, shutdown).await
    }
}

impl Binary for Application {
    type Settings = Settings;
    const BINARY: &'static str = "seckill-edge";
    const ABOUT: &'static str = ABOUT;

    fn telemetry(settings: &Settings) -> &seckill_shared::config::TelemetrySettings {
        &settings.servers.telemetry
    }

    fn check(settings: &Settings) -> anyhow::Result<()> {
        settings.validate()?;
        seckill_shared::ops::host::check_servers(&settings.servers)
    }

    async fn build(settings: Settings) -> anyhow::Result<Self> {
        Application::build(settings).await
    }

    fn listening(&self) -> SocketAddr {
        self.local_addr()
    }

    /// Serves until `shutdown`, then finishes in-flight requests (their
    /// publishes complete or roll back), flushes the producer and stops the
    /// background tasks.
    async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let console_addr = self.console_addr();
        let Self { listener, console, edge, proxies, background } = self;
        let settings = edge.buyers.settings.clone();
        tracing::info!(
            addr = %listener.local_addr()?, console = %console_addr, deduction = ?settings.deduction,
            "edge listening"
        );
        let publisher = edge.buyers.publisher.clone();
        let timeout = Duration::from_millis(settings.shutdown_timeout_ms);
        let connections = settings.connections.clone();
        let orders = edge.buyers.orders.clone();
        let buyers = serve::serve(
            listener,
            http::public_router(edge.clone()),
            &connections,
            proxies.clone(),
            shutdown.clone(),
            timeout,
        );
        let console_connections = ConnectionSettings {
            max_connections: connections.max_connections.min(CONSOLE_MAX_CONNECTIONS),
            ..connections.clone()
        };
        let operators = async {
            if let Some(console) = console {
                let router = http::console_router(edge.clone());
                serve::serve(console, router, &console_connections, proxies, shutdown, timeout).await;
            }
        };
        tokio::join!(buyers, operators);
        drop(edge);
        // Orders whose clients left (or whose connections the drain ended)
        // finish before the producer is flushed.
        orders.close();
        if tokio::time::timeout(timeout, orders.wait()).await.is_err() {
            tracing::warn!(?timeout, "orders still being placed at the end of the shutdown timeout");
        }
        tokio::task::spawn_blocking(move || publisher.flush(timeout)).await.context("flushing the producer")?;
        background.shutdown().cancel();
        if !background.wait(timeout).await {
            tracing::warn!(?timeout, "background tasks did not stop in time");
        }
        tracing::info!("edge stopped");
        Ok(())
    }
}

/// The edge's parts, built once, each audience handed only its own (the
/// routers take them from [`Edge`]); the background jobs started on
/// `background`.
fn assemble(
    settings: Arc<Settings>,
    stock: Stock,
    db: PgPool,
    (publisher, releases): (Publisher, Arc<known_releases::Releases>),
    background: &Background,
) -> anyhow::Result<Edge> {
    let users = Users { identity: identity_of(&settings, background)?, settings: settings.clone() };
    let limits = Arc::new(RateLimits::new(&settings.rate_limit));
    let status_reads = Arc::new(StatusReads::new(&settings.status_reads));
    let admin_throttle = Arc::new(AdminThrottle::new(&settings.admin_auth));
    let forgetting = (limits.clone(), status_reads.clone(), admin_throttle.clone());
    background.spawn("limiter clean-up", forget_quiet_clients(forgetting, background.shutdown().clone()));
    let pool = |max_connections| {
        seckill_shared::db::connect_lazy(&DbSettings { max_connections, ..settings.servers.database.clone() })
    };
    let console_db = pool(settings.console.pool_connections)?;
    let sold_out = Arc::new(SoldOutFlags::new(Duration::from_millis(settings.sold_out_flag_ms)));
    let locks = LockClient::new(stock.connection(), background.clone());
    let homes = Arc::new(home::Homes::new(stock.clone()));
    background.spawn("releases refresh", releases.clone().refresh_every(background.shutdown().clone()));
    let limits_of_batches = batch::BatchLimits {
        max: settings.deduct_batch_max,
        queue_max: settings.deduct_queue_max,
        resolve: Duration::from_millis(settings.deduct_resolve_ms),
    };
    let buyers = Buyers(Arc::new(BuyersParts {
        batcher: batch::Batcher::new(stock.clone(), limits_of_batches, background.clone()),
        orders: tokio_util::task::TaskTracker::new(),
        signer: admission::Signer::new(settings.admission.signing_key.as_ref().map(|k| k.expose())),
        status_db: pool(settings.status_reads.pool_connections)?,
        status_reads,
        users: users.clone(),
        settings: settings.clone(),
        stock: stock.clone(),
        db: db.clone(),
        publisher: publisher.clone(),
        limits: limits.clone(),
        sold_out: sold_out.clone(),
        locks: locks.clone(),
        homes: homes.clone(),
        releases: releases.clone(),
    }));
    let provider =
        Provider(Arc::new(ProviderParts { settings: settings.clone(), stock: stock.clone(), db: db.clone() }));
    let operators = Operators(Arc::new(OperatorsParts {
        dashboard: dashboard::Dashboard::new(stock.clone(), console_db.clone(), settings.servers.kafka.clone()),
        sessions: Sessions::new(settings.behind_tls),
        admin_throttle,
        console_db,
        limits,
        users: users.clone(),
        settings: settings.clone(),
        stock: stock.clone(),
        locks: locks.clone(),
        sold_out: sold_out.clone(),
        homes: homes.clone(),
        releases,
    }));
    let readiness = Arc::new(Readiness::default());
    let resumer =
        warmup_resume::Resumer { settings: settings.clone(), stock: stock.clone(), db, locks, sold_out, homes };
    let checked = readiness::Checked { identity: users.identity, stock, publisher, settings };
    start_jobs(checked, readiness.clone(), resumer, background);
    let connections = &buyers.settings.connections;
    let body = BodyLimits {
        max_bytes: buyers.settings.body_limit_bytes,
        deadline: Duration::from_millis(connections.body_timeout_ms),
    };
    Ok(Edge { buyers, provider, operators, readiness, body })
}

/// How requests name their user (`None`: no identity configured); keys
/// fetched from a JWKS are refreshed on `background`.
fn identity_of(settings: &Settings, background: &Background) -> anyhow::Result<Option<Arc<identity::Identity>>> {
    let identity = identity::Identity::from_settings(settings)?.map(Arc::new);
    if let Some(identity::Identity::Keys(keys)) = identity.as_deref() {
        let every = Duration::from_secs(settings.user_jwks_refresh_secs.max(1));
        background.spawn("JWKS refresh", keys.clone().refresh_every(every, background.shutdown().clone()));
    }
    if identity.is_none() && settings.auth.allow_anonymous {
        tracing::warn!(
            "auth.allow_anonymous: with no user identity, anyone may cancel any order and read orders by user id"
        );
    }
    Ok(identity)
}

/// The edge's jobs apart from requests: the readiness check, the waiting
/// rooms' admission passes, the warm-up resumer and the draws.
fn start_jobs(
    checked: readiness::Checked,
    readiness: Arc<Readiness>,
    resumer: warmup_resume::Resumer,
    background: &Background,
) {
    let shutdown = background.shutdown().clone();
    let tick = Duration::from_millis(checked.settings.admission.tick_ms);
    let grace = checked.publisher.deadline();
    let passes = admission::ticker::admit_every(checked.stock.clone(), tick, grace, shutdown.clone());
    background.spawn("admission passes", passes);
    let draws = Arc::new(draw::Draws::new(resumer.settings.clone(), resumer.stock.clone(), resumer.db.clone()));
    background.spawn("draws", draws.run(resumer.db.clone(), background.clone(), shutdown.clone()));
    background.spawn("warm-up resumer", warmup_resume::run(resumer, background.clone(), shutdown.clone()));
    background.spawn("readiness", readiness::watch(readiness, checked, shutdown));
}

/// The limiters that keep a state per user or client.
type Forgetting = (Arc<RateLimits>, Arc<StatusReads>, Arc<AdminThrottle>);

/// Forgets limiter state of users and clients who went quiet, blocks that
/// ended and misses remembered past their time, until shutdown.
async fn forget_quiet_clients(
    (limits, status_reads, admin_throttle): Forgetting,
    shutdown: CancellationToken,
) -> Result<(), std::convert::Infallible> {
    seckill_shared::ops::shutdown::every("limiter clean-up", Duration::from_secs(30), shutdown, || async {
        limits.shrink();
        status_reads.shrink();
        admin_throttle.shrink();
        Ok(())
    })
    .await
}
