//! Sending a turn's events to `seckill.order-events` and knowing that the
//! broker has every one: a threaded producer that reports failures only,
//! watched until nothing is in flight, one wave of records at a time so one
//! user's events never overtake each other.

use super::RelayError;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use seckill_shared::outbox::{self, EventRow};
use seckill_shared::parked::EventSource;
use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One event on its way: its record key and value, the row it came from
/// (for the headers), and where it came from (to park it by).
pub struct Outgoing<'a> {
    pub key: String,
    pub payload: Vec<u8>,
    pub row: &'a EventRow,
    pub source: EventSource,
}

impl<'a> Outgoing<'a> {
    /// `row` as the record consumers receive; `None` for a row that is no
    /// event (the caller parks it).
    pub fn new(row: &'a EventRow, source: EventSource) -> Result<Self, outbox::NotAnEvent> {
        let (key, payload) = outbox::keyed(&row.event()?);
        Ok(Self { key, payload, row, source })
    }
}

/// Whether the broker (or the client) refuses this record whatever is
/// retried: too large, or a record it calls invalid.
fn undeliverable(error: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode::{InvalidMessage, InvalidMessageSize, InvalidRecord, MessageSizeTooLarge};
    matches!(
        error.rdkafka_error_code(),
        Some(MessageSizeTooLarge | InvalidMessageSize | InvalidRecord | InvalidMessage)
    )
}

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
struct Wave(u64);

impl Wave {
    /// The opaque of the record at `index` of the turn.
    fn opaque(&self, index: usize) -> usize {
        ((self.0 as usize) << 32) | index
    }
}

impl Deliveries {
    fn next_wave(&self) -> Wave {
        // Reports of earlier waves are of no use any more.
        self.failed.lock().expect("delivery failures").clear();
        Wave(self.wave.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// The records of `wave` that failed.
    fn failures(&self, wave: &Wave) -> Vec<(usize, KafkaError)> {
        let failed = std::mem::take(&mut *self.failed.lock().expect("delivery failures"));
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
            self.failed.lock().expect("delivery failures").push((opaque, error.clone()));
        }
    }
}

/// Sends a turn's events to `topic` and waits until the broker has every
/// one (or `timeout` passes). A user's events go out one wave at a time —
/// every user's first event of the turn, then their second, … — and a wave
/// is sent only once the one before it was delivered, so an event that
/// cannot be delivered stops the ones after it of the same user: a consumer
/// never sees a user's later event before an earlier one (the next turn
/// sends again from the relay's position, in order, at least once). A
/// drain, one event per user, is one wave. An event the broker refuses for
/// good (too large, invalid) is parked and passed, or it would stop every
/// event behind it.
pub async fn deliver(
    producer: &ThreadedProducer<Deliveries>,
    db: &PgPool,
    topic: &str,
    timeout: Duration,
    outgoing: &[Outgoing<'_>],
) -> Result<(), RelayError> {
    let mut wave_of: HashMap<&str, usize> = HashMap::with_capacity(outgoing.len());
    let mut waves: Vec<Vec<usize>> = Vec::new();
    for (i, event) in outgoing.iter().enumerate() {
        let wave = wave_of.entry(event.key.as_str()).or_insert(0);
        if waves.len() <= *wave {
            waves.push(Vec::new());
        }
        waves[*wave].push(i);
        *wave += 1;
    }
    for wave in waves {
        let sent = producer.context().next_wave();
        let mut refused = Vec::new();
        for &i in &wave {
            let event = &outgoing[i];
            let headers = event.row.trace().headers();
            let mut record = BaseRecord::with_opaque_to(topic, sent.opaque(i))
                .key(&event.key)
                .payload(&event.payload)
                .headers(headers);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    // The local queue is full: let deliveries drain it.
                    Err((error, back)) if error.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                        record = back;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err((error, _)) if undeliverable(&error) => {
                        refused.push((i, error));
                        break;
                    }
                    Err((error, _)) => return Err(RelayError::Kafka(error)),
                }
            }
        }
        // Every record of the wave acknowledged or failed (a failure's
        // report is served by the producer's thread before the count
        // drops). Watched, not flushed: librdkafka's flush waits up to
        // 100 ms between looks when no report comes.
        let give_up = Instant::now() + timeout;
        while producer.in_flight_count() > 0 {
            if Instant::now() >= give_up {
                return Err(RelayError::Kafka(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut)));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        refused.extend(producer.context().failures(&sent));
        for (i, error) in refused {
            if !undeliverable(&error) {
                return Err(RelayError::Kafka(error));
            }
            let event = &outgoing[i];
            seckill_shared::parked::park_undeliverable_event(db, topic, event.source, event.row, &error.to_string())
                .await?;
        }
    }
    Ok(())
}
