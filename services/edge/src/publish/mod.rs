//! Publishing accepted orders to `seckill.orders`, and telling apart a
//! publish that definitely failed (safe to roll back) from one whose
//! outcome is unknown (the record may be in the log: never roll back).
//!
//! The verdict is librdkafka's own persistence status of the record, read
//! in the delivery callback ([`delivery`]): an error code alone cannot say
//! whether an earlier attempt of the same record reached the log (a broker
//! error on a retry after a timed-out attempt may be "possibly persisted").
//! A fatal error of the idempotent producer retires it: the edge reports
//! not ready and answers 503 before deducting anything, and the producer is
//! rebuilt on the next request or readiness probe.

mod circuit;
mod delivery;

pub use circuit::{Admission, Circuit, CircuitOpen, Probe};
pub use delivery::{Persistence, Report};

use delivery::DeliveryContext;
use parking_lot::RwLock;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use seckill_shared::config::KafkaSettings;
use seckill_shared::domain::OrderRecord;
pub use seckill_shared::kafka::Trace;
use seckill_shared::ops::trace_export;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tracing::Instrument;

/// How a publish ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// In the log, acknowledged by all in-sync replicas.
    Delivered,
    /// Definitely not in the log (never left the client, or refused before
    /// being appended): the deduction may be rolled back.
    NotPersisted(String),
    /// May or may not be in the log: the deduction must stay; the
    /// reservation sweeper or the order service settles it.
    Ambiguous(String),
}

/// Why the producer cannot send records now (for `/readyz`).
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    /// No broker answered.
    #[error("kafka unreachable: {0:#}")]
    Unreachable(anyhow::Error),
    /// A broker answered, but a record sent now would wait: the topic is
    /// missing, a partition has no leader, the producer has no id yet or
    /// was retired by a fatal error.
    #[error("kafka not taking records: {0}")]
    NotTaking(String),
}

impl NotReady {
    /// The word or two `/readyz` answers.
    pub fn word(&self) -> &'static str {
        match self {
            Self::Unreachable(_) => "kafka unreachable",
            Self::NotTaking(_) => "kafka not taking records",
        }
    }
}

/// The producer was retired by a fatal error; a new one is being made.
#[derive(Debug, thiserror::Error)]
#[error("the Kafka producer failed fatally and is being rebuilt")]
pub struct ProducerRetired;

