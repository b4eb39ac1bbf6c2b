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
pub mod settings;
pub mod store;

pub use settings::Settings;

use seckill_shared::config::Servers;
use seckill_shared::ops::catalogue::Metric;
use seckill_shared::ops::host::{Connections, Hosted, ServiceSettings};
use seckill_shared::ops::shutdown::Background;
use std::sync::Arc;

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
