//! The library every seckill service shares: domain types and codes,
//! typed settings, the Redis scripts and key layout, the distributed lock,
//! Kafka client setup, database access, reconciliation and telemetry.
//!
//! Services (`services/*`) are thin: they wire these parts together. Anything
//! two services need lives here, next to the concern it belongs to.

pub mod cancellation;
pub mod cli;
pub mod config;
pub mod db;
pub mod dead_letters;
pub mod domain;
pub mod fate;
pub mod fence;
pub mod host;
pub mod kafka;
pub mod leader;
pub mod lease;
pub mod lock;
pub mod outbox;
pub mod parked;
pub mod reconcile;
pub mod redis_conn;
pub mod sales;
pub mod shutdown;
pub mod stock;
pub mod telemetry;

/// Current time in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
