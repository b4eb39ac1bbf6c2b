//! The order-event relay: publishes the events that every change of an
//! order's status writes in its own transaction to `seckill.order-events`,
//! in commit order, at least once, each under its stable `eventId`.
//!
//! The triggers write each statement's events into the WAL as one logical
//! decoding message (migration `…09_order_events_from_the_wal.sql`;
//! [`seckill_shared::event_stream`]); the relay streams this database's
//! replication slot ([`wal`]), sends the messages of each committed
//! transaction, waits for every delivery, then records its position — the
//! end of the last transaction sent, and the count of events per sale round
//! — and only then tells the slot it may let that WAL go. A relay killed in
//! between streams them again from the recorded position. Before that, the
//! events written to the outbox table by the versions before, or by
//! transactions still running across the upgrade, are sent from there
//! ([`outbox`]) until it is drained for good, so one user's events stay in
//! order across the upgrade.
//!
//! One relay runs at a time across the order services: it holds the
//! PostgreSQL lease `order-events relay` ([`seckill_shared::lease`]), which
//! a live relay renews and a frozen or cut-off one loses within its length,
//! and every position it records checks the lease in its own transaction,
//! so a relay that lost its term without knowing it cannot record. The slot
//! itself takes one stream at a time: a new holder ends a stream a former
//! holder left open. PostgreSQL down delays events; Kafka down lets the
//! slot keep the WAL (up to the server's `max_slot_wal_keep_size`: a slot
//! that exceeds it is lost, and the next relay makes a new one and sends
//! again every event the orders call for since its last position).

mod delivery;
mod outbox;
mod wal;

use crate::Settings;
use delivery::{Deliveries, Outgoing};
use rdkafka::producer::ThreadedProducer;
use seckill_shared::event_stream::{self, Counts, Lsn};
use seckill_shared::expected_events::{self, Scope};
use seckill_shared::host::Connections;
use seckill_shared::leader::{self, Term, Turn};
use seckill_shared::lease::{Lease, LeaseError, LeaseTerm};
use seckill_shared::outbox::EventRow;
use seckill_shared::parked::EventSource;
use seckill_shared::shutdown::Background;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::{CancellationToken, DropGuard};
use wal::{Committed, Read, Target, WalStream};

/// The lease one relay per database holds: the slot and the position are
/// the database's, whatever the topic or key prefix.
pub const LEASE: &str = "order-events relay";

/// How far before its last recorded commit a relay that lost its slot sends
/// events again from: a transaction's changes happen before it commits.
const RESEND_MARGIN: chrono::Duration = chrono::Duration::minutes(1);

/// How often a quiet stream's position is recorded (and the WAL behind it
/// let go): often enough that a slot never holds much, seldom enough to
/// cost nothing.
const QUIET_RECORD_EVERY: Duration = Duration::from_secs(1);

/// The relay's settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventSettings {
    /// Relay events from this order service (one relays at a time).
    pub enabled: bool,
    /// Most outbox rows sent in one turn (while the outbox of the versions
    /// before is emptied).
    pub batch: i64,
    /// How long the relay waits for the next event when there is none.
    pub poll_ms: u64,
    /// How long outbox rows stay once they happened (and were relayed)
    /// before they are pruned.
    pub retention_ms: u64,
    /// How often pruning runs.
    pub prune_every_ms: u64,
    /// Length of the relay's lease: a relay that stops renewing it (frozen,
    /// cut off) is replaced by another order service after this long.
    pub lease_ms: u64,
}

impl Default for EventSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            batch: 1_000,
            poll_ms: 100,
            retention_ms: 24 * 3_600_000,
            prune_every_ms: 60_000,
            lease_ms: 5_000,
        }
    }
}

