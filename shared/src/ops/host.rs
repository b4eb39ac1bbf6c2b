//! The skeleton every service binary runs in. [`run`] is each binary's
//! whole `main`: the command line, the settings (loaded and validated once),
//! telemetry, the shutdown signal, build, run until SIGINT/SIGTERM — for
//! anything that is a [`Binary`]. The consuming services (order service,
//! compensator) are a [`Service`] of their [`Hosted`] settings: a health
//! and metrics port served at once, dependencies connected with retries
//! while `/readyz` says 503, the service's tasks started on one tracker,
//! and a bounded wait for them at shutdown, each exit logged.

use crate::config::{Servers, TelemetrySettings};
use crate::kafka::stall::{ConsumerSettings, Stalls};
use crate::kafka::Topics;
use crate::ops::shutdown::Background;
use crate::ops::telemetry::NotReady;
use crate::stock::Stock;
use anyhow::Context;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub use crate::ops::retry::{retry_until, RetrySettings};

/// Set once a service's dependencies answered; `/readyz` reports it.
#[derive(Clone, Default)]
pub struct ReadyFlag(Arc<AtomicBool>);

impl ReadyFlag {
    /// Marks the service ready.
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// A readiness check for [`crate::ops::telemetry::serve_health`]:
    /// connected, and no consumer stalled.
    pub fn check(&self, stalls: Stalls) -> crate::ops::telemetry::ReadinessCheck {
        let flag = self.0.clone();
        Arc::new(move || {
            let ready = flag.load(Ordering::Relaxed);
            let stalled = stalls.ready();
            Box::pin(async move {
                if !ready {
                    return Err(NotReady("connecting to redis, postgresql and kafka".into()));
                }
                stalled.map_err(NotReady)
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
    /// Where the service's group members report their progress.
    pub stalls: Stalls,
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
    /// How long a group member may work on one batch or record before it
    /// is stalled ([`crate::kafka::stall`]).
    pub consumer: ConsumerSettings,
}

impl ServiceSettings {
    /// Defaults, listening on `metrics_addr`.
    pub fn listening_on(metrics_addr: &str) -> Self {
        Self {
            metrics_addr: metrics_addr.to_owned(),
            retry: RetrySettings::default(),
            shutdown_timeout_ms: 30_000,
            park_after_attempts: 5,
            consumer: ConsumerSettings::default(),
        }
    }
}

impl Default for ServiceSettings {
    fn default() -> Self {
        Self::listening_on("127.0.0.1:0")
    }
}

/// A service binary, as [`run`] starts it.
pub trait Binary: Sized + Send + 'static {
    /// Its settings, loaded once from defaults, file and environment.
    type Settings: DeserializeOwned + Serialize + Default + Send + 'static;
    /// The binary's name (`seckill-edge`).
    const BINARY: &'static str;
    /// What `--help` says it does.
    const ABOUT: &'static str;
    /// Its logging settings.
    fn telemetry(settings: &Self::Settings) -> &TelemetrySettings;
    /// Refuses settings it could not start with, naming the setting,
    /// without connecting to anything: run at start and by `--check-config`.
    fn check(settings: &Self::Settings) -> anyhow::Result<()>;
    /// Binds its port and connects what it must have at start.
    fn build(settings: Self::Settings) -> impl Future<Output = anyhow::Result<Self>> + Send;
    /// The address it listens on (HTTP, or health and metrics).
    fn listening(&self) -> SocketAddr;
    /// Runs until `shutdown`, then stops cleanly.
    fn run(self, shutdown: CancellationToken) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// A service binary's whole `main`: reads the command line (`--help`,
/// `--version`, `--print-config`), loads the settings, starts telemetry,
/// builds the service and runs it until SIGINT or SIGTERM.
pub fn run<B: Binary>() -> anyhow::Result<()> {
    let args = crate::ops::cli::ServiceArgs::parse_for(B::BINARY, B::ABOUT);
    if args.check_config {
        let checked = args.settings::<B::Settings>().and_then(|settings| match settings {
            Some(settings) => B::check(&settings),
            None => Ok(()),
        });
        match checked {
            Ok(()) => println!("{}: the configuration would start", B::BINARY),
            Err(error) => {
                eprintln!("{}: the configuration would not start: {error:#}", B::BINARY);
                std::process::exit(1);
            }
        }
        return Ok(());
    }
    let Some(settings) = args.settings::<B::Settings>()? else { return Ok(()) };
    B::check(&settings)?;
    crate::db::name_sessions(B::BINARY);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    let result = runtime.block_on(async move {
        crate::ops::telemetry::init_tracing(B::telemetry(&settings), B::BINARY);
        let shutdown = crate::ops::shutdown::shutdown_signal();
        let service = B::build(settings).await.with_context(|| format!("starting {}", B::BINARY))?;
        tracing::info!(service = B::BINARY, addr = %service.listening(), "listening");
        service.run(shutdown).await
    });
    // The service waited for its tasks (bounded); a call still blocking a
    // thread (a client library waiting on a server) must not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    crate::ops::trace_export::flush();
    result
}

/// A consuming service as the host runs it: its settings say where it
/// listens and what it connects to, and it starts its own tasks.
pub trait Hosted: DeserializeOwned + Serialize + Default + Send + Sync + Sized + 'static {
    /// Its name in logs.
    const NAME: &'static str;
    /// Its binary's name.
    const BINARY: &'static str;
    /// What its `--help` says it does.
    const ABOUT: &'static str;
    /// The metrics it exports, by group, described and exposed from the
    /// start ([`crate::ops::catalogue`]).
    const METRICS: &'static [&'static [crate::ops::catalogue::Metric]];
    /// Its listener, retries and shutdown bound, and the servers it
    /// connects to.
    fn hosting(&self) -> (&ServiceSettings, &Servers);
    /// Refuses settings of its own it could not start with (the servers'
    /// and the listener's are checked by the host).
    fn check(&self) -> anyhow::Result<()> {
        Ok(())
    }
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
    /// installs the metrics recorder, its metrics described, before
    /// anything records.
    pub async fn build(settings: S) -> anyhow::Result<Self> {
        crate::ops::catalogue::publish(S::METRICS);
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
        let stalls = Stalls::new(service.consumer.stall());
        let alive = {
            let stalls = stalls.clone();
            Arc::new(move || stalls.alive().map_err(NotReady)) as crate::ops::telemetry::LivenessCheck
        };
        let health = crate::ops::telemetry::serve_health(health, ready.check(stalls.clone()), alive, shutdown.clone());
        background.spawn("health server", health);
        background.spawn("stall watch", stalls.clone().watch(shutdown.clone()));
        if let Some(connections) = connect(servers, service.retry, stalls, &shutdown).await? {
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

impl<S: Hosted> Binary for Service<S> {
    type Settings = S;
    const BINARY: &'static str = S::BINARY;
    const ABOUT: &'static str = S::ABOUT;

    fn telemetry(settings: &S) -> &TelemetrySettings {
        &settings.hosting().1.telemetry
    }

    fn check(settings: &S) -> anyhow::Result<()> {
        let (service, servers) = settings.hosting();
        check_servers(servers)?;
        service.consumer.check(&servers.kafka)?;
        service.metrics_addr.parse::<SocketAddr>().with_context(|| {
            format!("metrics_addr (SECKILL__METRICS_ADDR) '{}' is not an address (host:port)", service.metrics_addr)
        })?;
        settings.check()
    }

    async fn build(settings: S) -> anyhow::Result<Self> {
        Service::build(settings).await
    }

    fn listening(&self) -> SocketAddr {
        self.health_addr()
    }

    async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        Service::run(self, shutdown).await
    }
}

/// Refuses server settings no connection could be made with: a Redis or
/// PostgreSQL URL of no known form, no Kafka broker (connecting to nothing).
pub fn check_servers(servers: &Servers) -> anyhow::Result<()> {
    crate::stock::conn::check_url(&servers.redis.url)
        .map_err(|why| anyhow::anyhow!("redis.url (SECKILL_REDIS_URL): {why}"))?;
    crate::db::hosts::parse(&servers.database.url)
        .map_err(|error| anyhow::anyhow!("database.url (SECKILL_DATABASE_URL): {error}"))?;
    let brokers = &servers.kafka.brokers;
    if brokers.split(',').map(str::trim).any(|broker| {
        broker.rsplit_once(':').is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
    }) {
        anyhow::bail!("kafka.brokers (SECKILL_KAFKA_BROKERS) '{brokers}' is not a list of host:port");
    }
    servers.database.check()?;
    servers.telemetry.check()?;
    let source = &servers.kafka.cloudevents_source;
    let absolute = source.split_once(':').is_some_and(|(scheme, rest)| {
        !scheme.is_empty() && !rest.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    if !(absolute || source.starts_with('/')) || !source.bytes().all(|b| b.is_ascii_graphic()) {
        anyhow::bail!("kafka.cloudevents_source '{source}' is not a URI (https://shop.example/seckill, urn:shop:seckill or /seckill)");
    }
    Ok(())
}

/// Redis, PostgreSQL (migrated) and Kafka (topics created), each retried
/// until it answers; `None` when `shutdown` came first.
async fn connect(
    servers: &Servers,
    retry: RetrySettings,
    stalls: Stalls,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<Connections>> {
    let Some(stock) = retry_until(retry, "connecting to redis", shutdown, || Stock::connect(&servers.redis)).await
    else {
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
    Ok(Some(Connections { stock, db, topics, stalls }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cloudevents_source_is_a_uri() {
        for good in ["urn:seckill:order-events", "https://shop.example/seckill", "/seckill"] {
            let mut servers = Servers::default();
            servers.kafka.cloudevents_source = good.into();
            check_servers(&servers).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for bad in ["", "shop", "https://shop example", ":x"] {
            let mut servers = Servers::default();
            servers.kafka.cloudevents_source = bad.into();
            assert!(check_servers(&servers).is_err(), "{bad}");
        }
    }
}
