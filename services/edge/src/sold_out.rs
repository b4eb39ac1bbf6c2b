//! The local sold-out flag: once Redis says a sale is sold out, this edge
//! answers 410 without asking Redis again — for a short while only. The flag
//! is a cache: units come back (rollback, compensation, sweeper, re-warm),
//! and every edge must notice within about a second or they never sell. A
//! time-to-live does that without any coordination between edges.

use parking_lot::RwLock;
use seckill_shared::domain::SaleKey;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Sales this edge believes sold out, and until when it believes it.
pub struct SoldOutFlags {
    ttl: Duration,
    flags: RwLock<HashMap<SaleKey, Instant>>,
}

impl SoldOutFlags {
    /// Flags trusted for `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self { ttl, flags: RwLock::new(HashMap::new()) }
    }

    /// Whether the sale is flagged sold out right now.
    pub fn is_sold_out(&self, sale: SaleKey) -> bool {
        let flags = self.flags.read();
        flags.get(&sale).is_some_and(|until| Instant::now() < *until)
    }

    /// Remembers that Redis said the sale is sold out.
    pub fn mark(&self, sale: SaleKey) {
        if self.ttl.is_zero() {
            return;
        }
        let mut flags = self.flags.write();
        flags.insert(sale, Instant::now() + self.ttl);
    }

    /// Forgets the flag (a unit came back through this edge).
    pub fn clear(&self, sale: SaleKey) {
        let mut flags = self.flags.write();
        flags.remove(&sale);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_expire_and_clear() {
        let sale = SaleKey::from_raw(1, 2).unwrap();
        let flags = SoldOutFlags::new(Duration::from_millis(30));
        assert!(!flags.is_sold_out(sale));
        flags.mark(sale);
        assert!(flags.is_sold_out(sale));
        flags.clear(sale);
        assert!(!flags.is_sold_out(sale), "cleared flags are gone at once");
        flags.mark(sale);
        std::thread::sleep(Duration::from_millis(40));
        assert!(!flags.is_sold_out(sale), "a flag is trusted only for its time to live");
    }
}