/// Why a request may not deduct now: nothing it deducted could be published.
#[derive(Debug, thiserror::Error)]
pub enum NotAdmitted {
    #[error(transparent)]
    Retired(#[from] ProducerRetired),
    #[error(transparent)]
    CircuitOpen(#[from] CircuitOpen),
}

/// One producer and the flags its callbacks set.
struct Live {
    producer: ThreadedProducer<DeliveryContext>,
    fatal: Arc<AtomicBool>,
    purge_queued: Arc<AtomicBool>,
    has_producer_id: Arc<AtomicBool>,
}

impl Live {
    fn create(settings: &KafkaSettings, circuit: Arc<Circuit>) -> anyhow::Result<Self> {
        let fatal = Arc::new(AtomicBool::new(false));
        let purge_queued = Arc::new(AtomicBool::new(false));
        let has_producer_id = Arc::new(AtomicBool::new(false));
        let context = DeliveryContext {
            fatal: fatal.clone(),
            circuit,
            purge_queued: purge_queued.clone(),
            has_producer_id: has_producer_id.clone(),
        };
        let mut config = seckill_shared::kafka::producer_config(settings);
        // The circuit reads the brokers' states from the statistics, and
        // readiness the producer id.
        config.set("statistics.interval.ms", "1000");
        let producer = config.create_with_context(context)?;
        Ok(Self { producer, fatal, purge_queued, has_producer_id })
    }

    fn is_fatal(&self) -> bool {
        self.fatal.load(Ordering::SeqCst) || self.producer.client().fatal_error().is_some()
    }
}

/// The edge's producer (cheap to clone: clones share it).
#[derive(Clone)]
pub struct Publisher {
    live: Arc<RwLock<Arc<Live>>>,
    /// Open while no broker takes records: requests deduct nothing.
    circuit: Arc<Circuit>,
    settings: Arc<KafkaSettings>,
    topic: Arc<str>,
    /// How long until a publish's outcome is known: the delivery timeout
    /// and a margin. The reservation is not swept before it has passed.
    deadline: Duration,
    /// Set while a retired producer is being replaced (off the requests'
    /// path), so one replacement runs at a time.
    rebuilding: Arc<AtomicBool>,
}

impl Publisher {
    /// A producer for `topic`.
    pub fn new(settings: &KafkaSettings, topic: String) -> anyhow::Result<Self> {
        let circuit = Arc::new(Circuit::default());
        Ok(Self {
            live: Arc::new(RwLock::new(Arc::new(Live::create(settings, circuit.clone())?))),
            circuit,
            settings: Arc::new(settings.clone()),
            topic: topic.into(),
            deadline: Duration::from_millis(settings.message_timeout_ms + 2_000),
            rebuilding: Arc::new(AtomicBool::new(false)),
        })
    }

    /// How long until a publish's outcome is known.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    fn live(&self) -> Arc<Live> {
        self.live.read().clone()
    }

    /// `Ok` when the producer can take records. A producer retired by a
    /// fatal error answers `Err` (the caller has deducted nothing and
    /// answers 503) and is replaced on a blocking thread of its own: no
    /// request waits for a new client to start.
    pub fn ensure_usable(&self) -> Result<(), ProducerRetired> {
        if !self.live().is_fatal() {
            return Ok(());
        }
        self.replace_in_background();
        Err(ProducerRetired)
    }

    /// Replaces the retired producer off the requests' path, once at a time.
    fn replace_in_background(&self) {
        if self.rebuilding.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            // Another replacement may have finished just before this one.
            if this.live().is_fatal() {
                match Live::create(&this.settings, this.circuit.clone()) {
                    Ok(fresh) => {
                        tracing::warn!("the producer was retired by a fatal error; a new one replaces it");
                        metrics::counter!("seckill_edge_producer_rebuilt_total").increment(1);
                        // In-flight records of the old one still get their
                        // delivery reports, each judged by its own status.
                        *this.live.write() = Arc::new(fresh);
                    }
                    Err(error) => {
                        tracing::error!(%error, "could not create a new producer; the next request tries again")
                    }
                }
            }
            this.rebuilding.store(false, Ordering::Release);
        });
    }

    /// Whether a request may deduct now: the producer is usable and the
    /// circuit lets it through (as the open circuit's probe, perhaps).
    /// Records still queued when every broker went down are failed now
    /// (never sent: their deductions are rolled back at once).
    pub fn admit(&self) -> Result<Admission<'_>, NotAdmitted> {
        self.ensure_usable()?;
        let live = self.live();
        if live.purge_queued.swap(false, Ordering::SeqCst) {
            use rdkafka::producer::PurgeConfig;
            live.producer.purge(PurgeConfig::default().queue().non_blocking());
        }
        Ok(self.circuit.admit()?)
    }

    /// Whether the circuit is open (no broker takes records).
    pub fn circuit_open(&self) -> bool {
        self.circuit.is_open()
    }

    /// Publishes one order (key = user id), awaits its delivery report, and
    /// tells the circuit how it went.
    pub async fn publish(&self, record: &OrderRecord, trace: Trace<'_>, admission: Admission<'_>) -> PublishOutcome {
        // Exported, the record carries this span's context: the order
        // service's consume span is its child.
        let span = seckill_shared::kafka::spans::send(&self.topic, &record.user_id, trace.traceparent);
        let traceparent = trace_export::traceparent_of(&span);
        let trace = Trace { traceparent: traceparent.as_deref().or(trace.traceparent), ..trace };
        let outcome = self.send(record, trace).instrument(span.clone()).await;
        if outcome != PublishOutcome::Delivered {
            span.record("otel.status_code", "ERROR");
        }
        match (&outcome, admission) {
            (PublishOutcome::Delivered, Admission::Probe(probe)) => probe.delivered(),
            (PublishOutcome::Delivered, Admission::Through) => self.circuit.delivered(),
            (PublishOutcome::NotPersisted(why) | PublishOutcome::Ambiguous(why), admission) => {
                self.circuit.open(why);
                if let Admission::Probe(probe) = admission {
                    probe.failed();
                }
            }
        }
        outcome
    }

    async fn send(&self, record: &OrderRecord, trace: Trace<'_>) -> PublishOutcome {
        let payload = match serde_json::to_vec(record) {
            Ok(payload) => payload,
            Err(error) => return PublishOutcome::NotPersisted(format!("encoding the record: {error}")),
        };
        let key = record.user_id.get().to_string();
        let headers = trace.headers();
        let (report, reported) = oneshot::channel();
        let base =
            BaseRecord::with_opaque_to(&self.topic, Box::new(report)).key(&key).payload(&payload).headers(headers);
        // An enqueue error (queue full, unknown partition, producer failed)
        // means the record never left this process.
        if let Err((error, _)) = self.live().producer.send(base) {
            return PublishOutcome::NotPersisted(error.to_string());
        }
        match tokio::time::timeout(self.deadline, reported).await {
            Ok(Ok(report)) => classify(report),
            // The producer went away with the record possibly sent.
            Ok(Err(_)) => PublishOutcome::Ambiguous("producer dropped the delivery report".into()),
            Err(_) => PublishOutcome::Ambiguous(format!("no delivery report within {:?}", self.deadline)),
        }
    }

    /// Whether records can be sent now: the producer is usable and holds its
    /// producer id, and every partition of the topic has a leader that
    /// answers for it. A broker that answers metadata may still be loading
    /// its partitions (a restart with a few thousand of them takes seconds
    /// here): a record sent then waits out its delivery timeout.
    pub fn ping(&self, timeout: Duration) -> Result<(), NotReady> {
        self.ensure_usable().map_err(|retired| NotReady::NotTaking(retired.to_string()))?;
        let live = self.live();
        let metadata = live
            .producer
            .client()
            .fetch_metadata(Some(&self.topic), timeout)
            .map_err(|error| NotReady::Unreachable(error.into()))?;
        let topic = metadata.topics().iter().find(|t| t.name() == &*self.topic);
        let Some(topic) = topic.filter(|t| t.error().is_none() && !t.partitions().is_empty()) else {
            return Err(NotReady::NotTaking(format!("topic {} is not in the brokers' metadata", self.topic)));
        };
        if let Some(partition) = topic.partitions().iter().find(|p| p.leader() < 0 || p.error().is_some()) {
            return Err(NotReady::NotTaking(format!("partition {} of {} has no leader", partition.id(), self.topic)));
        }
        // The metadata names a leader before that broker acts as one (it
        // answers a produce NOT_LEADER_OR_FOLLOWER until it has loaded the
        // partition): the leader must answer for each partition's offsets.
        for partition in topic.partitions() {
            if let Err(error) = live.producer.client().fetch_watermarks(&self.topic, partition.id(), timeout) {
                let why = format!("partition {} of {} answers no offsets: {error}", partition.id(), self.topic);
                return Err(NotReady::NotTaking(why));
            }
        }
        // Last: with no broker reachable there is no id either, and that
        // says less than "unreachable".
        if !live.has_producer_id.load(Ordering::SeqCst) {
            return Err(NotReady::NotTaking("the idempotent producer has no producer id yet".into()));
        }
        Ok(())
    }

    /// Waits for queued records to be delivered.
    pub fn flush(&self, timeout: Duration) {
        if let Err(error) = self.live().producer.flush(timeout) {
            tracing::warn!(%error, "producer flush did not complete");
        }
    }

    /// Raises a fatal error in the producer, as the idempotent producer does
    /// when it cannot keep its guarantees (for the tests of what follows).
    #[cfg(feature = "fault-injection")]
    pub fn inject_fatal_error(&self) {
        delivery::inject_fatal_error(&self.live().producer);
    }
}

