//! The order service: consumes `seckill.orders` with manual commits and
//! writes every accepted order to PostgreSQL exactly once.
//!
//! Several consumers run in one process, members of one group, so partitions
//! are processed in parallel while each partition's records stay in order.
//! A batch's offsets are committed only after its transaction committed,
//! its statuses reached Redis and its rejects reached the dead-letter topic:
//! a crash anywhere replays the batch, and replays are idempotent.

pub mod consumer;
pub mod dlq;
pub mod store;

use anyhow::Context;
use seckill_shared::config::{DbSettings, KafkaSettings, RedisSettings, TelemetrySettings};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Settings of `seckill-order`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Health and metrics listener.
    pub metrics_addr: String,
    /// Most records written in one transaction.
    pub batch_size: usize,
    /// Longest wait to fill a batch.
    pub batch_wait_ms: u64,
    /// Consumers (group members) in this process.
    pub consumers: usize,
    /// First retry delay after a transient failure.
    pub retry_initial_ms: u64,
    /// Longest retry delay.
    pub retry_max_ms: u64,
    /// Redis.
    pub redis: RedisSettings,
    /// Kafka.
    pub kafka: KafkaSettings,
    /// PostgreSQL.
    pub database: DbSettings,
    /// Logging.
    pub telemetry: TelemetrySettings,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            metrics_addr: "127.0.0.1:9101".into(),
            batch_size: 500,
            batch_wait_ms: 20,
            consumers: 2,
            retry_initial_ms: 100,
            retry_max_ms: 5_000,
            redis: RedisSettings::default(),
            kafka: KafkaSettings::default(),
            database: DbSettings::default(),
            telemetry: TelemetrySettings::default(),
        }
    }
}

/// A built order service, its health port bound.
pub struct Service {
    settings: Arc<Settings>,
    health: tokio::net::TcpListener,
}

impl Service {
    /// Binds the health port (port 0 picks a free one, for tests).
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let health = tokio::net::TcpListener::bind(&settings.metrics_addr)
            .await
            .with_context(|| format!("binding {}", settings.metrics_addr))?;
        Ok(Self { settings: Arc::new(settings), health })
    }

    /// The health and metrics address.
    pub fn health_addr(&self) -> SocketAddr {
        self.health.local_addr().expect("a bound listener has an address")
    }

    /// Runs until `shutdown`: waits for its dependencies, then consumes.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let settings = self.settings;
        let tracker = TaskTracker::new();
        let ready_flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ready_flag.clone();
        let ready: seckill_shared::telemetry::ReadinessCheck = Arc::new(move || {
            let flag = flag.clone();
            Box::pin(async move {
                if flag.load(std::sync::atomic::Ordering::Relaxed) {
                    Ok(())
                } else {
                    Err("connecting to redis, postgresql and kafka".to_owned())
                }
            })
        });
        tracker.spawn(report_exit(
            "health server",
            seckill_shared::telemetry::serve_health(self.health, ready, shutdown.clone()),
        ));

        let Some(deps) = consumer::Dependencies::connect(&settings, &shutdown).await else {
            tracker.close();
            tracker.wait().await;
            return Ok(());
        };
        ready_flag.store(true, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(consumers = settings.consumers, topic = %deps.topics.orders, "order service consuming");
        for index in 0..settings.consumers.max(1) {
            let worker = consumer::Worker::new(index, settings.clone(), deps.clone())?;
            tracker.spawn(report_exit("consumer", worker.run(shutdown.clone())));
        }
        tracker.spawn(consumer::report_lag(settings.clone(), shutdown.clone()));
        tracker.close();
        shutdown.cancelled().await;
        if tokio::time::timeout(Duration::from_secs(30), tracker.wait()).await.is_err() {
            tracing::warn!("tasks did not stop within 30s");
        }
        tracing::info!("order service stopped");
        Ok(())
    }
}

/// Logs how a long-running task ended.
pub async fn report_exit<E: std::fmt::Display>(name: &'static str, task: impl std::future::Future<Output = Result<(), E>>) {
    match task.await {
        Ok(()) => tracing::info!(task = name, "task finished"),
        Err(error) => tracing::error!(task = name, %error, "task failed"),
    }
}
