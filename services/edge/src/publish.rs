//! Publishing accepted orders to `seckill.orders`, and telling apart a
//! publish that definitely failed (safe to roll back) from one whose outcome
//! is unknown (the record may be in the log: never roll back).

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use seckill_shared::config::KafkaSettings;
use seckill_shared::domain::OrderRecord;
use seckill_shared::kafka::{REQUEST_ID_HEADER, TRACEPARENT_HEADER};
use std::time::Duration;

/// How a publish ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// In the log, acknowledged by all in-sync replicas.
    Delivered,
    /// Definitely not in the log (never left the client, or refused before
    /// being appended): the deduction may be rolled back.
    NotPersisted(String),
    /// May or may not be in the log (timed out in flight): the deduction must
    /// stay; the reservation sweeper or the order service settles it.
    Ambiguous(String),
}

/// What follows the order through the pipeline as record headers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Trace<'a> {
    /// The request's id.
    pub request_id: Option<&'a str>,
    /// The request's W3C trace context.
    pub traceparent: Option<&'a str>,
}

/// The edge's producer.
#[derive(Clone)]
pub struct Publisher {
    producer: FutureProducer,
    topic: String,
    /// Upper bound on waiting for a delivery report.
    report_timeout: Duration,
}

impl Publisher {
    /// A producer for `topic`.
    pub fn new(settings: &KafkaSettings, topic: String) -> anyhow::Result<Self> {
        Ok(Self {
            producer: seckill_shared::kafka::producer(settings)?,
            topic,
            report_timeout: Duration::from_millis(settings.message_timeout_ms + 2_000),
        })
    }

    /// Publishes one order (key = user id) and awaits its delivery report.
    pub async fn publish(&self, record: &OrderRecord, trace: Trace<'_>) -> PublishOutcome {
        let payload = match serde_json::to_vec(record) {
            Ok(payload) => payload,
            Err(error) => return PublishOutcome::NotPersisted(format!("encoding the record: {error}")),
        };
        let key = record.user_id.get().to_string();
        let mut headers = OwnedHeaders::new_with_capacity(2);
        for (key, value) in [(REQUEST_ID_HEADER, trace.request_id), (TRACEPARENT_HEADER, trace.traceparent)] {
            if let Some(value) = value {
                headers = headers.insert(Header { key, value: Some(value) });
            }
        }
        let future_record = FutureRecord::to(&self.topic).key(&key).payload(&payload).headers(headers);
        // Enqueue errors (queue full, unknown topic, ...) mean the record never
        // left this process.
        let delivery = match self.producer.send_result(future_record) {
            Ok(delivery) => delivery,
            Err((error, _)) => return PublishOutcome::NotPersisted(error.to_string()),
        };
        match tokio::time::timeout(self.report_timeout, delivery).await {
            Ok(Ok(Ok(_))) => PublishOutcome::Delivered,
            Ok(Ok(Err((error, _)))) => classify(&error),
            // The producer went away with the record possibly sent.
            Ok(Err(_canceled)) => PublishOutcome::Ambiguous("producer dropped the delivery report".into()),
            Err(_) => PublishOutcome::Ambiguous(format!("no delivery report within {:?}", self.report_timeout)),
        }
    }

    /// Whether a broker answers a metadata request.
    pub fn ping(&self, timeout: Duration) -> Result<(), KafkaError> {
        self.producer.client().fetch_metadata(Some(&self.topic), timeout).map(drop)
    }

    /// Waits for queued records to be delivered.
    pub fn flush(&self, timeout: Duration) {
        if let Err(error) = self.producer.flush(timeout) {
            tracing::warn!(%error, "producer flush did not complete");
        }
    }
}

/// Errors that prove the record was not appended. Everything else — above
/// all a timeout, which is what a broker that went away mid-flight gives —
/// is ambiguous.
fn classify(error: &KafkaError) -> PublishOutcome {
    let code = error.rdkafka_error_code();
    let definite = matches!(
        code,
        Some(
            RDKafkaErrorCode::UnknownTopicOrPartition
                | RDKafkaErrorCode::UnknownTopic
                | RDKafkaErrorCode::UnknownPartition
                | RDKafkaErrorCode::MessageSizeTooLarge
                | RDKafkaErrorCode::InvalidMessageSize
                | RDKafkaErrorCode::InvalidMessage
                | RDKafkaErrorCode::QueueFull
                | RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::ClusterAuthorizationFailed
                | RDKafkaErrorCode::InvalidRecord
                | RDKafkaErrorCode::InvalidRequiredAcks
        )
    );
    if definite {
        PublishOutcome::NotPersisted(error.to_string())
    } else {
        PublishOutcome::Ambiguous(error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_ambiguous_and_unknown_topics_definite() {
        let timeout = KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut);
        assert!(matches!(classify(&timeout), PublishOutcome::Ambiguous(_)));
        let unknown = KafkaError::MessageProduction(RDKafkaErrorCode::UnknownTopic);
        assert!(matches!(classify(&unknown), PublishOutcome::NotPersisted(_)));
    }
}
