//! Draws, made and told. One edge at a time (the PostgreSQL lease `draws`,
//! through the singleton loop; another takes over when it stops renewing)
//! looks every `admission.tick_ms` at every sale's draw: it makes the ones
//! whose `drawAt` has passed ([`make`]), and publishes every outcome the
//! room recorded — won, waitlisted, and the promotions, expiries and
//! losses the admission passes of every edge record — to
//! `seckill.draw-events` ([`event`]), moving its cursor only once Kafka
//! acknowledged them: an outcome is published at least once, under the
//! same `eventId` each time. The cursor carries the lease's fence: a holder
//! frozen past its term cannot move it back once a later one moved it.

pub mod answers;
pub mod event;
pub mod make;

use crate::settings::Settings;
use event::DrawEvent;
use make::LaterTerm;
use rdkafka::producer::{FutureProducer, FutureRecord};
use seckill_shared::domain::SaleKey;
use seckill_shared::draw::DrawState;
use seckill_shared::kafka::renewing::Renewing;
use seckill_shared::ops::leader::{self, Term, Turn};
use seckill_shared::ops::lease::{Lease, LeaseTerm};
use seckill_shared::ops::shutdown::Background;
use seckill_shared::stock::Stock;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The lease one draw maker across the edges holds.
pub const LEASE: &str = "draws";
/// How long after the maker stopped renewing another edge takes over.
const LEASE_LENGTH: Duration = Duration::from_secs(5);
/// Outcomes published in one batch.
const BATCH: usize = 500;

/// The draws' maker and publisher of one edge: what it reads and its
/// producer, made at the first outcome to publish (an edge that never
/// leads, or leads with no draw, holds none) and made anew after a fatal
/// error, as every producer of the project is.
pub struct Draws {
    settings: Arc<Settings>,
    stock: Stock,
    /// Where the draws' seeds are kept until the draw.
    db: sqlx::PgPool,
    topic: String,
    producer: OnceLock<Renewing<FutureProducer>>,
}

impl Draws {
    /// The draws of the sales in `stock`, their seeds kept in `db`.
    pub fn new(settings: Arc<Settings>, stock: Stock, db: sqlx::PgPool) -> Self {
        let topic = seckill_shared::kafka::Topics::new(&settings.servers.kafka).draw_events;
        Self { settings, stock, db, topic, producer: OnceLock::new() }
    }

    /// Competes for the lease; while holding it, makes the draws that are
    /// due and publishes their outcomes.
    pub async fn run(
        self: Arc<Self>,
        db: sqlx::PgPool,
        background: Background,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let lease = Lease::new(db, LEASE, LEASE_LENGTH, background);
        let every = Duration::from_millis(self.settings.admission.tick_ms);
        // The others ask for the seat once a second, not every tick.
        let retry = every.max(Duration::from_secs(1));
        leader::lead("draws", &lease, retry, &shutdown, |term: Arc<LeaseTerm>| {
            let draws = self.clone();
            async move {
                match draws.turn(term.fence()).await {
                    Ok(()) => Turn::Again(every),
                    Err(LaterTerm) => Turn::StepDown,
                }
            }
        })
        .await
    }

    /// One look at every draw, as the holder of the term `fence`.
    async fn turn(&self, fence: i64) -> Result<(), LaterTerm> {
        let sales = match self.stock.waiting_room().rooms().await {
            Ok(sales) => sales,
            Err(error) => {
                tracing::warn!(%error, "the draws not read; looking again later");
                return Ok(());
            }
        };
        for sale in sales {
            // One draw that fails stops no other.
            if let Err(error) = self.look(sale, fence).await {
                if error.is::<LaterTerm>() {
                    tracing::warn!(%sale, "another edge publishes the draws now: stepping down");
                    return Err(LaterTerm);
                }
                tracing::warn!(%sale, error = format!("{error:#}"), "a draw's turn failed; trying again");
            }
        }
        Ok(())
    }

