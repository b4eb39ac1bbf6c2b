//! Buyers' status reads cannot flood PostgreSQL. A read Redis cannot answer
//! goes to PostgreSQL through a pool of its own (`status_reads.
//! pool_connections`), so pay, cancel and warm-up keep theirs; an id that
//! neither knows is remembered as missing for `status_reads.miss_cache_ms`
//! (a flood of one unknown id costs one query); and where no user is known
//! (user auth off) reads are limited per client (`status_reads.
//! per_client_per_second`, burst `per_client_burst`), on top of the global
//! limit.

use crate::limit::KeyedLimiter;
use crate::settings::StatusReadSettings;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Order ids remembered as missing, at most; past it the expired go, and
/// if none has, all.
const MAX_MISSES: usize = 100_000;

/// Clients whose reads are tracked before the recovered are forgotten.
const MAX_TRACKED_CLIENTS: usize = 100_000;

/// The edge's guard of status reads.
pub struct StatusReads {
    per_client: Arc<KeyedLimiter<IpAddr>>,
    misses: Mutex<HashMap<String, Instant>>,
    miss_ttl: Duration,
}

impl StatusReads {
    /// From settings.
    pub fn new(settings: &StatusReadSettings) -> Self {
        let quota = crate::limit::quota(settings.per_client_per_second, settings.per_client_burst);
        Self {
            per_client: KeyedLimiter::new(quota, MAX_TRACKED_CLIENTS),
            misses: Mutex::default(),
            miss_ttl: Duration::from_millis(settings.miss_cache_ms),
        }
    }

    /// `Err(retry after)` when `client` is over its limit.
    pub fn check_client(&self, client: IpAddr) -> Result<(), Duration> {
        self.per_client.check(&client)
    }

    /// Whether `order_id` was found missing a moment ago.
    pub fn known_missing(&self, order_id: &str) -> bool {
        let misses = self.misses.lock();
        misses.get(order_id).is_some_and(|until| *until > Instant::now())
    }

    /// Remembers `order_id` as missing for a moment.
    pub fn missed(&self, order_id: &str) {
        if self.miss_ttl.is_zero() {
            return;
        }
        let mut misses = self.misses.lock();
        let now = Instant::now();
        if misses.len() >= MAX_MISSES {
            misses.retain(|_, until| *until > now);
            if misses.len() >= MAX_MISSES {
                misses.clear();
            }
        }
        misses.insert(order_id.to_owned(), now + self.miss_ttl);
    }

    /// Clients the limiter holds a state for, trimmed to those not yet
    /// recovered (called with the limiter clean-up).
    pub fn shrink(&self) {
        self.per_client.shrink();
        let now = Instant::now();
        self.misses.lock().retain(|_, until| *until > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(per_second: u32, burst: u32, miss_cache_ms: u64) -> StatusReads {
        StatusReads::new(&StatusReadSettings {
            per_client_per_second: per_second,
            per_client_burst: burst,
            miss_cache_ms,
            pool_connections: 1,
        })
    }

    #[test]
    fn a_miss_is_remembered_for_its_time_only() {
        let reads = reads(1, 1, 50);
        assert!(!reads.known_missing("a-1-1-00"));
        reads.missed("a-1-1-00");
        assert!(reads.known_missing("a-1-1-00"));
        assert!(!reads.known_missing("a-1-2-00"), "another id is not");
        std::thread::sleep(Duration::from_millis(60));
        assert!(!reads.known_missing("a-1-1-00"), "forgotten after its time");
        let never = self::reads(1, 1, 0);
        never.missed("a-1-1-00");
        assert!(!never.known_missing("a-1-1-00"), "0 remembers nothing");
    }

    #[test]
    fn each_client_has_its_own_limit() {
        let reads = reads(1, 2, 0);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        assert!(reads.check_client(a).is_ok() && reads.check_client(a).is_ok());
        assert!(reads.check_client(a).is_err(), "past the burst");
        assert!(reads.check_client(b).is_ok(), "another client is not limited by the first");
    }
}