/// Why a turn failed (nothing was recorded; the turn is done again).
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("publishing events: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// Streaming the slot failed (the stream is opened again next turn,
    /// from the recorded position).
    #[error("streaming the WAL: {0}")]
    Stream(String),
    /// Another relay holds the lease now.
    #[error(transparent)]
    Lease(#[from] LeaseError),
}

/// The slot streaming under one term.
struct Streaming {
    /// The term that opened it: a stream outlives no term.
    fence: i64,
    stream: WalStream,
    /// The position last recorded.
    recorded: Lsn,
    /// When a quiet position was last recorded.
    quiet_recorded_at: Instant,
    /// Stops the task that ends the stream when the term is found lost.
    _watcher: DropGuard,
}

/// The relay of one order service.
pub struct Relay {
    settings: Arc<Settings>,
    deps: Connections,
    producer: Arc<ThreadedProducer<Deliveries>>,
    lease: Lease,
    /// The slot's stream, while this relay leads.
    streaming: Arc<tokio::sync::Mutex<Option<Streaming>>>,
    /// The outbox was found drained for good (read once per process).
    outbox_drained: AtomicBool,
    /// When pruning last ran.
    last_prune: Mutex<Instant>,
    /// Turns failed in a row (for the backoff).
    failures: Mutex<u32>,
}

impl Relay {
    /// A relay over the service's connections; its lease's watchdog runs on
    /// `background`.
    pub fn new(settings: Arc<Settings>, deps: Connections, background: Background) -> anyhow::Result<Self> {
        // Delivery reports of failures only: a turn waits for all its
        // records at once, not for each one's report.
        let producer = seckill_shared::kafka::producer_config(&settings.servers.kafka)
            .set("delivery.report.only.error", "true")
            .create_with_context(Deliveries::default())?;
        let producer = Arc::new(producer);
        let lease = Lease::new(deps.db.clone(), LEASE, Duration::from_millis(settings.events.lease_ms), background);
        Ok(Self {
            settings,
            deps,
            producer,
            lease,
            streaming: Arc::default(),
            outbox_drained: AtomicBool::new(false),
            last_prune: Mutex::new(Instant::now()),
            failures: Mutex::new(0),
        })
    }

    /// The relay's lease, for tests that drive the relay turn by turn.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Competes for the lease; while holding it, relays and prunes.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let retry = Duration::from_millis(self.settings.events.lease_ms / 2).max(Duration::from_millis(100));
        let led = leader::lead("order-event relay", &self.lease, retry, &shutdown, |term| self.turn(term)).await;
        self.stop_streaming().await;
        led
    }

    /// One turn of the leader: relay, prune when it is time, and say when
    /// to come back.
    async fn turn(&self, term: Arc<LeaseTerm>) -> Turn {
        let poll = Duration::from_millis(self.settings.events.poll_ms);
        let wait = match self.relay_once(&term).await {
            // After a non-empty turn, at once: a backlog drains at full
            // speed. After an empty one too: the stream itself waited.
            Ok(_) => {
                *self.failures.lock().expect("relay failures") = 0;
                Duration::ZERO
            }
            Err(RelayError::Lease(error)) => {
                tracing::warn!(%error, "the relay's lease is another's");
                self.stop_streaming().await;
                return Turn::StepDown;
            }
            Err(error) => {
                let failures = {
                    let mut failures = self.failures.lock().expect("relay failures");
                    *failures += 1;
                    *failures
                };
                tracing::warn!(%error, "relaying events failed; retrying");
                self.settings.service.retry.delays().nth(failures.min(10) as usize).unwrap_or(poll)
            }
        };
        let prune_due = {
            let mut last = self.last_prune.lock().expect("relay prune time");
            let due = last.elapsed() >= Duration::from_millis(self.settings.events.prune_every_ms);
            if due {
                *last = Instant::now();
            }
            due
        };
        if prune_due {
            match self.prune(&term).await {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, "pruned relayed outbox rows"),
                Err(RelayError::Lease(_)) => {
                    self.stop_streaming().await;
                    return Turn::StepDown;
                }
                Err(error) => tracing::warn!(%error, "pruning relayed outbox rows failed"),
            }
        }
        Turn::Again(wait)
    }

    /// One turn: the next outbox rows while the outbox is not drained for
    /// good, else what the WAL streams (waiting up to the poll for it).
    /// Returns how many events it dealt with (sent or parked).
    pub async fn relay_once(&self, term: &LeaseTerm) -> Result<usize, RelayError> {
        if !self.outbox_drained.load(Ordering::Relaxed) {
            let position = event_stream::position(&self.deps.db).await?;
            if !position.outbox_drained {
                let sent = self.relay_outbox_once(term).await?;
                if sent > 0 || !self.outbox_drained(term).await? {
                    return Ok(sent);
                }
            }
            self.outbox_drained.store(true, Ordering::Relaxed);
        }
        self.relay_wal_once(term).await
    }

    /// How long a wave of records may take to be delivered.
    fn delivery_timeout(&self) -> Duration {
        Duration::from_millis(self.settings.servers.kafka.message_timeout_ms) + Duration::from_secs(5)
    }

    /// One read of the slot under `term`: its transactions sent, then the
    /// position after them recorded and confirmed; a quiet stream's
    /// position recorded now and then.
    async fn relay_wal_once(&self, term: &LeaseTerm) -> Result<usize, RelayError> {
        let mut guard = self.streaming.lock().await;
        if let Some(old) = guard.take_if(|s| s.fence != term.fence()) {
            old.stream.close().await;
        }
        if guard.is_none() {
            *guard = Some(self.open_stream(term).await?);
        }
        let streaming = guard.as_mut().expect("opened above");
        let read = match streaming.stream.read(Duration::from_millis(self.settings.events.poll_ms)).await {
            Ok(read) => read,
            Err(error) => {
                if let Some(broken) = guard.take() {
                    broken.stream.close().await;
                }
                return Err(RelayError::Stream(error.to_string()));
            }
        };
        match read {
            Read::Nothing => Ok(0),
            Read::Quiet(lsn) => {
                if lsn > streaming.recorded && streaming.quiet_recorded_at.elapsed() >= QUIET_RECORD_EVERY {
                    self.record(term, lsn, None, &Counts::new()).await?;
                    streaming.recorded = lsn;
                    streaming.quiet_recorded_at = Instant::now();
                    streaming.stream.confirm(lsn);
                }
                Ok(0)
            }
            Read::Transactions(done) => match self.send_transactions(term, &done).await {
                Ok(sent) => {
                    let end = done.last().map_or(streaming.recorded, |last| last.end);
                    streaming.recorded = end;
                    streaming.stream.confirm(end);
                    Ok(sent)
                }
                Err(error) => {
                    // Read again from the recorded position next turn.
                    if let Some(unsent) = guard.take() {
                        unsent.stream.close().await;
                    }
                    Err(error)
                }
            },
        }
    }

    /// Sends the events of `done`'s transactions, then records the position
    /// after the last of them with the counts. A message that is no list of
    /// events, and an event that is no event, are parked and passed.
    async fn send_transactions(&self, term: &LeaseTerm, done: &[Committed]) -> Result<usize, RelayError> {
        let topic = &self.deps.topics.events;
        let db = &self.deps.db;
        let mut decoded: Vec<(Lsn, Vec<EventRow>)> = Vec::new();
        for (lsn, content) in done.iter().flat_map(|tx| tx.messages.iter()) {
            match serde_json::from_slice::<Vec<EventRow>>(content) {
                Ok(rows) => decoded.push((*lsn, rows)),
                Err(error) => {
                    seckill_shared::parked::park_bad_message(db, topic, lsn.0, content, &error.to_string()).await?
                }
            }
        }
        let mut outgoing: Vec<Outgoing> = Vec::new();
        let mut counts = Counts::new();
        for (lsn, rows) in &decoded {
            for (index, row) in rows.iter().enumerate() {
                *counts.entry((row.activity_id, row.sku_id, row.round, row.kind.clone())).or_insert(0) += 1;
                let source = EventSource::wal(lsn.0, index);
                match Outgoing::new(row, source) {
                    Ok(event) => outgoing.push(event),
                    Err(error) => seckill_shared::parked::park_bad_event(db, topic, source, row, &error).await?,
                }
            }
        }
        delivery::deliver(&self.producer, db, topic, self.delivery_timeout(), &outgoing).await?;
        let last = done.last().expect("a read of transactions has one");
        self.record(term, last.end, Some(last.at), &counts).await?;
        metrics::counter!("seckill_events_relayed_total").increment(outgoing.len() as u64);
        Ok(counts.values().sum::<i64>() as usize)
    }

    /// Records the relay's position (and counts) under `term`.
    async fn record(
        &self,
        term: &LeaseTerm,
        lsn: Lsn,
        at: Option<chrono::DateTime<chrono::Utc>>,
        counts: &Counts,
    ) -> Result<(), RelayError> {
        let mut tx = self.deps.db.begin().await?;
        term.check(&mut tx).await?;
        event_stream::record(&mut tx, lsn, at, counts).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Opens the slot's stream under `term` from the recorded position. A
    /// slot that is gone (dropped, or lost to `max_slot_wal_keep_size`), or
    /// that moved past the recorded position without this relay, is made
    /// anew and the events since the last recorded commit are sent again
    /// from the orders. A stream a former holder left open is ended first
    /// (this turn fails; the next one opens).
    async fn open_stream(&self, term: &LeaseTerm) -> Result<Streaming, RelayError> {
        let db = &self.deps.db;
        let name = event_stream::this_slot(db).await?;
        let position = event_stream::position(db).await?;
        let slot = event_stream::slot(db, &name).await?;
        let mut start = position.lsn;
        let resend_from = match &slot {
            None => Some("gone"),
            Some(slot) if slot.lost => Some("lost: the relay was away longer than max_slot_wal_keep_size"),
            Some(slot) => match (position.lsn, slot.confirmed_flush) {
                (Some(ours), Some(theirs)) if theirs > ours => Some("moved past the relay's position"),
                _ => None,
            },
        };
        if let Some(why) = resend_from {
            tracing::error!(slot = name, why, since = %position.relayed_up_to, "the order events' slot is {why}; sending again every event since the last recorded commit");
            metrics::counter!("seckill_events_slot_remade_total").increment(1);
            let at = match &slot {
                Some(slot) if !slot.lost => slot.confirmed_flush.unwrap_or_default(),
                _ => {
                    event_stream::drop_slot(db, &name).await?;
                    event_stream::create_slot(db, &name).await?
                }
            };
            self.resend_since(term, position.relayed_up_to - RESEND_MARGIN).await?;
            self.record(term, at, None, &Counts::new()).await?;
            start = Some(at);
        } else if let Some(pid) = slot.as_ref().and_then(|slot| slot.active_pid) {
            // This relay holds the lease: the stream is a former holder's.
            sqlx::query!("SELECT pg_terminate_backend($1)", pid).fetch_one(db).await?;
            return Err(RelayError::Stream(format!("slot {name} was streamed by backend {pid}; ended it")));
        }
        let target = Target { url: &self.settings.servers.database.url, slot: &name, start };
        let stream = WalStream::open(target).await.map_err(|error| RelayError::Stream(format!("{error:#}")))?;
        // A term found lost between turns ends the stream at once: the slot
        // must be free for the next holder.
        let (streaming, lost, fence) = (Arc::downgrade(&self.streaming), term.lost(), term.fence());
        let closed = CancellationToken::new();
        let watching = closed.clone();
        tokio::spawn(async move {
            tokio::select! {
                // The term is gone: end its stream.
                _ = lost.cancelled() => {}
                // The stream was closed first (or the relay dropped).
                _ = watching.cancelled() => return,
            }
            let Some(streaming) = streaming.upgrade() else { return };
            let orphan = streaming.lock().await.take_if(|s| s.fence == fence);
            if let Some(orphan) = orphan {
                orphan.stream.close().await;
            }
        });
        Ok(Streaming {
            fence: term.fence(),
            stream,
            recorded: start.unwrap_or_default(),
            quiet_recorded_at: Instant::now(),
            _watcher: closed.drop_guard(),
        })
    }

    /// Ends the slot's stream, if one is open.
    async fn stop_streaming(&self) {
        if let Some(streaming) = self.streaming.lock().await.take() {
            streaming.stream.close().await;
        }
    }

    /// Sends again every event the orders call for since `since` (each
    /// user's in the order they happened; the topic may hold some already:
    /// at least once), then sets the relayed counts of every sale round
    /// they touch to what the orders call for.
    async fn resend_since(&self, term: &LeaseTerm, since: chrono::DateTime<chrono::Utc>) -> Result<(), RelayError> {
        let db = &self.deps.db;
        let mut wanted = expected_events::expected(db, Scope::Since(since)).await?;
        wanted.sort_by_key(|want| (want.event.user_id, want.event.occurred_at));
        let topic = &self.deps.topics.events;
        let mut outgoing = Vec::with_capacity(wanted.len());
        for (index, want) in wanted.iter().enumerate() {
            let source = EventSource::wal(0, index);
            match Outgoing::new(&want.event, source) {
                Ok(event) => outgoing.push(event),
                Err(error) => seckill_shared::parked::park_bad_event(db, topic, source, &want.event, &error).await?,
            }
        }
        delivery::deliver(&self.producer, db, topic, self.delivery_timeout(), &outgoing).await?;
        let mut sales: Vec<(i64, i64)> = wanted.iter().map(|w| (w.event.activity_id, w.event.sku_id)).collect();
        sales.sort_unstable();
        sales.dedup();
        let mut counts = Counts::new();
        for (activity, sku) in sales {
            let Ok(sale) = seckill_shared::domain::SaleKey::from_raw(activity, sku) else { continue };
            for want in expected_events::expected(db, Scope::Sale(sale)).await? {
                let event = want.event;
                *counts.entry((activity, sku, event.round, event.kind)).or_insert(0) += 1;
            }
            for (round, kind, in_outbox) in event_stream::outbox_counts(db, sale).await? {
                *counts.entry((activity, sku, round, kind)).or_insert(0) -= in_outbox;
            }
        }
        let mut tx = db.begin().await?;
        term.check(&mut tx).await?;
        event_stream::replace_counts(&mut tx, &counts).await?;
        tx.commit().await?;
        tracing::warn!(events = outgoing.len(), since = %since, "sent the order events since the last recorded commit again");
        Ok(())
    }
}
