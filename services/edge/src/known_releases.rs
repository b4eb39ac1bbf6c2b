//! Which activities are releases (one limit per customer across their
//! sizes), as this edge knows them: each read from Redis at most once a
//! second, so an order of a sale in no release pays one map read and no
//! call (a release declared takes effect on every edge within a second).

use parking_lot::RwLock;
use seckill_shared::domain::ActivityId;
use seckill_shared::stock::Stock;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long this edge keeps what it read of an activity.
const KEPT: Duration = Duration::from_secs(1);

/// Activities kept before the stale ones are dropped.
const MOST: usize = 4_096;

/// The activities this edge read, and whether each is a release.
pub struct Releases {
    stock: Stock,
    known: RwLock<HashMap<ActivityId, (Instant, bool)>>,
}

impl Releases {
    /// Read from `stock`.
    pub fn new(stock: Stock) -> Self {
        Self { stock, known: RwLock::default() }
    }

    /// Whether `activity` is a release. Not read (Redis failing): taken to
    /// be one, so the order asks its release (which answers whether it is
    /// one) rather than pass a limit unseen.
    pub async fn is_release(&self, activity: ActivityId) -> bool {
        if let Some((read_at, release)) = self.known.read().get(&activity) {
            if read_at.elapsed() < KEPT {
                return *release;
            }
        }
        let Ok(limit) = self.stock.release_limit(activity).await else {
            return true;
        };
        let mut known = self.known.write();
        if known.len() >= MOST {
            known.retain(|_, (read_at, _)| read_at.elapsed() < KEPT);
        }
        known.insert(activity, (Instant::now(), limit.is_some()));
        limit.is_some()
    }

    /// Forgets what this edge read of `activity` (it was declared through
    /// this edge).
    pub fn forget(&self, activity: ActivityId) {
        self.known.write().remove(&activity);
    }
}
