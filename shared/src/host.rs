//! The skeleton both consuming services (order service, compensator) run
//! in: a health and metrics port served at once, dependencies connected with
//! retries while `/readyz` says 503, the service's tasks started on one
//! tracker, and a bounded wait for them at shutdown, each exit logged.

use crate::config::{DbSettings, KafkaSettings, RedisSettings};
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
    use backon::BackoffBuilder;
    let max = Duration::from_millis(retry.max_ms);
    let mut delays = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(retry.initial_ms))
        .with_max_delay(max)
        .with_jitter()
        .without_max_times()
        .build();
    loop {
        match attempt().await {
            Ok(value) => return Some(value),
            Err(error) => {
                let delay = delays.next().unwrap_or(max);
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
                    Err("connecting to redis, postgresql and kafka".to_owned())
                }
            })
        })
    }
}

/// The connections a consuming service works with.
#[derive(Clone)]
pub struct Connections {
    /// Redis.
    pub stock: Stock,
    /// PostgreSQL, migrated.
    pub db: sqlx::PgPool,
    /// Topic names (the topics exist).
    pub topics: Topics,
}

/// What a consuming service needs from its settings to be hosted.
#[derive(Debug, Clone)]
pub struct HostSettings {
    /// Health and metrics listener (port 0 picks a free one, for tests).
    pub metrics_addr: String,
    /// Redis.
    pub redis: RedisSettings,
    /// PostgreSQL.
    pub database: DbSettings,
    /// Kafka.
    pub kafka: KafkaSettings,
    /// Delays while a dependency does not answer.
    pub retry: RetrySettings,
    /// How long tasks may take to stop.
    pub shutdown_timeout: Duration,
}

/// A consuming service's host: its health port bound, its dependencies
/// known.
pub struct Host {
    name: &'static str,
    health: tokio::net::TcpListener,
    settings: HostSettings,
}

impl Host {
    /// Binds the health port and installs the metrics recorder before
    /// anything records.
    pub async fn bind(name: &'static str, settings: HostSettings) -> anyhow::Result<Self> {
        use anyhow::Context;
        crate::telemetry::metrics_handle();
        let health = tokio::net::TcpListener::bind(&settings.metrics_addr)
            .await
            .with_context(|| format!("binding {}", settings.metrics_addr))?;
        Ok(Self { name, health, settings })
    }

    /// The health and metrics address.
    pub fn health_addr(&self) -> SocketAddr {
        self.health.local_addr().expect("a bound listener has an address")
    }

    /// Serves health at once, connects (retrying; `/readyz` says 503
    /// meanwhile), lets `start` spawn the service's tasks, then waits for
    /// `shutdown` and for every task to finish (bounded).
    pub async fn run(
        self,
        shutdown: CancellationToken,
        start: impl FnOnce(Connections, &Background) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let Self { name, health, settings } = self;
        let background = Background::new(shutdown.clone());
        let ready = ReadyFlag::default();
        background.spawn("health server", crate::telemetry::serve_health(health, ready.check(), shutdown.clone()));
        if let Some(connections) = connect(&settings, &shutdown).await? {
            ready.set();
            start(connections, &background)?;
            tracing::info!(service = name, "running");
        }
        shutdown.cancelled().await;
        if !background.wait(settings.shutdown_timeout).await {
            tracing::warn!(service = name, timeout = ?settings.shutdown_timeout, "tasks did not stop in time");
        }
        tracing::info!(service = name, "stopped");
        Ok(())
    }
}

/// Redis, PostgreSQL (migrated) and Kafka (topics created), each retried
/// until it answers; `None` when `shutdown` came first.
async fn connect(settings: &HostSettings, shutdown: &CancellationToken) -> anyhow::Result<Option<Connections>> {
    let retry = settings.retry;
    let Some(stock) = retry_until(retry, "connecting to redis", shutdown, || Stock::connect(&settings.redis)).await else {
        return Ok(None);
    };
    let db = crate::db::connect_lazy(&settings.database)?;
    if retry_until(retry, "migrating the database", shutdown, || crate::db::migrate(&db)).await.is_none() {
        return Ok(None);
    }
    let Some(topics) =
        retry_until(retry, "creating topics", shutdown, || crate::kafka::ensure_topics(&settings.kafka)).await
    else {
        return Ok(None);
    };
    Ok(Some(Connections { stock, db, topics }))
}
