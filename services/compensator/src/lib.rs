//! The compensator: settles every order that will never be written.
//!
//! - [`job`] consumes the dead-letter topic and settles each record's order.
//! - [`sweeper`] (a singleton across instances, under the distributed lock)
//!   settles reservations the order service never saw: the edge died between
//!   the deduction and the publish, or the publish timed out and never landed.
//! - [`settle`] is what both do to an order: PostgreSQL decides its fate
//!   (first row wins), and only a FAILED row restores the unit in Redis, at
//!   most once per order id.

pub mod job;
pub mod settle;
pub mod sweeper;

use seckill_shared::config::{DbSettings, KafkaSettings, RedisSettings, TelemetrySettings};
use seckill_shared::host::{Host, HostSettings, RetrySettings};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The reservation sweeper's settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SweeperSettings {
    /// Run the sweeper in this process (one instance sweeps at a time).
    pub enabled: bool,
    /// How old a reservation must be before it is settled. Never less than
    /// the producer's delivery timeout plus 5 s, so a record still in flight
    /// is never mistaken for a lost one.
    pub grace_ms: u64,
    /// Time between sweeps.
    pub interval_ms: u64,
    /// Lease of the sweeper's lock (renewed by its watchdog).
    pub lock_lease_ms: u64,
    /// Most reservations settled per sale per sweep.
    pub batch: usize,
}

impl Default for SweeperSettings {
    fn default() -> Self {
        Self { enabled: true, grace_ms: 30_000, interval_ms: 2_000, lock_lease_ms: 10_000, batch: 500 }
    }
}

/// Settings of `seckill-compensator`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Health and metrics listener.
    pub metrics_addr: String,
    /// Delays while PostgreSQL, Redis or Kafka fail.
    pub retry: RetrySettings,
    /// How long the tasks may take to finish at shutdown.
    pub shutdown_timeout_ms: u64,
    pub sweeper: SweeperSettings,
    pub redis: RedisSettings,
    pub kafka: KafkaSettings,
    pub database: DbSettings,
    pub telemetry: TelemetrySettings,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            metrics_addr: "127.0.0.1:9102".into(),
            retry: RetrySettings::default(),
            shutdown_timeout_ms: 30_000,
            sweeper: SweeperSettings::default(),
            redis: RedisSettings::default(),
            kafka: KafkaSettings::default(),
            database: DbSettings { max_connections: 4, ..DbSettings::default() },
            telemetry: TelemetrySettings::default(),
        }
    }
}

impl Settings {
    /// The sweeper's grace period, never shorter than a publish can take.
    pub fn grace(&self) -> Duration {
        Duration::from_millis(self.sweeper.grace_ms.max(self.kafka.message_timeout_ms + 5_000))
    }
}

/// A built compensator, its health port bound.
pub struct Service {
    settings: Arc<Settings>,
    host: Host,
}

impl Service {
    /// Binds the health port (port 0 picks a free one, for tests).
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let host = Host::bind(
            "compensator",
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

    /// Runs the DLQ consumer and the sweeper until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let settings = self.settings;
        self.host
            .run(shutdown, |connections, background| {
                let dlq = job::DlqJob::new(settings.clone(), connections.clone())?;
                background.spawn("dlq consumer", dlq.run(background.shutdown().clone()));
                if settings.sweeper.enabled {
                    let sweeper = sweeper::Sweeper::new(settings.clone(), connections, background.clone());
                    background.spawn("reservation sweeper", sweeper.run(background.shutdown().clone()));
                }
                Ok(())
            })
            .await
    }
}
