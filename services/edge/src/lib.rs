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
pub mod home;
pub mod hot_metrics;
pub mod http;
pub mod identity;
pub mod jwks_fetch;
pub mod ledger;
pub mod limit;
pub mod lookup;
pub mod metrics;
pub mod publish;
pub mod serve;
pub mod settings;
pub mod signature;
pub mod sold_out;
pub mod status_reads;
pub mod warmup_resume;
pub mod write_deadline;

use anyhow::Context;
use http::AppState;
use seckill_shared::ops::host::Binary;
use seckill_shared::ops::shutdown::Background;
use settings::ConnectionSettings;
pub use settings::Settings;
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
    state: AppState,
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
        let state = AppState::new(Arc::new(settings), stock, db, publisher, &background)?;
        Ok(Self { listener, console, state, background })
    }

    /// The edge's producer, for tests that inject its faults.
    #[cfg(feature = "fault-injection")]
    pub fn publisher(&self) -> publish::Publisher {
        self.state.publisher.clone()
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
        let Self { listener, console, state, background } = self;
        tracing::info!(
            addr = %listener.local_addr()?, console = %console_addr, deduction = ?state.settings.deduction,
            "edge listening"
        );
        let publisher = state.publisher.clone();
        let timeout = Duration::from_millis(state.settings.shutdown_timeout_ms);
        let connections = state.settings.connections.clone();
        let proxies = state.proxies.clone();
        let orders = state.orders.clone();
        let buyers = serve::serve(
            listener,
            http::public_router(state.clone()),
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
                let router = http::console_router(state.clone());
                serve::serve(console, router, &console_connections, proxies, shutdown, timeout).await;
            }
        };
        tokio::join!(buyers, operators);
        drop(state);
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
