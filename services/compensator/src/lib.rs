//! The compensator: settles every order that will never be written.
//!
//! - [`job`] consumes the dead-letter topic: for each record it writes the
//!   order's row as FAILED unless a row exists (PostgreSQL decides the fate),
//!   and only if the row is FAILED restores the unit in Redis — at most once
//!   per order id — then commits.
//! - [`sweeper`] (a singleton across instances, under the distributed lock)
//!   settles reservations the order service never saw: the edge died between
//!   the deduction and the publish, or the publish timed out and never landed.

pub mod job;
pub mod sweeper;

use seckill_shared::config::{DbSettings, KafkaSettings, RedisSettings, TelemetrySettings};
use seckill_shared::tasks::{bind_health, host, report_exit, Backoff, Dependencies};
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
    /// First retry delay after a transient failure.
    pub retry_initial_ms: u64,
    /// Longest retry delay.
    pub retry_max_ms: u64,
    /// The reservation sweeper.
    pub sweeper: SweeperSettings,
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
            metrics_addr: "127.0.0.1:9102".into(),
            retry_initial_ms: 100,
            retry_max_ms: 5_000,
            sweeper: SweeperSettings::default(),
            redis: RedisSettings::default(),
            kafka: KafkaSettings::default(),
            database: DbSettings { max_connections: 4, ..DbSettings::default() },
            telemetry: TelemetrySettings::default(),
        }
    }
}

impl Settings {
    /// Retry delays after transient failures.
    pub fn backoff(&self) -> Backoff {
        Backoff { initial: Duration::from_millis(self.retry_initial_ms), max: Duration::from_millis(self.retry_max_ms) }
    }

    /// The sweeper's grace period, never shorter than a publish can take.
    pub fn grace(&self) -> Duration {
        Duration::from_millis(self.sweeper.grace_ms.max(self.kafka.message_timeout_ms + 5_000))
    }
}

/// A built compensator, its health port bound.
pub struct Service {
    settings: Arc<Settings>,
    health: tokio::net::TcpListener,
}

impl Service {
    /// Binds the health port (port 0 picks a free one, for tests).
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let health = bind_health(&settings.metrics_addr).await?;
        Ok(Self { settings: Arc::new(settings), health })
    }

    /// The health and metrics address.
    pub fn health_addr(&self) -> SocketAddr {
        self.health.local_addr().expect("a bound listener has an address")
    }

    /// Runs the DLQ consumer and the sweeper until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let settings = self.settings;
        let dependencies = Dependencies {
            redis: &settings.redis,
            database: &settings.database,
            kafka: &settings.kafka,
            backoff: settings.backoff(),
        };
        host("compensator", self.health, dependencies, shutdown.clone(), |connections, tracker| {
            let dlq = job::DlqJob::new(settings.clone(), connections.clone())?;
            tracker.spawn(report_exit("dlq consumer", dlq.run(shutdown.clone())));
            if settings.sweeper.enabled {
                let sweeper = sweeper::Sweeper::new(settings.clone(), connections);
                tracker.spawn(report_exit("reservation sweeper", sweeper.run(shutdown.clone())));
            }
            Ok(())
        })
        .await
    }
}
