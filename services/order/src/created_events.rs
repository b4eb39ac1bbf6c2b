//! The CREATED event of every order a batch wrote — or found written: a
//! redelivered batch sends each of its orders' events again — produced by
//! the order service itself, after the batch's transaction committed and
//! before its offsets are committed. No outbox row, no relay: the rows
//! carry their record's position instead (migration
//! `…15_created_events_from_order_service.sql`), and the relay holds an
//! order's later events until the order group's committed offset has
//! passed it (`relay_hold.rs`).
//!
//! An event is the same whenever it is produced again: its `eventId`
//! (`<orderId>:CREATED`), its key (the user), and its value — `occurredAt`
//! is when the edge accepted the order, which the record carries.

use crate::relay_waves::{self, Deliveries};
use crate::store::Sources;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use seckill_shared::config::KafkaSettings;
use seckill_shared::domain::{OrderEvent, OrderRecord};
use seckill_shared::kafka::cloud_event::{self, Attributes};
use seckill_shared::kafka::renewing::Renewing;
use seckill_shared::ops::trace_export::traceparent_of;
use std::sync::Arc;
use std::time::Duration;

/// The producer of one worker's CREATED events (made anew after a fatal
/// error). Delivery reports of failures only: a batch waits for all its
/// records at once (the producer's in-flight count), not for each one's
/// report — a report and its future per event cost the service more than
/// the event.
#[derive(Clone)]
pub struct CreatedEvents {
    producer: Arc<Renewing<ThreadedProducer<Deliveries>>>,
    topic: String,
    /// `ce_source`.
    source: String,
    /// The longest wait for every delivery of one batch.
    timeout: Duration,
}

impl CreatedEvents {
    /// A producer for `topic` (`seckill.order-events`).
    pub fn new(settings: &KafkaSettings, topic: String) -> anyhow::Result<Self> {
        let make = {
            let settings = settings.clone();
            move || {
                Ok(seckill_shared::kafka::producer_config(&settings)
                    .set("delivery.report.only.error", "true")
                    .create_with_context(Deliveries::default())?)
            }
        };
        let producer = Arc::new(Renewing::new("created events", make)?);
        let timeout = Duration::from_millis(settings.message_timeout_ms) + Duration::from_secs(5);
        Ok(Self { producer, topic, source: settings.cloudevents_source.clone(), timeout })
    }

    /// Produces the CREATED event of each of `orders` (each naming its
    /// row's round) and waits until the broker has every one: an error when
    /// any was not delivered (the caller commits nothing; the batch is done
    /// again, and every event sent again).
    #[tracing::instrument(name = "created_events.send", level = "debug", skip_all, fields(orders = orders.len()))]
    pub async fn send(&self, orders: &[&OrderRecord], sources: &Sources<'_>) -> Result<(), KafkaError> {
        if orders.is_empty() {
            return Ok(());
        }
        let producer = self.producer.get();
        let wave = producer.context().next_wave();
        // Exported, one span per event, ended once the batch is delivered.
        let mut spans = Vec::new();
        for (i, &order) in orders.iter().enumerate() {
            let source = sources.get(order.order_id.as_str()).copied().unwrap_or_default();
            let event = OrderEvent::created(order);
            let payload = serde_json::to_vec(&event).expect("an order event serializes");
            let key = event.user_id.to_string();
            let span = seckill_shared::kafka::spans::send(&self.topic, &key, source.trace.traceparent);
            let mut trace = source.trace;
            let carried = traceparent_of(&span);
            trace.traceparent = carried.as_deref().or(trace.traceparent);
            let time = chrono::DateTime::from_timestamp_millis(event.occurred_at).unwrap_or_default();
            let attributes = Attributes {
                id: &event.event_id,
                kind: &event.kind,
                subject: event.order_id.as_str(),
                time,
                source: &self.source,
            };
            let headers = cloud_event::headers(trace, attributes);
            spans.push(span);
            let record =
                BaseRecord::with_opaque_to(&self.topic, wave.opaque(i)).key(&key).payload(&payload).headers(headers);
            relay_waves::queue(&producer, record).await?;
        }
        relay_waves::settled(&producer, self.timeout).await?;
        drop(spans);
        if let Some((_, error)) = producer.context().failures(&wave).into_iter().next() {
            return Err(error);
        }
        metrics::counter!("seckill_order_created_events_total").increment(orders.len() as u64);
        Ok(())
    }
}
