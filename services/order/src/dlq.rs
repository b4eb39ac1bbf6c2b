//! Sending records that can never be written to the dead-letter topic, with
//! the original key and value and the headers that say why. Each delivery is
//! awaited and checked before the caller may commit the original offset.

use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{FutureProducer, FutureRecord};
use seckill_shared::kafka::dlq_headers;
use std::time::Duration;

/// Where a dead-lettered record came from.
pub struct Origin<'a> {
    /// Original topic.
    pub topic: &'a str,
    /// Original partition.
    pub partition: i32,
    /// Original offset.
    pub offset: i64,
    /// Original key.
    pub key: Option<&'a [u8]>,
    /// Original value, unchanged.
    pub payload: Option<&'a [u8]>,
    /// Original headers (request id, earlier attempts).
    pub headers: Option<&'a OwnedHeaders>,
}

/// The dead-letter producer.
#[derive(Clone)]
pub struct DeadLetters {
    producer: FutureProducer,
    topic: String,
}

impl DeadLetters {
    /// A producer for `topic`.
    pub fn new(producer: FutureProducer, topic: String) -> Self {
        Self { producer, topic }
    }

    /// Sends one record and waits for the broker's acknowledgement.
    pub async fn send(&self, origin: &Origin<'_>, reason: &str, error: &str) -> Result<(), String> {
        let headers = dlq_headers(origin.headers, reason, error, origin.topic, origin.partition, origin.offset);
        let mut record = FutureRecord::<[u8], [u8]>::to(&self.topic).headers(headers);
        if let Some(key) = origin.key {
            record = record.key(key);
        }
        if let Some(payload) = origin.payload {
            record = record.payload(payload);
        }
        match self.producer.send(record, Duration::from_secs(5)).await {
            Ok(_) => {
                metrics::counter!("seckill_order_dlq_total", "reason" => reason.to_owned()).increment(1);
                Ok(())
            }
            Err((error, _)) => Err(format!("dead-letter delivery failed: {error}")),
        }
    }
}