/// The outcome of a delivery report: only a record librdkafka says was not
/// persisted may be rolled back.
fn classify(report: Report) -> PublishOutcome {
    match report {
        Report::Delivered => PublishOutcome::Delivered,
        Report::Failed { error, persistence: Persistence::NotPersisted } => {
            PublishOutcome::NotPersisted(error.to_string())
        }
        Report::Failed { error, persistence } => PublishOutcome::Ambiguous(format!("{error} ({persistence:?})")),
    }
}

/// `KafkaError`s that end a delivery, for the table below.
#[cfg(test)]
fn failed(code: rdkafka::types::RDKafkaErrorCode, persistence: Persistence) -> Report {
    Report::Failed { error: rdkafka::error::KafkaError::MessageProduction(code), persistence }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::types::RDKafkaErrorCode as Code;

    #[test]
    fn only_what_was_never_persisted_is_rolled_back() {
        for (report, rolled_back, why) in [
            (failed(Code::UnknownTopic, Persistence::NotPersisted), true, "a topic that does not exist"),
            (failed(Code::MessageTimedOut, Persistence::NotPersisted), true, "timed out before it was ever sent"),
            (failed(Code::MessageTimedOut, Persistence::PossiblyPersisted), false, "timed out in flight"),
            (
                failed(Code::NotEnoughReplicas, Persistence::PossiblyPersisted),
                false,
                "a broker error on a retry after a timed-out attempt",
            ),
            (failed(Code::NotEnoughReplicas, Persistence::NotPersisted), true, "a broker refused it before appending"),
            (failed(Code::OutOfOrderSequenceNumber, Persistence::Persisted), false, "persisted, reported as failed"),
        ] {
            let outcome = classify(report);
            assert_eq!(matches!(outcome, PublishOutcome::NotPersisted(_)), rolled_back, "{why}: {outcome:?}");
        }
        assert_eq!(classify(Report::Delivered), PublishOutcome::Delivered);
    }
}
