//! Long-running tasks: retrying with backoff until a dependency answers,
//! reporting how each task ended, and the readiness flag behind `/readyz`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Exponential backoff with jitter between `initial` and `max`.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// First delay.
    pub initial: Duration,
    /// Longest delay.
    pub max: Duration,
}

/// Retries `attempt` with exponential backoff and jitter until it succeeds,
/// or `shutdown` is cancelled (then `None`: the caller abandons its work,
/// having committed nothing, so nothing is lost).
pub async fn retry_until<T, E, F>(
    backoff: Backoff,
    what: &str,
    shutdown: &CancellationToken,
    mut attempt: impl FnMut() -> F,
) -> Option<T>
where
    E: std::fmt::Display,
    F: std::future::Future<Output = Result<T, E>>,
{
    use backon::BackoffBuilder;
    let mut delays = backon::ExponentialBuilder::default()
        .with_min_delay(backoff.initial)
        .with_max_delay(backoff.max)
        .with_jitter()
        .without_max_times()
        .build();
    loop {
        match attempt().await {
            Ok(value) => return Some(value),
            Err(error) => {
                let delay = delays.next().unwrap_or(backoff.max);
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

/// Logs how a long-running task ended: a task that ends silently is a bug.
pub async fn report_exit<E: std::fmt::Display>(name: &'static str, task: impl std::future::Future<Output = Result<(), E>>) {
    match task.await {
        Ok(()) => tracing::info!(task = name, "task finished"),
        Err(error) => tracing::error!(task = name, %error, "task failed"),
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

/// The connections a consuming service needs, each retried until it
/// answers: Redis, PostgreSQL (migrated) and Kafka (topics created).
#[derive(Clone)]
pub struct Connections {
    /// Redis.
    pub stock: crate::stock::Stock,
    /// PostgreSQL.
    pub db: sqlx::PgPool,
    /// Topic names.
    pub topics: crate::kafka::Topics,
}

impl Connections {
    /// Connects; `None` when `shutdown` came first.
    pub async fn establish(
        redis: &crate::config::RedisSettings,
        database: &crate::config::DbSettings,
        kafka: &crate::config::KafkaSettings,
        backoff: Backoff,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Option<Self>> {
        let Some(stock) = retry_until(backoff, "connecting to redis", shutdown, || crate::stock::Stock::connect(redis)).await
        else {
            return Ok(None);
        };
        let db = crate::db::connect_lazy(database)?;
        if retry_until(backoff, "migrating the database", shutdown, || crate::db::migrate(&db)).await.is_none() {
            return Ok(None);
        }
        let Some(topics) = retry_until(backoff, "creating topics", shutdown, || crate::kafka::ensure_topics(kafka)).await
        else {
            return Ok(None);
        };
        Ok(Some(Self { stock, db, topics }))
    }
}

/// Binds a service's health and metrics port (port 0 picks a free one, for
/// tests) and installs the metrics recorder before anything records.
pub async fn bind_health(addr: &str) -> anyhow::Result<tokio::net::TcpListener> {
    use anyhow::Context;
    crate::telemetry::metrics_handle();
    tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))
}

/// Where a consuming service's dependencies are.
pub struct Dependencies<'a> {
    /// Redis.
    pub redis: &'a crate::config::RedisSettings,
    /// PostgreSQL.
    pub database: &'a crate::config::DbSettings,
    /// Kafka.
    pub kafka: &'a crate::config::KafkaSettings,
    /// Retry delays while they do not answer.
    pub backoff: Backoff,
}

/// Runs a consuming service: serves health and metrics at once, connects to
/// its dependencies (retrying; `/readyz` says 503 meanwhile), lets `start`
/// spawn the service's tasks on the tracker, then waits for `shutdown` and
/// for every task to finish (bounded), logging each task's exit.
pub async fn host(
    name: &'static str,
    health: tokio::net::TcpListener,
    dependencies: Dependencies<'_>,
    shutdown: CancellationToken,
    start: impl FnOnce(Connections, &tokio_util::task::TaskTracker) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let tracker = tokio_util::task::TaskTracker::new();
    let ready = ReadyFlag::default();
    tracker.spawn(report_exit("health server", crate::telemetry::serve_health(health, ready.check(), shutdown.clone())));
    let connections = Connections::establish(
        dependencies.redis,
        dependencies.database,
        dependencies.kafka,
        dependencies.backoff,
        &shutdown,
    )
    .await?;
    if let Some(connections) = connections {
        ready.set();
        start(connections, &tracker)?;
        tracing::info!(service = name, "running");
    }
    tracker.close();
    shutdown.cancelled().await;
    if tokio::time::timeout(Duration::from_secs(30), tracker.wait()).await.is_err() {
        tracing::warn!(service = name, "tasks did not stop within 30s");
    }
    tracing::info!(service = name, "stopped");
    Ok(())
}
