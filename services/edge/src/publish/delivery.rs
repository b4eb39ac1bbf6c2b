//! The edge producer's context: each record's delivery report, with
//! librdkafka's own verdict on whether the record may be in the log, handed
//! to the request that waits for it; and the producer's fatal errors.

use super::circuit::Circuit;
use rdkafka::bindings::{rd_kafka_message_status, rd_kafka_msg_status_t};
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::oneshot;

/// Whether a record that failed may be in the log anyway (librdkafka's
/// `rd_kafka_message_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// Never sent, or refused before being appended.
    NotPersisted,
    /// Sent, with no answer (a timeout, a connection lost mid-request; or a
    /// later retry failed after an earlier attempt timed out in flight).
    PossiblyPersisted,
    /// Acknowledged by the broker.
    Persisted,
}

/// One record's delivery report.
#[derive(Debug)]
pub enum Report {
    /// In the log, acknowledged by all in-sync replicas.
    Delivered,
    /// Failed; the error and whether the record may be in the log anyway.
    Failed { error: KafkaError, persistence: Persistence },
}

/// Hands each delivery report to its waiting request, notes fatal producer
/// errors, and feeds the Kafka circuit librdkafka's view of the brokers.
pub struct DeliveryContext {
    /// Set by a fatal error: this producer must not be used again.
    pub fatal: Arc<AtomicBool>,
    /// Opened when every broker is down, or none is up.
    pub circuit: Arc<Circuit>,
    /// Set when the circuit opened because every broker is down: records
    /// still queued (never sent) can be failed at once instead of waiting
    /// for their delivery timeout.
    pub purge_queued: Arc<AtomicBool>,
    /// Whether the idempotent producer holds its producer id, from the
    /// statistics: until it does, no record can be sent (a broker just
    /// started answers "coordinator load in progress" for seconds while it
    /// loads its partitions).
    pub has_producer_id: Arc<AtomicBool>,
}

/// The requests to the brokers `/metrics` counts (librdkafka's names).
const REQUESTS_SHOWN: [&str; 4] = ["Produce", "Metadata", "ListOffsets", "InitProducerId"];

impl ClientContext for DeliveryContext {
    fn error(&self, error: KafkaError, reason: &str) {
        match error.rdkafka_error_code() {
            Some(RDKafkaErrorCode::Fatal) => {
                self.fatal.store(true, Ordering::SeqCst);
                tracing::error!(%error, reason, "the producer failed fatally; it will be rebuilt");
            }
            Some(RDKafkaErrorCode::AllBrokersDown) => {
                if self.circuit.open("every broker is down") {
                    self.purge_queued.store(true, Ordering::SeqCst);
                }
                tracing::warn!(%error, reason, "producer error");
            }
            _ => tracing::warn!(%error, reason, "producer error"),
        }
    }

    fn stats(&self, statistics: Statistics) {
        let assigned = statistics.eos.as_ref().is_some_and(|eos| eos.idemp_state == "Assigned");
        self.has_producer_id.store(assigned, Ordering::SeqCst);
        // The brokers learned from the cluster's metadata, once there are
        // any (a bootstrap entry stands for an address, and may idle once
        // the real brokers are known); until then, the bootstrap ones. A
        // learned broker still in INIT was never tried (librdkafka connects
        // to a broker only once it leads a partition written to): it says
        // nothing about the cluster.
        let learned: Vec<_> = statistics.brokers.values().filter(|b| b.nodeid >= 0 && b.state != "INIT").collect();
        let considered: Vec<_> = if learned.is_empty() { statistics.brokers.values().collect() } else { learned };
        if !considered.is_empty() {
            self.circuit.brokers_seen(considered.iter().any(|b| b.state == "UP"));
        }
        // What the producer has sent the brokers, by request, as librdkafka
        // counts it (readiness must not turn probes into broker requests).
        let mut sent: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
        for (request, count) in statistics.brokers.values().flat_map(|b| b.req.iter()) {
            *sent.entry(request.as_str()).or_default() += count;
        }
        for request in REQUESTS_SHOWN {
            let count = sent.get(request).copied().unwrap_or(0);
            metrics::gauge!("seckill_edge_kafka_requests_sent", "request" => request).set(count as f64);
        }
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<oneshot::Sender<Report>>;

    fn delivery(&self, result: &DeliveryResult<'_>, waiting: Self::DeliveryOpaque) {
        let report = match result {
            Ok(_) => Report::Delivered,
            Err((error, message)) => Report::Failed { error: error.clone(), persistence: persistence(message) },
        };
        // The request may have stopped waiting (its own deadline): the
        // reservation sweeper settles such an order.
        let _ = waiting.send(report);
    }
}

/// librdkafka's persistence status of a record, read in its delivery
/// callback.
#[allow(unsafe_code)]
fn persistence(message: &BorrowedMessage<'_>) -> Persistence {
    // SAFETY: `message` wraps the `rd_kafka_message_t` librdkafka passes to
    // the delivery callback, valid for the whole callback; the function only
    // reads its status field.
    let status = unsafe { rd_kafka_message_status(message.ptr()) };
    match status {
        rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_NOT_PERSISTED => Persistence::NotPersisted,
        rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_POSSIBLY_PERSISTED => Persistence::PossiblyPersisted,
        rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_PERSISTED => Persistence::Persisted,
    }
}

/// Raises a fatal error in `producer` with librdkafka's own test hook.
#[cfg(feature = "fault-injection")]
pub fn inject_fatal_error(producer: &rdkafka::producer::ThreadedProducer<DeliveryContext>) {
    use rdkafka::producer::Producer;
    seckill_shared::kafka::renewing::inject(producer.client());
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::statistics::ExactlyOnceSemantics;

    fn context() -> DeliveryContext {
        DeliveryContext {
            fatal: Arc::default(),
            circuit: Arc::default(),
            purge_queued: Arc::default(),
            has_producer_id: Arc::default(),
        }
    }

    fn with_idempotence(state: &str) -> Statistics {
        let eos = ExactlyOnceSemantics { idemp_state: state.into(), ..Default::default() };
        Statistics { eos: Some(eos), ..Default::default() }
    }

    #[test]
    fn the_producer_id_is_had_only_while_librdkafka_says_assigned() {
        let context = context();
        assert!(!context.has_producer_id.load(Ordering::SeqCst), "none before the first statistics");
        context.stats(with_idempotence("WaitPID"));
        assert!(!context.has_producer_id.load(Ordering::SeqCst), "still asking for it");
        context.stats(with_idempotence("Assigned"));
        assert!(context.has_producer_id.load(Ordering::SeqCst));
        context.stats(with_idempotence("DrainReset"));
        assert!(!context.has_producer_id.load(Ordering::SeqCst), "lost again");
        context.stats(Statistics::default());
        assert!(!context.has_producer_id.load(Ordering::SeqCst), "statistics without it say nothing of one");
    }
}
