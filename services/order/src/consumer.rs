//! The consume → write → settle → commit loop of one group member.
//!
//! [`Worker::run`] is the service's loop; [`Worker::try_execute_batch`] is
//! one turn of it, for tests that drive the worker step by step.

use crate::created_events::CreatedEvents;
use crate::dead_letters::{DeadLetterError, DeadLetters};
use crate::record_spans::{decode, RecordSpans};
use crate::store::{self, WriteError};
use crate::Settings;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::message::{Message, OwnedMessage};
use seckill_shared::db::parked::{self, Parking};
use seckill_shared::db::within;
use seckill_shared::domain::{FailReason, Fate, Holding, OrderId, OrderRecord, UserId};
use seckill_shared::kafka::membership::{Joining, Membership};
use seckill_shared::kafka::stall::{partitions_of, Progress};
use seckill_shared::kafka::{self, Trace};
use seckill_shared::ops::host::Connections;
use seckill_shared::ops::retry::{retry_then_park, retry_until, Attempt, Ended};
use seckill_shared::orders::fate::{self, FollowError};
use seckill_shared::stock::conn::RedisCallError;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Why a batch could not be finished. Every one is transient: the batch is
/// tried again whole (idempotently), nothing is committed meanwhile.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// PostgreSQL did not take the batch.
    #[error("writing orders: {0}")]
    Write(#[from] WriteError),
    /// Redis did not take the statuses or reservations.
    #[error("settling order status in redis: {0}")]
    Redis(#[from] RedisCallError),
    /// A reject did not reach the dead-letter topic.
    #[error(transparent)]
    DeadLetter(#[from] DeadLetterError),
    /// An order PostgreSQL had already failed could not be settled in Redis.
    #[error(transparent)]
    Follow(#[from] FollowError),
    /// A CREATED event was not delivered.
    #[error("producing CREATED events: {0}")]
    Events(#[source] rdkafka::error::KafkaError),
    /// A record that cannot even be dead-lettered could not be parked.
    #[error("parking a record: {0}")]
    Park(#[source] sqlx::Error),
}

/// What one turn of the worker did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A batch of this many records was processed and committed.
    Done { records: usize },
    /// No record arrived within the wait.
    Empty,
}

/// One member of the `seckill-order` group.
pub struct Worker {
    index: usize,
    settings: Arc<Settings>,
    deps: Connections,
    dead_letters: DeadLetters,
    /// The producer of the batch's CREATED events.
    created_events: CreatedEvents,
    /// Its consumer (made anew when it joins the group again) and commits.
    member: Membership,
    /// A batch [`Worker::try_execute_batch`] could not finish: the next
    /// turn tries it again before reading more (the consumer's position is
    /// already past it).
    unfinished: parking_lot::Mutex<Option<Vec<OwnedMessage>>>,
    /// The batch in hand since when, for the stall watch.
    progress: Progress,
}

impl Worker {
    /// Creates the consumer and subscribes it.
    pub fn new(
        index: usize,
        settings: Arc<Settings>,
        deps: Connections,
        dead_letters: DeadLetters,
    ) -> anyhow::Result<Self> {
        let joining = Joining {
            kafka: settings.servers.kafka.clone(),
            group: kafka::order_group(&settings.servers.kafka),
            topic: deps.topics.orders.clone(),
            max_poll_interval_ms: settings.service.consumer.max_poll_interval_ms(),
        };
        let member = Membership::join(format!("order worker {index}"), joining)?;
        let progress = deps.stalls.member(format!("order worker {index}"));
        let created_events = CreatedEvents::new(&settings.servers.kafka, deps.topics.events.clone())?;
        let unfinished = Default::default();
        Ok(Self { index, settings, deps, dead_letters, created_events, member, unfinished, progress })
    }

    /// Joins the group again, with a consumer made anew, whenever `rejoins`
    /// is bumped and the member is not busy with a batch.
    pub fn rejoining_on(mut self, rejoins: watch::Receiver<u64>) -> Self {
        self.member.rejoining_on(rejoins);
        self
    }

    /// Test hook: [`Membership::wedger`].
    #[cfg(feature = "fault-injection")]
    pub fn wedger(&self) -> impl Fn() + Send + Sync + 'static {
        self.member.wedger()
    }

    /// Consumes until `shutdown`, a batch at a time.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let mut last_commit = None;
        loop {
            // Safe point: the previous batch's commit is sent (or the batch
            // abandoned).
            let Some(batch) = self.next_batch(Some(&shutdown), None).await else { break };
            self.progress.busy(partitions_of(batch.iter().map(|m| (m.topic(), m.partition()))));
            let processed =
                retry_until(self.settings.service.retry, "processing a batch", &shutdown, || self.process(&batch))
                    .await;
            if processed.is_none() {
                // Shutting down mid-retry: commit nothing; the batch is
                // consumed again by whoever gets these partitions.
                break;
            }
            // Asynchronous: the next batch need not wait for the broker. A
            // commit lost to a crash only replays finished (idempotent) work.
            last_commit = Some(self.member.commit(&batch, CommitMode::Async));
            self.progress.idle();
        }
        self.progress.idle();
        // Leaving: make sure the last commit reached the broker — for a
        // while: a coordinator that does not answer (a broker just back)
        // must not keep the service from stopping; what is not committed
        // is replayed, idempotently.
        if let Some(list) = last_commit {
            let consumer = self.member.consumer();
            let commit = tokio::task::spawn_blocking(move || consumer.commit(&list, CommitMode::Sync));
            match tokio::time::timeout(Duration::from_secs(10), commit).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(error))) => {
                    tracing::warn!(worker = self.index, %error, "the last commit failed; its records will be replayed")
                }
                _ => tracing::warn!(
                    worker = self.index,
                    "the last commit did not complete in 10 s; its records will be replayed"
                ),
            }
        }
        self.member.consumer().unsubscribe();
        tracing::info!(worker = self.index, "consumer left the group");
        Ok(())
    }

    /// One turn: the batch a failed turn left, or records waited for up to
    /// `wait`; processed once and committed synchronously. On an error
    /// nothing is committed and the batch waits for the next turn.
    pub async fn try_execute_batch(&self, wait: Duration) -> Result<Outcome, ProcessError> {
        let left = self.unfinished.lock().take();
        let batch = match left {
            Some(batch) => batch,
            None => match self.next_batch(None, Some(wait)).await {
                Some(batch) => batch,
                None => return Ok(Outcome::Empty),
            },
        };
        self.progress.busy(partitions_of(batch.iter().map(|m| (m.topic(), m.partition()))));
        if let Err(error) = self.process(&batch).await {
            *self.unfinished.lock() = Some(batch);
            return Err(error);
        }
        self.member.commit(&batch, CommitMode::Sync);
        self.progress.idle();
        Ok(Outcome::Done { records: batch.len() })
    }

    /// Waits for a first record (until `shutdown`, or at most `wait`), then
    /// gathers more for up to the batch wait. `None` when none came.
    async fn next_batch(
        &self,
        shutdown: Option<&CancellationToken>,
        wait: Option<Duration>,
    ) -> Option<Vec<OwnedMessage>> {
        let never = CancellationToken::new();
        let shutdown = shutdown.unwrap_or(&never);
        let give_up = tokio::time::sleep(wait.unwrap_or(Duration::MAX / 4));
        tokio::pin!(give_up);
        let mut batch = Vec::with_capacity(self.settings.batch_size);
        while batch.is_empty() {
            let consumer = self.member.consumer();
            let asked = tokio::select! {
                // Stop between batches.
                _ = shutdown.cancelled() => return None,
                // Nothing came within the caller's wait.
                _ = &mut give_up => return None,
                // The group stands still: join it again (below), then wait on.
                asked = self.member.rejoin_asked() => asked,
                received = consumer.recv() => {
                    match received {
                        Ok(message) => batch.push(message.detach()),
                        Err(error) => {
                            tracing::warn!(worker = self.index, %error, "consumer error");
                            if !seckill_shared::ops::shutdown::pause(shutdown, Duration::from_millis(200)).await {
                                return None;
                            }
                        }
                    }
                    continue;
                }
            };
            // The old consumer's last holder is the thread that closes it.
            drop(consumer);
            self.member.rejoin(asked);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.settings.batch_wait_ms);
        let consumer = self.member.consumer();
        while batch.len() < self.settings.batch_size {
            match tokio::time::timeout_at(deadline, consumer.recv()).await {
                Ok(Ok(message)) => batch.push(message.detach()),
                Ok(Err(error)) => tracing::warn!(worker = self.index, %error, "consumer error"),
                Err(_) => break,
            }
        }
        metrics::counter!("seckill_order_records_consumed_total").increment(batch.len() as u64);
        metrics::histogram!("seckill_order_batch_size").record(batch.len() as f64);
        Some(batch)
    }

    /// Writes the batch, settles Redis, produces its CREATED events and
    /// dead-letters the rejects.
    async fn process(&self, batch: &[OwnedMessage]) -> Result<(), ProcessError> {
        let span = tracing::info_span!("batch", worker = self.index, records = batch.len());
        let started = Instant::now();
        self.process_in_span(batch).instrument(span).await?;
        metrics::histogram!("seckill_order_batch_seconds").record(started.elapsed().as_secs_f64());
        Ok(())
    }

    async fn process_in_span(&self, batch: &[OwnedMessage]) -> Result<(), ProcessError> {
        let mut records = Vec::with_capacity(batch.len());
        // The message each record came from, in the same order.
        let mut messages: Vec<&OwnedMessage> = Vec::with_capacity(batch.len());
        let mut malformed = Vec::new();
        for message in batch {
            match decode(message) {
                Ok(record) => {
                    records.push(record);
                    messages.push(message);
                }
                Err(error) => malformed.push((message, error)),
            }
        }

        let spans = RecordSpans::of(&messages, self.dead_letters.group());
        let sources: store::Sources<'_> = records
            .iter()
            .zip(&messages)
            .enumerate()
            .map(|(i, (r, m))| {
                let source = store::Source { trace: spans.trace(i, m), position: Some((m.partition(), m.offset())) };
                (r.order_id.as_str(), source)
            })
            .collect();
        let started = Instant::now();
        let writes = spans.writes("INSERT", "orders");
        // A server that never answers (frozen, cut off) ends the write at
        // the deadline, as a transient fault: the batch is tried again.
        let deadline = self.settings.servers.database.call_deadline();
        let outcome = match within(deadline, store::write_batch(&self.deps.db, &records, &sources)).await {
            Ok(outcome) => outcome,
            // One bad row must not fail the good ones: write row by row.
            Err(WriteError::Permanent(error)) => {
                tracing::warn!(%error, "batch refused by the database; writing row by row");
                store::write_row_by_row(&self.deps.db, &records, &sources, deadline).await?
            }
            Err(transient) => return Err(transient.into()),
        };
        drop(writes);
        metrics::histogram!("seckill_order_transaction_seconds").record(started.elapsed().as_secs_f64());
        metrics::counter!("seckill_order_orders_written_total").increment(outcome.created.len() as u64);
        seckill_shared::ops::halt::at("committed");
        self.follow_and_announce(&outcome, &sources).await?;

        // Only rejects need their message back (rarely any): the first one
        // carrying the order id.
        let mut by_order: HashMap<&str, &OwnedMessage> = HashMap::new();
        if !outcome.rejected.is_empty() {
            for (record, message) in records.iter().zip(&messages) {
                by_order.entry(record.order_id.as_str()).or_insert(message);
            }
        }
        for (record, reason, error) in &outcome.rejected {
            let message = by_order.get(record.order_id.as_str()).copied().expect("every record came from a message");
            self.dead_letter(message, *reason, error).await?;
        }
        for (message, error) in &malformed {
            self.dead_letter(message, FailReason::Malformed, &error.to_string()).await?;
        }
        // Dead-lettered orders are the compensator's now: no longer reserved.
        let handed_over: Vec<OrderId> = outcome.rejected.iter().map(|(r, _, _)| r.order_id.clone()).collect();
        self.deps.stock.orders().unreserve(&handed_over).await?;
        seckill_shared::ops::halt::at("delivered");
        Ok(())
    }

    /// Every order the batch holds a CREATED row of — written now, or
    /// before (a replay): its CREATED event, and Redis follows (both at
    /// once). Orders PostgreSQL had failed first are settled in Redis.
    async fn follow_and_announce(
        &self,
        outcome: &store::BatchOutcome,
        sources: &store::Sources<'_>,
    ) -> Result<(), ProcessError> {
        let mut created: Vec<&OrderRecord> = outcome.created.iter().collect();
        let mut failed_earlier = Vec::new();
        for (record, fate) in &outcome.already_done {
            match fate {
                Fate::Created => created.push(record),
                Fate::Failed(_) => failed_earlier.push((record, *fate)),
            }
        }
        let followed: Vec<(OrderId, UserId, i64, Holding)> =
            created.iter().map(|r| (r.order_id.clone(), r.user_id, r.accepted_at, r.held())).collect();
        let (followed, sent) = tokio::join!(
            self.deps.stock.orders().follow_created(&followed),
            self.created_events.send(&created, sources)
        );
        followed?;
        sent.map_err(ProcessError::Events)?;
        // PostgreSQL failed these first (the sweeper or the compensator won),
        // perhaps without settling Redis before it stopped: settle it now,
        // at most once per order, whoever else does too.
        let deadline = self.settings.servers.database.call_deadline();
        for (record, fate) in failed_earlier {
            within(deadline, fate::follow(&self.deps.stock, &self.deps.db, record, fate)).await?;
        }
        Ok(())
    }

    /// Dead-letters one record. A record the topic refuses for good (too
    /// large, invalid) is parked after bounded attempts instead, so the
    /// partition moves on; a broker that is down fails the batch, which is
    /// retried whole.
    async fn dead_letter(&self, message: &OwnedMessage, reason: FailReason, error: &str) -> Result<(), ProcessError> {
        let trace = Trace::of(message.headers());
        // Exported, a child of the edge's publish: the dead letter carries
        // this hop on to the compensator.
        let span = tracing::info_span!(
            "dead_letter",
            reason = reason.code(),
            request_id = trace.request_id.unwrap_or(""),
            traceparent = trace.traceparent.unwrap_or(""),
            partition = message.partition(),
            offset = message.offset()
        );
        seckill_shared::ops::trace_export::continue_from(&span, trace.traceparent);
        async {
            tracing::info!(%error, "dead-lettering a record");
            // Never stopped here: the batch's retry (and its shutdown) is
            // the level above.
            let never = CancellationToken::new();
            let sent = retry_then_park(
                self.settings.service.retry,
                self.settings.service.park_after_attempts,
                "dead-lettering a record",
                &never,
                || async {
                    match self.dead_letters.send(message, reason, error).await {
                        Ok(()) => Attempt::Done(()),
                        Err(refused) if refused.is_permanent() => Attempt::Refused(refused),
                        Err(transient) => Attempt::GiveUp(transient),
                    }
                },
            );
            match sent.await {
                Ended::Done(()) => Ok(()),
                Ended::Park { error: refused, attempts } => {
                    let why = refused.to_string();
                    let parking = Parking { message, reason: reason.code(), error: &why, attempts, parked_by: "order" };
                    let deadline = self.settings.servers.database.call_deadline();
                    within(deadline, parked::park(&self.deps.db, &parking)).await.map_err(ProcessError::Park)
                }
                Ended::GaveUp(transient) => Err(transient.into()),
                Ended::Stopped => unreachable!("a token never cancelled"),
            }
        }
        .instrument(span)
        .await
    }
}
