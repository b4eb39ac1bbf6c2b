//! The outbox relay: publishes the `order_events` rows (written by trigger in
//! the same transaction as each change of an order's status) to
//! `seckill.order-events`, in the order of the transactions that wrote
//! them, and moves its cursor past them (`order_events_relayed`; why a
//! cursor and not a mark per row: migration `…04_outbox_relay_cursor.sql`).
//!
//! One relay runs at a time across the order services: it holds the
//! PostgreSQL lease `order-events relay` ([`seckill_shared::ops::lease`]), which
//! a live relay renews and a frozen or cut-off one loses within its length,
//! and every cursor move checks the lease in its own transaction, so a
//! relay that lost its term without knowing it cannot move the cursor. A
//! turn takes the rows after the cursor that no running transaction can
//! still precede, sends them with the idempotent producer, waits for every
//! delivery, and only then moves the cursor: a relay killed in between
//! sends them again, with the same `eventId` (consumers drop the second).
//! PostgreSQL down delays events; Kafka down lets the outbox grow, and it
//! drains when Kafka returns. Relayed rows are pruned after
//! `retention_ms`, their counts kept per sale round for the reconciliation.

use crate::relay_hold::CreatedFirst;
use crate::relay_waves::{self, Deliveries};
use crate::Settings;
use parking_lot::Mutex;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use seckill_shared::db::{outbox, within};
use seckill_shared::kafka::renewing::Renewing;
use seckill_shared::ops::host::Connections;
use seckill_shared::ops::leader::{self, Turn};
use seckill_shared::ops::lease::{Lease, LeaseError, LeaseTerm};
use seckill_shared::ops::shutdown::Background;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// One event on its way: its key and value, and the row (for the headers).
type Outgoing<'a> = ((String, Vec<u8>), &'a outbox::OutboxRow);

/// The lease one relay per database holds: the cursor is the database's,
/// whatever the topic or key prefix.
pub const LEASE: &str = "order-events relay";

