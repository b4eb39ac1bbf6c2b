//! The library every seckill service shares, in rooms by job:
//!
//! - [`domain`]: the validated ids, the order record and event, statuses;
//! - [`config`]: typed settings from defaults, a file and the environment;
//! - [`stock`]: the sale's state in Redis — the connection, the key layout,
//!   one wrapper per Lua script;
//! - [`kafka`]: topics, producer and consumer setup, headers, lag;
//! - [`db`]: PostgreSQL — the pool and migrations, sales, the outbox, the
//!   dead-letter index, parked records;
//! - [`dlq`]: the dead-letter tools — which records, the audited replay and
//!   redrive runs, the figures — as `seckillctl` and the dashboard run them;
//! - [`orders`]: what crosses both stores for one order: Redis following
//!   PostgreSQL's fate, cancellations and the return of their units;
//! - [`sales`]: a sale's warm-up (a job that is all or nothing) and close;
//! - [`books`]: the reconciliation;
//! - [`ops`]: how a service runs — its command line, host, telemetry,
//!   shutdown, and the singletons' seats (lock, lease, fence, leader).
//!
//! Services (`services/*`) are thin: they wire these parts together. Anything
//! two services need lives here, next to the concern it belongs to.

pub mod books;
pub mod config;
pub mod db;
pub mod dlq;
pub mod domain;
pub mod draw;
pub mod kafka;
pub mod ops;
pub mod orders;
pub mod sales;
pub mod stock;

/// Current time in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
