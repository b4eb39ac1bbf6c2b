//! The order service: consumes `seckill.orders` with manual commits and
//! writes every accepted order to PostgreSQL exactly once.
//!
//! Several consumers run in one process, members of one group, so partitions
//! are processed in parallel while each partition's records stay in order.
//! A batch's offsets are committed only after its transaction committed,
//! its statuses reached Redis, its orders' CREATED events reached the events
//! topic ([`created_events`]) and its rejects reached the dead-letter topic:
//! a crash anywhere replays the batch, and replays are idempotent. The
//! [`relay`] publishes the later order events the transactions wrote to the
//! outbox; [`metrics`] lists what the service exports.

/// What `--help` says the service does.
pub const ABOUT: &str = "The order service: consumes seckill.orders in the seckill-order group, writes each batch of orders to PostgreSQL in one idempotent transaction with the database's stock guard, marks them CREATED in Redis, produces their CREATED events, dead-letters what can never be written, and commits offsets only after all of that; relays the later order events from the outbox. Health and metrics on metrics_addr.";

pub mod consumer;
pub mod created_events;
pub mod dead_letters;
pub mod lag;
pub mod metrics;
pub mod record_spans;
pub mod relay;
pub mod relay_hold;
pub mod relay_waves;
pub mod store;

use seckill_shared::config::Servers;
use seckill_shared::ops::catalogue::Metric;
use seckill_shared::ops::host::{Connections, Hosted, ServiceSettings};
use seckill_shared::ops::shutdown::Background;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Settings of `seckill-order`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
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
    /// The relay of order events (`seckill.order-events`).
    pub events: relay::EventSettings,
    #[serde(flatten)]
    pub service: ServiceSettings,
    #[serde(flatten)]
    pub servers: Servers,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            batch_size: 4_000,
            batch_wait_ms: 20,
            consumers: 2,
            events: relay::EventSettings::default(),
            service: ServiceSettings::listening_on("127.0.0.1:9101"),
            servers: Servers::default(),
        }
    }
}

/// The order service: hosted by the shared skeleton, which connects and
/// then calls [`Hosted::start`].
pub type Service = seckill_shared::ops::host::Service<Settings>;

impl Hosted for Settings {
    const NAME: &'static str = "order service";
    const BINARY: &'static str = "seckill-order";
    const ABOUT: &'static str = ABOUT;
    const METRICS: &'static [&'static [Metric]] = metrics::ALL;

    fn hosting(&self) -> (&ServiceSettings, &Servers) {
        (&self.service, &self.servers)
    }

    /// The consumers, members of one group, the event relay and the lag
    /// reporter (which asks the consumers to join again when the group
    /// stands still).
    fn start(settings: Arc<Self>, connections: Connections, background: &Background) -> anyhow::Result<()> {
        if settings.events.enabled {
            let relay = relay::Relay::new(settings.clone(), connections.clone(), background.clone())?;
            background.spawn("event relay", relay.run(background.shutdown().clone()));
        }
        let dead_letters = dead_letters::DeadLetters::new(&settings.servers.kafka, connections.topics.dlq.clone())?;
        let (rejoin, rejoins) = tokio::sync::watch::channel(0);
        for index in 0..settings.consumers.max(1) {
            let worker = consumer::Worker::new(index, settings.clone(), connections.clone(), dead_letters.clone())?
                .rejoining_on(rejoins.clone());
            background.spawn("consumer", worker.run(background.shutdown().clone()));
        }
        background.spawn("lag reporter", lag::report_lag(settings, rejoin, background.shutdown().clone()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seckill_shared::config::{load_from, UnknownKeys};

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn the_service_defaults_of_flattened_parts_hold() {
        let settings: Settings = load_from(None, &[], UnknownKeys::Refuse).unwrap();
        assert_eq!(settings.service.metrics_addr, "127.0.0.1:9101");
        let settings: Settings =
            load_from(None, &vars(&[("SECKILL__RETRY__MAX_MS", "7")]), UnknownKeys::Refuse).unwrap();
        assert_eq!((settings.service.metrics_addr.as_str(), settings.service.retry.max_ms), ("127.0.0.1:9101", 7));
    }

    #[test]
    fn flattened_keys_stay_top_level() {
        let settings: Settings = load_from(
            None,
            &vars(&[
                ("SECKILL__METRICS_ADDR", "127.0.0.1:1"),
                ("SECKILL__RETRY__MAX_MS", "7"),
                ("SECKILL_KEY_PREFIX", "p:"),
                ("SECKILL__BATCH_SIZE", "9"),
            ]),
            UnknownKeys::Refuse,
        )
        .unwrap();
        assert_eq!(settings.service.metrics_addr, "127.0.0.1:1");
        assert_eq!(settings.service.retry.max_ms, 7);
        assert_eq!(settings.servers.redis.key_prefix, "p:");
        assert_eq!(settings.batch_size, 9);
        let err = load_from::<Settings>(None, &vars(&[("SECKILL__BATCH_SIZ", "9")]), UnknownKeys::Refuse).unwrap_err();
        assert!(err.to_string().contains("batch_siz"), "{err}");
    }
}
