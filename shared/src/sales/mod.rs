//! A sale's setup across PostgreSQL and Redis. Warm-up ([`warmup_job`]) is the
//! one operation behind `PUT /admin/sales/{a}/{s}` and `seckillctl warmup`:
//! a job with an id, its progress recorded ([`warmup_rows`]), that holds the
//! sale's buckets still, commits the new round in PostgreSQL, loads it into
//! Redis and has the replicas confirm it — all or nothing, and finished by
//! repeating it. Closing (`POST /admin/sales/{a}/{s}/close`, `seckillctl
//! sale close`) ends the round now, in both, under the same lock, and
//! schedules the expiry of every key of the sale.

mod admission;
mod close;
mod warmup_job;
pub mod warmup_rows;

pub use admission::{Admission, Challenge};
pub use close::close;
pub use warmup_job::warmup;

use crate::domain::{Limits, SaleKey};
use crate::draw::Draw;
use crate::stock::conn::RedisCallError;
use chrono::{DateTime, Utc};

/// What to warm up.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WarmupRequest {
    /// The warm-up's id: the same id asked again finishes (or answers) the
    /// same warm-up, never a second one; `None`: a new one.
    #[serde(skip)]
    pub id: Option<String>,
    pub sale: SaleKey,
    /// Units on sale (set, never added).
    pub stock: i64,
    /// Window start; open when absent.
    pub starts_at: Option<DateTime<Utc>>,
    /// Window end; open when absent.
    pub ends_at: Option<DateTime<Utc>>,
    /// Warm up even if the previous round has orders in flight.
    pub force: bool,
    /// How long each CREATED order awaits payment before it is cancelled
    /// and its unit sold again.
    pub payment_window_seconds: i64,
    /// Stock buckets the round's units are spread over (1: none), each in a
    /// slot of its own, on a Redis Cluster spread over the primaries.
    pub buckets: u32,
    /// The round's waiting room (`None`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
    /// The round's draw (`None`: none; never beside `admission`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draw: Option<Draw>,
    /// Units per user and per order (absent from warm-ups recorded before
    /// quantities: one each).
    #[serde(default)]
    pub limits: Limits,
}

/// The payment window when a warm-up names none: 15 minutes.
pub const DEFAULT_PAYMENT_WINDOW_SECONDS: i64 = 900;
/// The longest payment window a warm-up takes: 7 days.
pub const MAX_PAYMENT_WINDOW_SECONDS: i64 = 7 * 24 * 3600;

/// Why a warm-up was refused.
#[derive(Debug, thiserror::Error)]
pub enum WarmupError {
    /// Bad stock or window.
    #[error("{0}")]
    Invalid(String),
    /// Another warm-up of this sale is running.
    #[error("another warm-up of sale {0} is running")]
    Busy(SaleKey),
    /// No such sale.
    #[error("sale {0} not found")]
    NotFound(SaleKey),
    /// The previous round still has orders in flight.
    #[error("sale {0} still has orders in flight; wait for them to settle or force the warm-up")]
    InFlight(SaleKey),
    /// The warm-up id names a warm-up of another request.
    #[error("warm-up {0} was asked with another request; use a new id")]
    IdReused(String),
    /// The replicas did not confirm what the warm-up (or close) wrote in
    /// Redis; asked again, it finishes.
    #[error("the Redis replicas did not confirm warm-up {0} in time; repeat it to finish")]
    NotReplicated(String),
    /// Redis failed.
    #[error(transparent)]
    Redis(#[from] RedisCallError),
    /// PostgreSQL failed.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}