/// Why a turn failed (the cursor did not move; the turn is done again).
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("publishing events: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// Another relay holds the lease now.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The order group's committed offsets could not be read.
    #[error("reading the order group's committed offsets: {0}")]
    Group(#[source] anyhow::Error),
}

/// The relay of one order service.
pub struct Relay {
    settings: Arc<Settings>,
    deps: Connections,
    /// Made anew after a fatal error.
    producer: Renewing<ThreadedProducer<Deliveries>>,
    lease: Lease,
    /// Later events wait for their order's CREATED.
    created_first: CreatedFirst,
    /// Since when the first row of the outbox waits for its CREATED.
    held_since: Mutex<Option<Instant>>,
    /// When pruning last ran.
    last_prune: Mutex<Instant>,
    /// When the relay last looked for what holds events back.
    last_horizon_look: Mutex<Instant>,
    /// Turns failed in a row (for the backoff).
    failures: Mutex<u32>,
}

impl Relay {
    /// A relay over the service's connections; its lease's watchdog runs on
    /// `background`.
    pub fn new(settings: Arc<Settings>, deps: Connections, background: Background) -> anyhow::Result<Self> {
        // Delivery reports of failures only: a turn waits for all its
        // records at once (flush), not for each one's report.
        let kafka = settings.servers.kafka.clone();
        let producer = Renewing::new("order-event relay", move || {
            Ok(seckill_shared::kafka::producer_config(&kafka)
                .set("delivery.report.only.error", "true")
                .create_with_context(Deliveries::default())?)
        })?;
        let lease = Lease::new(deps.db.clone(), LEASE, Duration::from_millis(settings.events.lease_ms), background);
        let created_first = CreatedFirst::new(settings.servers.kafka.clone(), deps.topics.orders.clone());
        Ok(Self {
            settings,
            deps,
            producer,
            lease,
            created_first,
            held_since: Mutex::new(None),
            last_prune: Mutex::new(Instant::now()),
            last_horizon_look: Mutex::new(Instant::now()),
            failures: Mutex::new(0),
        })
    }

    /// The relay's lease, for tests that drive the relay turn by turn.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Its producer, for tests that make it fail.
    pub fn producer(&self) -> &Renewing<ThreadedProducer<Deliveries>> {
        &self.producer
    }

    /// Competes for the lease; while holding it, relays and prunes.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let retry = Duration::from_millis(self.settings.events.lease_ms / 2).max(Duration::from_millis(100));
        leader::lead("order-event relay", &self.lease, retry, &shutdown, |term| self.turn(term)).await
    }

    /// One turn of the leader: relay, prune when it is time, and say when
    /// to come back.
    async fn turn(&self, term: Arc<LeaseTerm>) -> Turn {
        let poll = Duration::from_millis(self.settings.events.poll_ms);
        let wait = match self.relay_once(&term).await {
            // After a non-empty turn, at once: a backlog drains at full speed.
            Ok(sent) => {
                *self.failures.lock() = 0;
                if sent > 0 {
                    Duration::ZERO
                } else {
                    poll
                }
            }
            Err(RelayError::Lease(error)) => {
                tracing::warn!(%error, "the relay's lease is another's");
                return Turn::StepDown;
            }
            Err(error) => {
                let failures = {
                    let mut failures = self.failures.lock();
                    *failures += 1;
                    *failures
                };
                tracing::warn!(%error, "relaying events failed; retrying");
                self.settings.service.retry.delays().nth(failures.min(10) as usize).unwrap_or(poll)
            }
        };
        if wait == poll && due(&self.last_horizon_look, Duration::from_millis(self.settings.events.held_back_after_ms))
        {
            self.say_what_holds_back().await;
        }
        if due(&self.last_prune, Duration::from_millis(self.settings.events.prune_every_ms)) {
            match self.prune(&term).await {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, "pruned relayed order events"),
                Err(RelayError::Lease(_)) => return Turn::StepDown,
                Err(error) => tracing::warn!(%error, "pruning relayed events failed"),
            }
        }
        Turn::Again(wait)
    }

    /// After an empty turn: events that wait behind a transaction still
    /// open on the server are counted on `/metrics`, and the transaction is
    /// named in the log (nothing else would say why events stop).
    async fn say_what_holds_back(&self) {
        let after = Duration::from_millis(self.settings.events.held_back_after_ms);
        let deadline = self.settings.servers.database.call_deadline();
        match within(deadline, seckill_shared::db::horizon::held_back(&self.deps.db, after)).await {
            Ok(Some(held)) => {
                tracing::warn!(
                    pid = held.pid,
                    database = held.database.as_deref(),
                    application_name = held.application_name.as_deref(),
                    state = held.state.as_deref(),
                    backend_xid = %held.backend_xid,
                    "events held back by an open transaction: {held}"
                );
                metrics::gauge!("seckill_relay_events_held_back").set(held.events_waiting as f64);
                metrics::gauge!("seckill_relay_held_back_seconds").set(held.oldest_event_seconds);
            }
            Ok(None) => {
                metrics::gauge!("seckill_relay_events_held_back").set(0.0);
                metrics::gauge!("seckill_relay_held_back_seconds").set(0.0);
            }
            Err(error) => tracing::debug!(%error, "what holds events back not read"),
        }
    }

    /// One turn: sends the next events after the cursor, waits for every
    /// delivery, moves the cursor past them under `term` (a row that is no
    /// event is parked and passed with them). Returns how many rows it
    /// dealt with.
    #[tracing::instrument(name = "relay.send", level = "debug", skip_all)]
    pub async fn relay_once(&self, term: &LeaseTerm) -> Result<usize, RelayError> {
        // Each wait on PostgreSQL within the deadline: a server that never
        // answers ends the turn as a failure (the cursor stays; the turn is
        // done again), not the relay.
        let deadline = self.settings.servers.database.call_deadline();
        let mut rows = within(deadline, outbox::next_after_cursor(&self.deps.db, self.settings.events.batch)).await?;
        let sendable = self.created_first.sendable(&rows).await.map_err(RelayError::Group)?;
        self.say_held(rows.len() - sendable);
        rows.truncate(sendable);
        let Some(last) = rows.last() else { return Ok(0) };
        let mut outgoing: Vec<Outgoing> = Vec::with_capacity(rows.len());
        for row in &rows {
            match row.event.event() {
                Ok(event) => outgoing.push((outbox::keyed(&event), row)),
                // One bad row must not stop every event behind it: it is
                // parked for an operator and passed with the rest.
                Err(error) => {
                    let park = seckill_shared::db::parked::park_outbox_row(
                        &self.deps.db,
                        &self.deps.topics.events,
                        row,
                        &error,
                    );
                    within(deadline, park).await?
                }
            }
        }
        self.deliver(&outgoing).await?;
        // Only now: a relay killed before this line sends them again. The
        // position itself, not a lookup of the last row: that row may be
        // gone by now (deleted by hand), and the cursor must move anyway.
        within(deadline, async {
            let mut tx = self.deps.db.begin().await?;
            term.check(&mut tx).await?;
            outbox::move_cursor(&mut tx, last.xid, last.id).await?;
            tx.commit().await?;
            Ok::<_, RelayError>(())
        })
        .await?;
        metrics::counter!("seckill_events_relayed_total").increment(outgoing.len() as u64);
        Ok(rows.len())
    }

    /// Counts the rows held for their order's CREATED on `/metrics`; logs
    /// the wait once it lasts (`relay_hold.rs`).
    fn say_held(&self, held: usize) {
        metrics::gauge!("seckill_relay_events_awaiting_created").set(held as f64);
        let mut since = self.held_since.lock();
        if held == 0 {
            *since = None;
            return;
        }
        let since = *since.get_or_insert_with(Instant::now);
        let after = Duration::from_millis(self.settings.events.held_back_after_ms);
        if since.elapsed() >= after && due(&self.last_horizon_look, after) {
            tracing::warn!(
                held,
                waited_ms = since.elapsed().as_millis() as u64,
                "events wait for their orders' CREATED events: the order group has not committed past their records"
            );
        }
    }

    /// Sends a turn's events and waits until the broker has every one. A
    /// user's events go out one wave at a time — every user's first event of
    /// the turn, then their second, … — and a wave is sent only once the one
    /// before it was delivered, so an event that cannot be delivered stops
    /// the ones after it of the same user: a consumer never sees a user's
    /// later event before an earlier one (the next turn sends again from the
    /// cursor, in order, at least once). A drain, one event per user, is one
    /// wave. An event the broker refuses for good (too large, invalid) is
    /// parked and passed, or it would stop every event behind it.
    async fn deliver(&self, outgoing: &[Outgoing<'_>]) -> Result<(), RelayError> {
        let mut wave_of: HashMap<&str, usize> = HashMap::with_capacity(outgoing.len());
        let mut waves: Vec<Vec<usize>> = Vec::new();
        for (i, ((key, _), _)) in outgoing.iter().enumerate() {
            let wave = wave_of.entry(key.as_str()).or_insert(0);
            if waves.len() <= *wave {
                waves.push(Vec::new());
            }
            waves[*wave].push(i);
            *wave += 1;
        }
        let topic = &self.deps.topics.events;
        // This turn's producer: a new one if the last failed fatally.
        let producer = self.producer.get();
        for wave in waves {
            let sent = producer.context().next_wave();
            let mut refused = Vec::new();
            // Exported, one span per event, ended once the wave is delivered.
            let mut spans = Vec::new();
            for &i in &wave {
                let ((key, payload), row) = &outgoing[i];
                let span = seckill_shared::kafka::spans::send(topic, key, row.event.traceparent.as_deref());
                let headers = row.event.headers(&self.settings.servers.kafka.cloudevents_source, &span);
                spans.push(span);
                let record =
                    BaseRecord::with_opaque_to(topic, sent.opaque(i)).key(key).payload(payload).headers(headers);
                match relay_waves::queue(&producer, record).await {
                    Ok(()) => {}
                    Err(error) if seckill_shared::kafka::refused_for_good(&error) => refused.push((i, error)),
                    Err(error) => return Err(RelayError::Kafka(error)),
                }
            }
            let timeout =
                Duration::from_millis(self.settings.servers.kafka.message_timeout_ms) + Duration::from_secs(5);
            relay_waves::settled(&producer, timeout).await.map_err(RelayError::Kafka)?;
            refused.extend(producer.context().failures(&sent));
            drop(spans);
            for (i, error) in refused {
                if !seckill_shared::kafka::refused_for_good(&error) {
                    return Err(RelayError::Kafka(error));
                }
                let (row, why) = (outgoing[i].1, error.to_string());
                let park = seckill_shared::db::parked::park_undeliverable_event(&self.deps.db, topic, row, &why);
                within(self.settings.servers.database.call_deadline(), park).await?;
            }
        }
        Ok(())
    }

    /// Deletes relayed events that happened more than the retention ago,
    /// keeping their counts per sale round and type.
    pub async fn prune(&self, term: &LeaseTerm) -> Result<u64, RelayError> {
        let retention_secs = self.settings.events.retention_ms as f64 / 1000.0;
        within(self.settings.servers.database.call_deadline(), async {
            let mut tx = self.deps.db.begin().await?;
            term.check(&mut tx).await?;
            let pruned = outbox::prune(&mut tx, retention_secs).await?;
            tx.commit().await?;
            Ok(pruned)
        })
        .await
    }
}

/// Whether `every` has passed since `last`; if so, `last` is now.
fn due(last: &Mutex<Instant>, every: Duration) -> bool {
    let mut last = last.lock();
    let due = last.elapsed() >= every;
    if due {
        *last = Instant::now();
    }
    due
}
