//! The relay producer's delivery reports, by wave: the relay sends a
//! user's events one wave at a time ([`crate::relay`]), and a failure
//! reported late, for a wave it stopped waiting for, must not be taken for
//! the next one's. The relay and the CREATED events' producer
//! ([`crate::created_events`]) queue and watch their waves alike.

use parking_lot::Mutex;
use rdkafka::error::KafkaError;
use rdkafka::message::ToBytes;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// Queues `record`, waiting while the producer's local queue is full (the
/// deliveries drain it); the error of a record it refuses otherwise.
pub async fn queue<K, P>(
    producer: &ThreadedProducer<Deliveries>,
    mut record: BaseRecord<'_, K, P, usize>,
) -> Result<(), KafkaError>
where
    K: ToBytes + ?Sized,
    P: ToBytes + ?Sized,
{
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((error, back)) if error.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                record = back;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err((error, _)) => return Err(error),
        }
    }
}

/// Waits until every queued record is acknowledged or failed, for at most
/// `timeout` (a failure's report is served by the producer's thread before
/// the count drops). Watched, not flushed: librdkafka's flush waits up to
/// 100 ms between looks when no report comes.
pub async fn settled(producer: &ThreadedProducer<Deliveries>, timeout: Duration) -> Result<(), KafkaError> {
    let give_up = Instant::now() + timeout;
    while producer.in_flight_count() > 0 {
        if Instant::now() >= give_up {
            return Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}
