//! The order service's settings: batching, its consumers, the event
//! relay's, beside the servers' and the service's shared with every
//! service.

use seckill_shared::config::Servers;
use seckill_shared::ops::host::ServiceSettings;
use serde::{Deserialize, Serialize};

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
    pub events: EventSettings,
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
            events: EventSettings::default(),
            service: ServiceSettings::listening_on("127.0.0.1:9101"),
            servers: Servers::default(),
        }
    }
}

/// The event relay's settings ([`crate::relay`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventSettings {
    /// Relay events from this order service (one relays at a time).
    pub enabled: bool,
    /// Most events sent in one turn.
    pub batch: i64,
    /// How long the relay waits when the outbox is empty.
    pub poll_ms: u64,
    /// How long events stay in the outbox once they happened (and were
    /// relayed) before they are pruned.
    pub retention_ms: u64,
    /// How often pruning runs.
    pub prune_every_ms: u64,
    /// Length of the relay's lease: a relay that stops renewing it (frozen,
    /// cut off) is replaced by another order service after this long.
    pub lease_ms: u64,
    /// Events that waited this long behind a transaction still open on the
    /// server (any database's) are reported: the log names the transaction,
    /// `/metrics` counts them. Looked at this often while turns are empty.
    pub held_back_after_ms: u64,
}

impl Default for EventSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            batch: 1_000,
            poll_ms: 100,
            retention_ms: 24 * 3_600_000,
            prune_every_ms: 60_000,
            lease_ms: 5_000,
            held_back_after_ms: seckill_shared::db::horizon::HELD_BACK_AFTER.as_millis() as u64,
        }
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
