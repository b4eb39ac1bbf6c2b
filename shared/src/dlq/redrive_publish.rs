//! A redrive's new order published: its record to the orders topic, keyed
//! by its buyer as the edge keys it, with the original's request id and
//! trace and the redrive's headers (run, count, the order it redrives).

use super::Redrive;
use crate::dlq::RunError;
use crate::domain::{OrderId, OrderRecord};
use crate::kafka::{dlq_header, header_str, REQUEST_ID_HEADER, TRACEPARENT_HEADER};
use rdkafka::message::{Header, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::FutureRecord;
use std::time::Duration;

impl Redrive<'_> {
    /// Publishes the new order's record to the orders topic (keyed by its
    /// buyer, as the edge does) and waits for the broker's acknowledgement.
    pub(super) async fn publish(&self, message: &OwnedMessage, record: &OrderRecord) -> Result<(), RunError> {
        let payload = serde_json::to_vec(record).map_err(RunError::failed)?;
        let key = record.user_id.get().to_string();
        let headers = message.headers();
        let count = headers
            .and_then(|h| header_str(h, dlq_header::REPLAY_COUNT))
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0);
        let (count, run_id) = ((count + 1).to_string(), self.audit.id.to_string());
        let original = record.redrive_of.as_ref().map(OrderId::as_str).unwrap_or_default();
        let mut out = OwnedHeaders::new();
        for key in [REQUEST_ID_HEADER, TRACEPARENT_HEADER] {
            if let Some(value) = headers.and_then(|h| header_str(h, key)) {
                out = out.insert(Header { key, value: Some(value) });
            }
        }
        let out = out
            .insert(Header { key: dlq_header::REPLAY_ID, value: Some(run_id.as_str()) })
            .insert(Header { key: dlq_header::REPLAY_COUNT, value: Some(count.as_str()) })
            .insert(Header { key: dlq_header::REDRIVE_OF, value: Some(original) });
        let topics = self.tools.topics();
        let to = || FutureRecord::<str, [u8]>::to(&topics.orders).key(&key).payload(&payload).headers(out.clone());
        self.producer.send(to, Duration::from_secs(10).into()).await.map_err(|error| {
            RunError::failed(anyhow::anyhow!(
                "publishing {} (the sweeper publishes it again if this run does not): {error}",
                record.order_id
            ))
        })?;
        Ok(())
    }
}
