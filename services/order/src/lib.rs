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

use seckill_shared::config::{DbSettings, KafkaSettings, RedisSettings, TelemetrySettings};
use seckill_shared::host::{Host, HostSettings, RetrySettings};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Settings of `seckill-order`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Health and metrics listener.
    pub metrics_addr: String,
    /// Most records written in one transaction. Larger batches spread each
    /// transaction's fixed costs (begin, stock update, commit, the Redis
    /// round trip, the offset commit) over more orders: draining a 200,000-
    /// record backlog went from 97k to 119k orders/s at 2,000 and 110-131k
    /// at 4,000 in one session; a batch still closes after `batch_wait_ms`
    /// when records arrive slowly.
    pub batch_size: usize,
    /// Longest wait to fill a batch.
    pub batch_wait_ms: u64,
    /// Consumers (group members) in this process.
    pub consumers: usize,
    /// Delays while PostgreSQL, Redis or Kafka fail.
    pub retry: RetrySettings,
    /// How long the consumers may take to finish their batch at shutdown.
    pub shutdown_timeout_ms: u64,
    pub redis: RedisSettings,
    pub kafka: KafkaSettings,
    pub database: DbSettings,
    pub telemetry: TelemetrySettings,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            metrics_addr: "127.0.0.1:9101".into(),
            batch_size: 4_000,
            batch_wait_ms: 20,
            consumers: 2,
            retry: RetrySettings::default(),
            shutdown_timeout_ms: 30_000,
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
    host: Host,
}

impl Service {
    /// Binds the health port (port 0 picks a free one, for tests).
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let host = Host::bind(
            "order service",
            HostSettings {
                metrics_addr: settings.metrics_addr.clone(),
                redis: settings.redis.clone(),
                database: settings.database.clone(),
                kafka: settings.kafka.clone(),
                retry: settings.retry,
                shutdown_timeout: Duration::from_millis(settings.shutdown_timeout_ms),
            },
        )
        .await?;
        Ok(Self { settings: Arc::new(settings), host })
    }

    /// The health and metrics address.
    pub fn health_addr(&self) -> SocketAddr {
        self.host.health_addr()
    }

    /// Runs until `shutdown`: waits for its dependencies, then consumes.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let settings = self.settings;
        self.host
            .run(shutdown, |connections, background| {
                let dead_letters = dlq::DeadLetters::new(&settings.kafka, connections.topics.dlq.clone())?;
                for index in 0..settings.consumers.max(1) {
                    let worker = consumer::Worker::new(index, settings.clone(), connections.clone(), dead_letters.clone())?;
                    background.spawn("consumer", worker.run(background.shutdown().clone()));
                }
                background.spawn("lag reporter", consumer::report_lag(settings.clone(), background.shutdown().clone()));
                Ok(())
            })
            .await
    }
}
