//! The dead-letter consumer: one record at a time, settle, then commit.
//!
//! For each record, the dead-letter index gets its row
//! ([`dead_letters`]), then
//! [`settle`](crate::settle::settle) decides the order's fate in PostgreSQL
//! and brings Redis in line; then the offset is committed. A crash anywhere before the commit replays the record, and the
//! replay restores nothing twice. A dependency that is down is retried
//! with backoff for as long as it takes; a record the database refuses
//! (SQLSTATE 22 or 23) is tried a bounded number of times, then parked.

use crate::settle::{self, SettleError};
use crate::Settings;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::message::{BorrowedMessage, Message};
use seckill_shared::db::parked::{self, Parking};
use seckill_shared::db::{dead_letters, within};
use seckill_shared::domain::{FailReason, OrderRecord};
use seckill_shared::kafka::membership::{Joining, Membership};
use seckill_shared::kafka::stall::{partitions_of, Progress};
use seckill_shared::kafka::{self, dlq_header, header_str, Trace};
use seckill_shared::ops::host::Connections;
use seckill_shared::ops::retry::{retry_then_park, retry_until, Attempt, Ended};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// The compensator's consumer in the `seckill-compensator` group.
pub struct DlqJob {
    settings: Arc<Settings>,
    deps: Connections,
    /// Its consumer (made anew when it joins the group again).
    member: Membership,
    /// Its consumer group (an attribute of each record's span).
    group: String,
    /// The record in hand since when, for the stall watch.
    progress: Progress,
}

impl DlqJob {
    /// Creates the consumer and subscribes it to the dead-letter topic.
    pub fn new(settings: Arc<Settings>, deps: Connections) -> anyhow::Result<Self> {
        let group = kafka::compensator_group(&settings.servers.kafka);
        // A job that has not polled for the stall bound (its record not
        // settled) leaves the group: another compensator takes over.
        let joining = Joining {
            kafka: settings.servers.kafka.clone(),
            group: group.clone(),
            topic: deps.topics.dlq.clone(),
            max_poll_interval_ms: settings.service.consumer.max_poll_interval_ms(),
        };
        let member = Membership::join("dead-letter job".into(), joining)?;
        let progress = deps.stalls.member("dead-letter job".into());
        Ok(Self { settings, deps, member, group, progress })
    }

    /// Joins the group again, with a consumer made anew, whenever `rejoins`
    /// is bumped and the job is not settling a record.
    pub fn rejoining_on(mut self, rejoins: tokio::sync::watch::Receiver<u64>) -> Self {
        self.member.rejoining_on(rejoins);
        self
    }

