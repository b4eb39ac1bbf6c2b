//! The outbox relay: publishes the `order_events` rows (written by trigger in
//! the same transaction as each change of an order's status) to
//! `seckill.order-events`, in the order of the transactions that wrote
//! them, and moves its cursor past them (`order_events_relayed`; why a
//! cursor and not a mark per row: migration `…04_outbox_relay_cursor.sql`).
//!
//! One relay runs at a time across the order services: it holds a
//! PostgreSQL advisory lock on a connection of its own, and runs its
//! queries on that connection, so a relay that lost its database lost its
//! lock too. A turn takes the rows after the cursor that no running
//! transaction can still precede, sends them with the idempotent producer,
//! waits for every delivery, and only then moves the cursor: a relay killed
//! in between sends them again, with the same `eventId` (consumers drop the
//! second). PostgreSQL down delays events; Kafka down
//! lets the outbox grow, and it drains when Kafka returns. Relayed rows are
//! pruned after `retention_ms`, their counts kept per sale round for the
//! reconciliation.

use crate::Settings;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use seckill_shared::host::{retry_until, Connections};
use seckill_shared::outbox::{self, NotAnEvent, OutboxRow};
use serde::{Deserialize, Serialize};
use sqlx::pool::PoolConnection;
use sqlx::Postgres;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The relay's settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventSettings {
    /// Relay events from this order service (one relays at a time).
    pub enabled: bool,
    /// Most events sent in one turn.
    pub batch: i64,
    /// How long the relay waits when the outbox is empty.
    pub poll_ms: u64,
    /// How long events stay in the outbox once they happened (and were
    /// relayed) before they are pruned.
    pub retention_ms: u64,
    /// How often pruning runs.
    pub prune_every_ms: u64,
}

impl Default for EventSettings {
    fn default() -> Self {
        Self { enabled: true, batch: 1_000, poll_ms: 100, retention_ms: 24 * 3_600_000, prune_every_ms: 60_000 }
    }
}

/// Why a turn failed (nothing was marked; the turn is done again).
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("publishing events: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
}

/// The relay of one order service.
pub struct Relay {
    settings: Arc<Settings>,
    deps: Connections,
    producer: FutureProducer,
}

/// The session-level advisory lock that makes one relay at a time, held
/// with the connection it was taken on.
pub struct Leadership {
    conn: PoolConnection<Postgres>,
}

impl Relay {
    /// A relay over the service's connections.
    pub fn new(settings: Arc<Settings>, deps: Connections) -> anyhow::Result<Self> {
        let producer = seckill_shared::kafka::producer(&settings.servers.kafka)?;
        Ok(Self { settings, deps, producer })
    }