    /// One look at `sale`'s draw, as the holder of the term `fence`: made
    /// if it is due, its outcomes not yet on the topic published. A
    /// [`LaterTerm`] error: another edge publishes now.
    pub async fn look(&self, sale: SaleKey, fence: i64) -> anyhow::Result<()> {
        let Some(draw) = self.stock.draws().draw_state(sale).await? else {
            return Ok(());
        };
        if !draw.drawn && !draw.closed && seckill_shared::now_ms() >= draw.draw_ms {
            let seeds = (&self.db, self.settings.servers.database.call_deadline());
            if let Some(made) = make::make(&self.stock, seeds, sale, fence).await? {
                metrics::counter!("seckill_draws_made_total").increment(1);
                tracing::info!(%sale, entries = made.entries, winners = made.winners, digest = %made.digest, "draw made");
            }
        }
        // A draw applied in part (its slices) is told once whole; the losses
        // of a sale closed before its draw, at once.
        if draw.events_unpublished > 0 && (draw.drawn || draw.closed) {
            // Nobody is told of a draw a failover could still undo.
            if !self.stock.draws().draw_confirmed(sale).await? {
                anyhow::bail!("the draw is not on the replicas yet: its outcomes wait");
            }
            let producer = self.producer()?.get();
            self.publish(&producer, sale, &draw, fence).await?;
        }
        Ok(())
    }

    /// The producer, made now if it was not yet.
    pub fn producer(&self) -> anyhow::Result<&Renewing<FutureProducer>> {
        if let Some(producer) = self.producer.get() {
            return Ok(producer);
        }
        let kafka = self.settings.servers.kafka.clone();
        let made = Renewing::new("draws", move || seckill_shared::kafka::producer(&kafka))?;
        Ok(self.producer.get_or_init(|| made))
    }

    /// Publishes `sale`'s outcomes not yet on the topic, a batch at a time,
    /// moving the cursor as the holder of the term `fence`.
    async fn publish(
        &self,
        producer: &FutureProducer,
        sale: SaleKey,
        draw: &DrawState,
        fence: i64,
    ) -> anyhow::Result<()> {
        let source = &self.settings.servers.kafka.cloudevents_source;
        let deadline = Duration::from_millis(self.settings.servers.kafka.message_timeout_ms);
        let mut cursor = draw.published_through.clone();
        loop {
            let rows = self.stock.draws().draw_outcomes(sale, &cursor, BATCH).await?;
            let Some(last) = rows.last() else {
                return Ok(());
            };
            let events: Vec<DrawEvent> = rows.iter().map(|row| DrawEvent::of(sale, draw.round, row)).collect();
            let mut waits = Vec::with_capacity(events.len());
            for event in &events {
                let payload = serde_json::to_vec(event)?;
                let key = event.user_id.to_string();
                let record = FutureRecord::to(&self.topic).key(&key).payload(&payload).headers(event.headers(source));
                match producer.send_result(record) {
                    Ok(wait) => waits.push(wait),
                    Err((error, _)) => anyhow::bail!("an outcome not sent: {error}"),
                }
            }
            let delivered = tokio::time::timeout(deadline * 2, futures::future::join_all(waits))
                .await
                .map_err(|_| anyhow::anyhow!("outcomes not acknowledged within {:?}", deadline * 2))?;
            for result in delivered {
                match result {
                    Ok(Ok(_)) => {}
                    Ok(Err((error, _))) => anyhow::bail!("an outcome not delivered: {error}"),
                    Err(_) => anyhow::bail!("an outcome's delivery was cancelled"),
                }
            }
            if !self.stock.draws().outcomes_published(sale, &last.id, rows.len(), fence).await? {
                return Err(LaterTerm.into());
            }
            for event in &events {
                metrics::counter!("seckill_draw_events_published_total", "type" => event.kind.clone()).increment(1);
            }
            cursor = last.id.clone();
        }
    }
}