    /// Consumes until `shutdown`, once the index's rows from before it knew
    /// topics are this topic's.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let deadline = self.settings.servers.database.call_deadline();
        let adopt = retry_until(
            self.settings.service.retry,
            "adopting dead letters indexed without a topic",
            &shutdown,
            || within(deadline, dead_letters::adopt(&self.deps.db, &self.deps.topics.dlq)),
        );
        match adopt.await {
            Some(0) => {}
            Some(adopted) => {
                tracing::info!(adopted, topic = %self.deps.topics.dlq, "dead letters indexed without a topic adopted")
            }
            None => return Ok(()),
        }
        loop {
            let consumer = self.member.consumer();
            let message = tokio::select! {
                // Safe point: the previous record is committed.
                _ = shutdown.cancelled() => break,
                // The group stands still: join it again, then wait on.
                asked = self.member.rejoin_asked() => {
                    drop(consumer);
                    self.member.rejoin(asked);
                    continue;
                }
                received = consumer.recv() => match received {
                    Ok(message) => message,
                    Err(error) => {
                        tracing::warn!(%error, "dead-letter consumer error");
                        if !seckill_shared::ops::shutdown::pause(&shutdown, Duration::from_millis(200)).await {
                            break;
                        }
                        continue;
                    }
                },
            };
            let span = record_span(&message, &self.group);
            self.progress.busy(partitions_of([(message.topic(), message.partition())]));
            if !self.handle(&message, &shutdown).instrument(span).await {
                break;
            }
            // Only now: a crash before this line replays the record (and a
            // commit lost with a crash replays it too: settling is
            // idempotent). Asynchronous, so a coordinator that does not
            // answer holds no thread of the runtime.
            if let Err(error) = consumer.commit_message(&message, CommitMode::Async) {
                tracing::warn!(%error, "offset commit failed; the record will be replayed");
            }
            self.progress.idle();
        }
        self.progress.idle();
        self.member.consumer().unsubscribe();
        Ok(())
    }

    /// Settles one record, retrying until it is done or parked; `false` when
    /// shutdown came first (nothing is committed, the record is replayed).
    async fn handle(&self, message: &BorrowedMessage<'_>, shutdown: &CancellationToken) -> bool {
        // Counted first (`seckillctl dlq stats`), whatever becomes of it.
        // Every wait on PostgreSQL within the call deadline: a server that
        // never answers is a failed attempt, retried like one that refused.
        let deadline = self.settings.servers.database.call_deadline();
        let indexed = retry_until(self.settings.service.retry, "indexing a dead letter", shutdown, || {
            within(deadline, dead_letters::index(&self.deps.db, message))
        });
        if indexed.await.is_none() {
            return false;
        }
        let reason_code = message.headers().and_then(|h| header_str(h, dlq_header::REASON)).unwrap_or("");
        let record = match message.payload().map(OrderRecord::decode) {
            Some(Ok(record)) => record,
            // Nothing names an order to settle: logged, counted, skipped.
            other => {
                let error = other.map(|r| r.err().map(|e| e.to_string())).unwrap_or(Some("empty record".into()));
                tracing::warn!(
                    reason = reason_code,
                    error = error.as_deref().unwrap_or(""),
                    "malformed dead letter skipped"
                );
                metrics::counter!("seckill_compensator_malformed_total").increment(1);
                return true;
            }
        };
        tracing::Span::current().record("order_id", record.order_id.as_str());
        let reason = FailReason::parse(reason_code).unwrap_or(FailReason::DbRejected);
        let settled = retry_then_park(
            self.settings.service.retry,
            self.settings.service.park_after_attempts,
            "settling a dead letter",
            shutdown,
            || async {
                match within(deadline, settle::settle(&self.deps, &record, reason, Trace::of(message.headers()))).await
                {
                    Ok(settled) => Attempt::Done(settled),
                    // The database refused the data: trying again cannot
                    // cure it, so after a bounded number of attempts the
                    // record is parked and the partition behind it moves on.
                    Err(error) if error.is_permanent() => Attempt::Refused(error),
                    // A dependency that is down: waited for, however long.
                    Err(error) => Attempt::Later(error),
                }
            },
        );
        match settled.await {
            Ended::Done(settled) => {
                tracing::info!(?settled, "dead letter settled");
                true
            }
            Ended::Park { error, attempts } => self.park(message, reason_code, &error, attempts, shutdown).await,
            // Stopping: nothing is committed; the record is replayed.
            Ended::GaveUp(_) | Ended::Stopped => false,
        }
    }

    /// Parks a record that can never be settled; `false` when shutdown came
    /// first (then it is replayed, and parked by whoever gets it).
    async fn park(
        &self,
        message: &BorrowedMessage<'_>,
        reason: &str,
        error: &SettleError,
        attempts: u32,
        shutdown: &CancellationToken,
    ) -> bool {
        let error = error.to_string();
        let parking = Parking { message, reason, error: &error, attempts, parked_by: "compensator" };
        let deadline = self.settings.servers.database.call_deadline();
        retry_until(self.settings.service.retry, "parking a dead letter", shutdown, || {
            within(deadline, parked::park(&self.deps.db, &parking))
        })
        .await
        .is_some()
    }
}

/// A span per dead letter, carrying what follows the order through the
/// pipeline (the order id is recorded once decoded).
/// Exported, it is the consume span of the dead letter (a child of the
/// order service's dead-lettering).
fn record_span(message: &BorrowedMessage<'_>, group: &str) -> tracing::Span {
    let trace = Trace::of(message.headers());
    let span = tracing::info_span!(
        "dead_letter",
        otel.name = format!("process {}", message.topic()),
        otel.kind = "consumer",
        messaging.system = "kafka",
        messaging.operation.type = "process",
        messaging.destination.name = message.topic(),
        messaging.destination.partition.id = message.partition().to_string(),
        messaging.kafka.offset = message.offset(),
        messaging.consumer.group.name = group,
        order_id = tracing::field::Empty,
        request_id = trace.request_id.unwrap_or(""),
        traceparent = trace.traceparent.unwrap_or(""),
    );
    seckill_shared::ops::trace_export::continue_from(&span, trace.traceparent);
    span
}

/// Every few seconds until `shutdown`, the dead-letter group's lag on
/// `topic`: when a partition stands still past `consumer.stall_secs` with
/// records waiting, `rejoin` is bumped and the job joins its group again
/// ([`seckill_shared::kafka::standstill`]).
pub async fn watch_group(
    settings: Arc<Settings>,
    topic: String,
    rejoin: tokio::sync::watch::Sender<u64>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let watched = seckill_shared::kafka::standstill::Watched {
        kafka: settings.servers.kafka.clone(),
        group: kafka::compensator_group(&settings.servers.kafka),
        topic,
        stall: settings.service.consumer.stall(),
    };
    seckill_shared::kafka::standstill::watch("dead-letter group watch", watched, |_| {}, rejoin, shutdown).await
}