    /// Competes for the relay's lock; while holding it, relays and prunes.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let retry = self.settings.service.retry;
        loop {
            let Some(leadership) = retry_until(retry, "competing to relay events", &shutdown, || self.lead()).await else {
                return Ok(());
            };
            match leadership {
                Some(mut leadership) => {
                    tracing::info!("this instance relays order events");
                    if self.relay_while_leading(&mut leadership, &shutdown).await {
                        return Ok(());
                    }
                }
                None => {
                    tokio::select! {
                        // Stop with the service.
                        _ = shutdown.cancelled() => return Ok(()),
                        // Another instance relays; try again later.
                        _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                    }
                }
            }
        }
    }

    /// Takes the relay's lock when it is free.
    pub async fn lead(&self) -> Result<Option<Leadership>, sqlx::Error> {
        let mut conn = self.deps.db.acquire().await?;
        // One cursor per database, so one relay per database whatever the
        // topic prefix: the outbox is the database's.
        let key = "seckill order_events relay";
        let locked: bool =
            sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext($1))").bind(key).fetch_one(&mut *conn).await?;
        Ok(locked.then_some(Leadership { conn }))
    }

    /// Relays until shutdown (`true`) or until the lock's connection fails
    /// (`false`: compete again).
    async fn relay_while_leading(&self, leadership: &mut Leadership, shutdown: &CancellationToken) -> bool {
        let poll = Duration::from_millis(self.settings.events.poll_ms);
        let mut last_prune = Instant::now();
        let mut failures = 0u32;
        loop {
            let wait = match self.relay_once(leadership).await {
                Ok(sent) => {
                    failures = 0;
                    if sent > 0 { Duration::ZERO } else { poll }
                }
                Err(RelayError::Db(error)) => {
                    // The lock lives on this connection: assume it is gone.
                    tracing::warn!(%error, "relay lost its database connection; competing again");
                    return false;
                }
                Err(error) => {
                    failures += 1;
                    tracing::warn!(%error, "relaying events failed; retrying");
                    let retry = self.settings.service.retry.delays().nth(failures.min(10) as usize);
                    retry.unwrap_or(poll)
                }
            };
            if last_prune.elapsed() >= Duration::from_millis(self.settings.events.prune_every_ms) {
                last_prune = Instant::now();
                match self.prune(leadership).await {
                    Ok(0) => {}
                    Ok(pruned) => tracing::info!(pruned, "pruned relayed order events"),
                    Err(error) => tracing::warn!(%error, "pruning relayed events failed"),
                }
            }
            tokio::select! {
                // Between turns only: a turn's events are passed or not at all.
                _ = shutdown.cancelled() => return true,
                // Next turn.
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One turn: sends the next events after the cursor, waits for every
    /// delivery, moves the cursor past them (a row that is no event is
    /// parked and passed with them). Returns how many rows it dealt with.
    pub async fn relay_once(&self, leadership: &mut Leadership) -> Result<usize, RelayError> {
        let rows: Vec<OutboxRow> = sqlx::query_as(outbox::NEXT_AFTER_CURSOR)
            .bind(self.settings.events.batch)
            .fetch_all(&mut *leadership.conn)
            .await?;
        let Some(last) = rows.last() else { return Ok(0) };
        let mut outgoing = Vec::with_capacity(rows.len());
        for row in &rows {
            match row.event.event() {
                Ok(event) => outgoing.push((outbox::keyed(&event), &row.event)),
                // One bad row must not stop every event behind it: it is
                // parked for an operator and passed with the rest.
                Err(error) => self.park(leadership, row, &error).await?,
            }
        }
        let topic = &self.deps.topics.events;
        let queue_timeout = Timeout::After(Duration::from_millis(self.settings.servers.kafka.message_timeout_ms));
        let sends = outgoing.iter().map(|((key, payload), event)| {
            let headers = event.trace().headers();
            self.producer.send(FutureRecord::to(topic).key(key).payload(payload).headers(headers), queue_timeout)
        });
        for delivery in futures::future::join_all(sends).await {
            delivery.map_err(|(error, _)| error)?;
        }
        // Only now: a relay killed before this line sends them again.
        // The position itself, not a lookup of the last row: that row may be
        // gone by now (deleted by hand), and the cursor must move anyway.
        sqlx::query(outbox::MOVE_CURSOR).bind(last.xid).bind(last.id).execute(&mut *leadership.conn).await?;
        metrics::counter!("seckill_events_relayed_total").increment(outgoing.len() as u64);
        Ok(rows.len())
    }

    /// Parks an outbox row that cannot be an event (`BAD_OUTBOX_ROW`; its
    /// outbox id as the offset, partition -1).
    async fn park(&self, leadership: &mut Leadership, row: &OutboxRow, error: &NotAnEvent) -> Result<(), sqlx::Error> {
        let event = &row.event;
        let payload = serde_json::json!({
            "eventId": &event.event_id,
            "type": &event.kind,
            "orderId": &event.order_id,
            "userId": event.user_id,
        });
        sqlx::query(
            r#"INSERT INTO parked_records
                 (topic, partition, "offset", payload, order_id, activity_id, sku_id, reason, error, attempts, parked_by)
               VALUES ($1, -1, $2, $3, $4, $5, $6, 'BAD_OUTBOX_ROW', $7, 1, 'order-relay')
               ON CONFLICT (topic, partition, "offset") DO NOTHING"#,
        )
        .bind(&self.deps.topics.events)
        .bind(row.id)
        .bind(payload.to_string().into_bytes())
        .bind(&event.order_id)
        .bind(event.activity_id)
        .bind(event.sku_id)
        .bind(error.to_string())
        .execute(&mut *leadership.conn)
        .await?;
        metrics::counter!("seckill_parked_records_total", "by" => "order-relay").increment(1);
        tracing::error!(outbox_id = row.id, order_id = %event.order_id, %error, "outbox row parked: it is not an event");
        Ok(())
    }

    /// Deletes relayed events that happened more than the retention ago,
    /// keeping their counts per sale round and type.
    pub async fn prune(&self, leadership: &mut Leadership) -> Result<u64, sqlx::Error> {
        let retention_secs = self.settings.events.retention_ms as f64 / 1000.0;
        let pruned: Option<i64> = sqlx::query_scalar(
            "WITH gone AS (
                DELETE FROM order_events
                 WHERE occurred_at < now() - make_interval(secs => $1)
                   AND (xid, id) <= (SELECT xid, id FROM order_events_relayed)
             RETURNING activity_id, sku_id, round, type
             ), counted AS (
                INSERT INTO order_events_pruned (activity_id, sku_id, round, type, count)
                SELECT activity_id, sku_id, round, type, count(*) FROM gone GROUP BY 1, 2, 3, 4
                ON CONFLICT (activity_id, sku_id, round, type)
                  DO UPDATE SET count = order_events_pruned.count + EXCLUDED.count
                RETURNING count
             )
             SELECT count(*) FROM gone",
        )
        .bind(retention_secs)
        .fetch_one(&mut *leadership.conn)
        .await?;
        Ok(pruned.unwrap_or(0) as u64)
    }
}
