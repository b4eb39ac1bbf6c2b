//! The sale's state in Redis: one file per Lua script that changes it (each
//! wrapper shares its script's name: `lua/deduct.lua` ↔ [`Orders::deduct`](crate::stock::Orders::deduct)),
//! the reads of order status and of the whole sale, and the key layout
//! ([`keys`], the only code that knows it).

mod borrow;
mod buckets;
mod cancel;
mod compensate;
mod confirm;
pub mod conn;
mod deduct;
mod directory;
mod follow_created;
mod handles;
pub mod keys;
mod lend;
mod lock_deduction;
mod order_state;
pub mod protocol;
pub mod queue;
mod release;
mod rollback;
mod snapshot;
mod values;
mod void;
pub mod warmup;

pub use borrow::Borrowed;
pub use cancel::Cancelled;
pub use compensate::{Compensation, CompensationMode};
pub use confirm::Confirmation;
pub use deduct::{DeductCall, DeductRequest, Deduction, MAX_DEDUCT_BATCH};
pub use directory::{home_index, Directory, MAX_BUCKETS};
pub use handles::{Books, BucketMoves, Draws, Orders, Releases, WaitingRoom, WarmUps};
pub use keys::{Bucket, KeyLayout, QueueKeys, ReleaseKeys, SaleKeys, SaleLock};
pub use lend::{Finished, Lent, Received};
pub use release::{Take, TakeId};
pub use snapshot::{BucketState, SaleSnapshot, SweepMark};
pub use values::{LoggedTransfer, OrderState, ReservationTrace, TakeValue, TicketValue, Transfer};
pub use void::Voided;

use crate::config::RedisSettings;
use crate::domain::SaleKey;
use crate::stock::conn::{RedisCallError, RedisConn};
use redis::Script;
use std::collections::BTreeMap;

/// Redis access for sales and orders.
#[derive(Clone)]
pub struct Stock {
    pub(crate) conn: RedisConn,
    pub(crate) keys: KeyLayout,
    /// How long a deduction call's outcome is kept (ms).
    call_outcome_ms: u64,
    /// Replicas that must confirm a deduction, and how long they may take.
    pub(crate) replica_acks: (u32, std::time::Duration),
    /// How long a sale's keys outlive its end plus its payment window.
    sale_key_margin: std::time::Duration,
}

impl Stock {
    /// Connects (the connection reconnects by itself afterwards).
    pub async fn connect(settings: &RedisSettings) -> Result<Self, RedisCallError> {
        let conn = RedisConn::connect(settings).await?;
        let replicas = match settings.min_replica_acks {
            Some(replicas) => replicas,
            None => conn.replicas_in_topology(&settings.url).await?,
        };
        Ok(Self {
            conn,
            keys: KeyLayout::new(settings.key_prefix.clone()),
            call_outcome_ms: settings.call_outcome_ms,
            replica_acks: (replicas, std::time::Duration::from_millis(settings.replica_ack_timeout_ms)),
            sale_key_margin: std::time::Duration::from_secs(settings.sale_key_margin_secs),
        })
    }

    /// When the keys of a sale ending at `ends_ms` with a payment window of
    /// `window_secs` expire (ms): its last order's deadline plus the margin.
    pub fn sale_keys_expire_at(&self, ends_ms: i64, window_secs: i64) -> i64 {
        ends_ms + window_secs * 1000 + self.sale_key_margin.as_millis() as i64
    }

    /// How long a deduction call's outcome is kept.
    pub fn call_outcome(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.call_outcome_ms)
    }

    /// How many replicas must confirm a deduction before it is answered.
    pub fn replica_acks(&self) -> u32 {
        self.replica_acks.0
    }

    /// The connection, for the lock and for raw commands (tests, health).
    pub fn connection(&self) -> RedisConn {
        self.conn.clone()
    }

    /// The key layout under this deployment's prefix.
    pub fn keys(&self) -> &KeyLayout {
        &self.keys
    }

    /// Redis's clock (`TIME`), in ms: the one clock deductions and the
    /// sweeper agree on, whatever the services' own clocks say.
    pub async fn now_ms(&self) -> Result<i64, RedisCallError> {
        let mut conn = self.conn.clone();
        let (secs, micros): (i64, i64) = self.conn.bounded(redis::cmd("TIME").query_async(&mut conn)).await?;
        Ok(secs * 1000 + micros / 1000)
    }
}

/// `items` grouped by the sale and bucket of the order each names: what
/// one script call or pipeline per slot takes.
fn by_bucket<T>(
    items: impl IntoIterator<Item = T>,
    order_id: impl Fn(&T) -> &crate::domain::OrderId,
) -> BTreeMap<(SaleKey, Bucket), Vec<T>> {
    let mut grouped: BTreeMap<(SaleKey, Bucket), Vec<T>> = BTreeMap::new();
    for item in items {
        let id = order_id(&item);
        grouped.entry((id.sale(), Bucket::of_order(id))).or_default().push(item);
    }
    grouped
}

/// `script` ready to run on `keys` (arguments follow).
pub(crate) fn with_keys<'a>(script: &'a Script, keys: &[&String]) -> redis::ScriptInvocation<'a> {
    let mut invocation = script.prepare_invoke();
    for key in keys {
        invocation.key(key.as_str());
    }
    invocation
}
