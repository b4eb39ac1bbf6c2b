//! The relay producer's delivery reports, by wave: the relay sends a
//! user's events one wave at a time ([`crate::relay`]), and a failure
//! reported late, for a wave it stopped waiting for, must not be taken for
//! the next one's.

use parking_lot::Mutex;
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::ClientContext;
use std::sync::atomic::{AtomicU64, Ordering};

/// The relay producer's delivery reports (failures only): which records of
/// which wave failed, and why. A record's opaque is its wave and its index
/// in the turn, so a late report of an earlier wave (one whose wait timed
/// out) is never taken for this one's.
#[derive(Default)]
pub struct Deliveries {
    wave: AtomicU64,
    failed: Mutex<Vec<(usize, KafkaError)>>,
}

/// One wave of records on their way.
pub struct Wave(u64);

impl Wave {
    /// The opaque of the record at `index` of the turn.
    pub fn opaque(&self, index: usize) -> usize {
        ((self.0 as usize) << 32) | index
    }
}

impl Deliveries {
    /// A new wave (the reports of earlier ones dropped).
    pub fn next_wave(&self) -> Wave {
        // Reports of earlier waves are of no use any more.
        self.failed.lock().clear();
        Wave(self.wave.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// The records of `wave` that failed.
    pub fn failures(&self, wave: &Wave) -> Vec<(usize, KafkaError)> {
        let failed = std::mem::take(&mut *self.failed.lock());
        failed
            .into_iter()
            .filter(|(opaque, _)| (*opaque >> 32) as u64 == wave.0 & 0xffff_ffff)
            .map(|(opaque, error)| (opaque & 0xffff_ffff, error))
            .collect()
    }
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
        if let Err((error, _)) = result {
            self.failed.lock().push((opaque, error.clone()));
        }
    }
}
