//! The sale's state in Redis: one file per Lua script that changes it (each
//! wrapper shares its script's name: `lua/deduct.lua` ↔ [`Stock::deduct`]),
//! the reads of order status and of the whole sale, and the key layout
//! ([`keys`], the only code that knows it).

mod cancel;
mod compensate;
mod deduct;
mod follow_created;
pub mod keys;
mod rollback;
mod snapshot;
mod status;
pub mod warmup;

pub use cancel::Cancelled;
pub use compensate::{Compensation, CompensationMode};
pub use deduct::Deduction;
pub use keys::{KeyLayout, SaleKeys, SaleLock};
pub use snapshot::{SaleSnapshot, SweepMark};
pub use status::OrderState;

use crate::config::RedisSettings;
use crate::redis_conn::{RedisCallError, RedisConn};
use redis::Script;

/// Redis access for sales and orders.
#[derive(Clone)]
pub struct Stock {
    conn: RedisConn,
    keys: KeyLayout,
}

impl Stock {
    /// Connects (the connection reconnects by itself afterwards).
    pub async fn connect(settings: &RedisSettings) -> Result<Self, RedisCallError> {
        Ok(Self { conn: RedisConn::connect(settings).await?, keys: KeyLayout::new(settings.key_prefix.clone()) })
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

/// `script` ready to run on `keys` (arguments follow).
fn with_keys<'a>(script: &'a Script, keys: &[&String]) -> redis::ScriptInvocation<'a> {
    let mut invocation = script.prepare_invoke();
    for key in keys {
        invocation.key(key.as_str());
    }
    invocation
}
