//! Sending records that can never be written to the dead-letter topic, with
//! the original key and value and the headers that say why. Each delivery is
//! awaited and checked before the caller may commit the original offset.

use rdkafka::error::KafkaError;
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use seckill_shared::config::KafkaSettings;
use seckill_shared::domain::FailReason;
use seckill_shared::kafka::renewing::Renewing;
use seckill_shared::kafka::{dlq_headers, Origin};
use std::sync::Arc;
use std::time::Duration;

/// A dead letter that did not reach the topic (the original is not
/// committed, so it is tried again).
#[derive(Debug, thiserror::Error)]
#[error("dead-letter delivery failed: {0}")]
pub struct DeadLetterError(#[from] pub KafkaError);

impl DeadLetterError {
    /// Whether the topic refuses this record for good: trying again cannot
    /// help (it is too large, or not a valid record).
    pub fn is_permanent(&self) -> bool {
        seckill_shared::kafka::refused_for_good(&self.0)
    }
}

/// The dead-letter producer (made anew after a fatal error).
#[derive(Clone)]
pub struct DeadLetters {
    producer: Arc<Renewing<FutureProducer>>,
    topic: String,
    /// How long a send waits for room in the producer's queue.
    queue_timeout: Duration,
    /// The order service's consumer group (Spring's original-consumer-group).
    group: String,
}

impl DeadLetters {
    /// A producer for `topic` (deliveries bounded by the message timeout).
    pub fn new(settings: &KafkaSettings, topic: String) -> anyhow::Result<Self> {
        let queue_timeout = Duration::from_millis(settings.message_timeout_ms);
        let group = seckill_shared::kafka::order_group(settings);
        let make = {
            let settings = settings.clone();
            move || seckill_shared::kafka::producer(&settings)
        };
        let producer = Arc::new(Renewing::new("dead letters", make)?);
        Ok(Self { producer, topic, queue_timeout, group })
    }

    /// The order service's consumer group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// Its producer, for tests that make it fail.
    pub fn producer(&self) -> &Renewing<FutureProducer> {
        &self.producer
    }

    /// Sends `message` unchanged with headers saying why, and waits for the
    /// broker's acknowledgement.
    #[tracing::instrument(name = "dead_letter.send", skip_all, fields(reason = reason.code()))]
    pub async fn send(&self, message: &OwnedMessage, reason: FailReason, error: &str) -> Result<(), DeadLetterError> {
        let origin = Origin {
            topic: message.topic(),
            partition: message.partition(),
            offset: message.offset(),
            timestamp: message.timestamp().to_millis(),
            group: &self.group,
        };
        let headers = dlq_headers(message.headers(), reason.code(), error, origin);
        let record = || {
            let mut record = FutureRecord::<[u8], [u8]>::to(&self.topic).headers(headers.clone());
            if let Some(key) = message.key() {
                record = record.key(key);
            }
            if let Some(payload) = message.payload() {
                record = record.payload(payload);
            }
            record
        };
        // Bounded twice: waiting for room in the queue, and the delivery by
        // the producer's message timeout.
        self.producer.send(record, Timeout::After(self.queue_timeout)).await?;
        metrics::counter!("seckill_order_dlq_total", "reason" => reason.code()).increment(1);
        Ok(())
    }
}
