//! The skeleton both consuming services (order service, compensator) run
//! in ([`Service`]): a health and metrics port served at once, dependencies connected with
//! retries while `/readyz` says 503, the service's tasks started on one
//! tracker, and a bounded wait for them at shutdown, each exit logged.

use crate::config::Servers;
use crate::kafka::Topics;
use crate::shutdown::Background;
use crate::stock::Stock;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Exponential backoff with jitter while a dependency fails.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetrySettings {
    /// First delay.
    pub initial_ms: u64,
    /// Longest delay.
    pub max_ms: u64,
}

impl Default for RetrySettings {
    fn default() -> Self {
        Self { initial_ms: 100, max_ms: 5_000 }
    }
}

impl RetrySettings {
    /// The delays between attempts: exponential with jitter, endless.
    pub fn delays(&self) -> impl Iterator<Item = Duration> {
        use backon::BackoffBuilder;
        let max = Duration::from_millis(self.max_ms);
        backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(self.initial_ms))
            .with_max_delay(max)
            .with_jitter()
            .without_max_times()
            .build()
            .chain(std::iter::repeat(max))
    }
}

/// Retries `attempt` with exponential backoff and jitter until it succeeds,
/// or `shutdown` is cancelled (then `None`: the caller abandons its work,
/// having committed nothing, so nothing is lost).
pub async fn retry_until<T, E, F>(
    retry: RetrySettings,
    what: &str,
    shutdown: &CancellationToken,
    mut attempt: impl FnMut() -> F,
) -> Option<T>
where
    E: std::fmt::Display,
    F: std::future::Future<Output = Result<T, E>>,
{
    let mut delays = retry.delays();
    loop {
        match attempt().await {
            Ok(value) => return Some(value),
            Err(error) => {
                let delay = delays.next().unwrap_or_default();
                tracing::warn!(%error, retry_in = ?delay, "{what} failed; retrying");
                metrics::counter!("seckill_retries_total", "what" => what.to_owned()).increment(1);
                tokio::select! {
                    // Stop retrying.
                    _ = shutdown.cancelled() => return None,
                    // Try again.
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

/// Set once a service's dependencies answered; `/readyz` reports it.
#[derive(Clone, Default)]
pub struct ReadyFlag(Arc<AtomicBool>);

impl ReadyFlag {
    /// Marks the service ready.
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// A readiness check for [`crate::telemetry::serve_health`].
    pub fn check(&self) -> crate::telemetry::ReadinessCheck {
        let flag = self.0.clone();
        Arc::new(move || {
            let ready = flag.load(Ordering::Relaxed);
            Box::pin(async move {
                if ready {
                    Ok(())
                } else {
                    Err(crate::telemetry::NotReady("connecting to redis, postgresql and kafka"))
                }
            })
        })
    }
}

/// The connections a consuming service works with.
#[derive(Clone)]
pub struct Connections {
    pub stock: Stock,
    /// PostgreSQL, migrated.
    pub db: sqlx::PgPool,
    /// Topic names (the topics exist).
    pub topics: Topics,
}

/// What both consuming services' settings have besides their servers
/// (flattened into them: the keys stay top-level).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct ServiceSettings {
    /// Health and metrics listener (port 0 picks a free one, for tests).
    pub metrics_addr: String,
    /// Delays while PostgreSQL, Redis or Kafka fail.
    pub retry: RetrySettings,
    /// How long the tasks may take to finish their work at shutdown.
    pub shutdown_timeout_ms: u64,
    /// Attempts (with backoff) at a record that fails for a reason trying
    /// again cannot cure, before it is parked so the partition moves on. A
    /// dependency that is down is waited for instead, however long.
    pub park_after_attempts: u32,
}

impl ServiceSettings {
    /// Defaults, listening on `metrics_addr`.
    pub fn listening_on(metrics_addr: &str) -> Self {
        Self {
            metrics_addr: metrics_addr.to_owned(),
            retry: RetrySettings::default(),
            shutdown_timeout_ms: 30_000,
            park_after_attempts: 5,
        }
    }
}

impl Default for ServiceSettings {
    fn default() -> Self {
        Self::listening_on("127.0.0.1:0")
    }
}

/// A consuming service as the host runs it: its settings say where it
/// listens and what it connects to, and it starts its own tasks.
pub trait Hosted: Send + Sync + Sized + 'static {
    /// Its name in logs.
    const NAME: &'static str;
    /// Its listener, retries and shutdown bound, and the servers it
    /// connects to.
    fn hosting(&self) -> (&ServiceSettings, &Servers);
    /// Spawns its tasks on `background`, once its dependencies answer.
    fn start(settings: Arc<Self>, connections: Connections, background: &Background) -> anyhow::Result<()>;
}

/// A built consuming service, its health port bound.
pub struct Service<S> {
    settings: Arc<S>,
    health: tokio::net::TcpListener,
}

impl<S: Hosted> Service<S> {
    /// Binds the health port (port 0 picks a free one, for tests) and
    /// installs the metrics recorder before anything records.
    pub async fn build(settings: S) -> anyhow::Result<Self> {
        use anyhow::Context;
        crate::telemetry::metrics_handle();
        let addr = &settings.hosting().0.metrics_addr;
        let health = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
        Ok(Self { settings: Arc::new(settings), health })
    }

    /// The health and metrics address.
    pub fn health_addr(&self) -> SocketAddr {
        self.health.local_addr().expect("a bound listener has an address")
    }

    /// Serves health at once, connects (retrying; `/readyz` says 503
    /// meanwhile), starts the service's tasks, then waits for `shutdown` and
    /// for every task to finish (bounded).
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let Self { settings, health } = self;
        let (service, servers) = settings.hosting();
        let background = Background::new(shutdown.clone());
        let ready = ReadyFlag::default();
        background.spawn("health server", crate::telemetry::serve_health(health, ready.check(), shutdown.clone()));
        if let Some(connections) = connect(servers, service.retry, &shutdown).await? {
            ready.set();
            S::start(settings.clone(), connections, &background)?;
            tracing::info!(service = S::NAME, "running");
        }
        shutdown.cancelled().await;
        let timeout = Duration::from_millis(service.shutdown_timeout_ms);
        if !background.wait(timeout).await {
            tracing::warn!(service = S::NAME, ?timeout, "tasks did not stop in time");
        }
        tracing::info!(service = S::NAME, "stopped");
        Ok(())
    }
}

/// Redis, PostgreSQL (migrated) and Kafka (topics created), each retried
/// until it answers; `None` when `shutdown` came first.
async fn connect(servers: &Servers, retry: RetrySettings, shutdown: &CancellationToken) -> anyhow::Result<Option<Connections>> {
    let Some(stock) = retry_until(retry, "connecting to redis", shutdown, || Stock::connect(&servers.redis)).await else {
        return Ok(None);
    };
    let db = crate::db::connect_lazy(&servers.database)?;
    if retry_until(retry, "migrating the database", shutdown, || crate::db::migrate(&db)).await.is_none() {
        return Ok(None);
    }
    let Some(topics) =
        retry_until(retry, "creating topics", shutdown, || crate::kafka::ensure_topics(&servers.kafka)).await
    else {
        return Ok(None);
    };
    Ok(Some(Connections { stock, db, topics }))
}
