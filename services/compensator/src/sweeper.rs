//! The reservation sweeper: honours orders whose record never reached the
//! order service (the edge died between deduction and publish, a publish
//! timed out and never landed, a rollback Redis did not take). A buyer told
//! 202 gets the order: its record is published again — same order id,
//! round, acceptance time, request id and trace — and the order service
//! writes it like any other. PostgreSQL's first-row-wins keeps a late
//! original harmless.
//!
//! Only one sweeper runs across all compensators: it holds the sweeper lock
//! with a watchdog, and checks the lock's fencing token in PostgreSQL every
//! sweep, so a sweeper that lost the lock (paused past its lease) stops at
//! once; a republish by such a sweeper would only be a duplicate anyway.
//!
//! Its fencing tokens outlive Redis: before competing it reads the newest
//! token PostgreSQL recorded and has the lock mint one above it, so a Redis
//! that lost its counter cannot hand out a token PostgreSQL would refuse
//! forever. A holder whose token is refused anyway (a newer holder wrote)
//! gives the lock up at once.
//!
//! A reservation is dealt with only once the order service has provably
//! seen every record that could belong to it. Each reservation carries its
//! publish deadline — the deduction's time plus the edge's own delivery
//! timeout, both on Redis's clock — after which its record is in the log or
//! never will be. Each sweep notes Redis's time and then the orders topic's
//! high watermarks (a checkpoint); a later sweep that finds the order group
//! committed past that checkpoint knows every record appended before it was
//! processed (and would have cleared its reservation). So reservations
//! whose deadline (plus a grace margin) passed before the checkpoint, still
//! reserved, never had a record written: PostgreSQL's row decides when it
//! has one, and otherwise the record is published again and its deadline
//! moved past that publish. One clock decides, whatever the services'
//! clocks say. While the order service lags (PostgreSQL down, service
//! stopped) the checkpoint is not passed and nothing is swept; while Kafka
//! takes nothing, a republish fails and is tried at the next sweep.

use crate::settle::SettleError;
use crate::Settings;
use rdkafka::consumer::BaseConsumer;
use rdkafka::producer::{FutureProducer, FutureRecord};
use seckill_shared::db::within;
use seckill_shared::domain::{FailReason, Fate, Holding, OrderId, OrderRecord, OrderStatus, SaleKey, UserId};
use seckill_shared::kafka;
use seckill_shared::kafka::renewing::Renewing;
use seckill_shared::ops::fence::{self, Fence, FencedLock};
use seckill_shared::ops::host::Connections;
use seckill_shared::ops::leader::{self, Turn};
use seckill_shared::ops::lock::{LockClient, LockGuard};
use seckill_shared::ops::shutdown::Background;
use seckill_shared::orders::fate::{self, Followed};
use seckill_shared::stock::{SweepMark, TakeId};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The singleton sweeper.
pub struct Sweeper {
    settings: Arc<Settings>,
    deps: Connections,
    /// Its seat: the sweeper lock, fenced in PostgreSQL.
    seat: FencedLock,
    /// Publishes lost records again.
    /// Made anew after a fatal error.
    producer: Renewing<FutureProducer>,
    /// The last checkpoint (time in ms, the orders topic's high watermarks),
    /// waiting for the order group to commit past it.
    checkpoint: tokio::sync::Mutex<Option<(i64, BTreeMap<i32, i64>)>>,
    /// Where each release's pages of kept takes stopped.
    release_cursors: crate::release_sweep::Cursors,
}

/// What one sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepReport {
    /// Orders whose record never landed, published again (honoured).
    pub republished: usize,
    /// Reservations whose order PostgreSQL had written CREATED.
    pub created: usize,
    /// Reservations whose order PostgreSQL had failed (Redis followed).
    pub failed: usize,
    /// Reservations whose order Redis no longer knows (it lost data).
    pub unknown: usize,
    /// Sales whose sweep failed (tried again next sweep).
    pub failed_sales: usize,
}

impl Sweeper {
    /// A sweeper over the compensator's connections; its lock's watchdog
    /// runs on `background`.
    pub fn new(settings: Arc<Settings>, deps: Connections, background: Background) -> anyhow::Result<Self> {
        let locks = LockClient::new(deps.stock.connection(), background);
        let lease = Duration::from_millis(settings.sweeper.lock_lease_ms);
        let seat = FencedLock::new(locks, deps.db.clone(), deps.stock.keys().sweeper_lock(), lease);
        let kafka = settings.servers.kafka.clone();
        let producer = Renewing::new("reservation sweeper", move || kafka::producer(&kafka))?;
        Ok(Self { settings, deps, seat, producer, checkpoint: Default::default(), release_cursors: Default::default() })
    }

    /// Its producer, for tests that make it fail.
    pub fn producer(&self) -> &Renewing<FutureProducer> {
        &self.producer
    }

    /// Competes for the lock; while holding it, sweeps every interval.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let interval = Duration::from_millis(self.settings.sweeper.interval_ms);
        leader::lead("reservation sweeper", &self.seat, interval, &shutdown, |term| self.turn(term, interval)).await
    }

    /// One sweep under `term`, recorded for the dashboard.
    async fn turn(&self, term: Arc<LockGuard>, interval: Duration) -> Turn {
        let fence = Fence { lock: self.seat.key(), token: term.fence(), holder: term.holder() };
        match self.sweep_once(fence).await {
            Ok(report) => {
                if report != SweepReport::default() {
                    tracing::info!(?report, "sweep settled reservations");
                }
                self.mark(&term, &report).await;
            }
            // A newer holder wrote: this one must not lead. Giving the lock
            // up lets whoever competes next (this instance too) take it with
            // a token above the newer one.
            Err(error) if matches!(error.downcast_ref(), Some(SettleError::StaleFence { .. })) => {
                return Turn::StepDown
            }
            Err(error) => tracing::warn!(error = %format!("{error:#}"), "sweep failed"),
        }
        Turn::Again(interval)
    }

    /// Records the sweep for the dashboard (best effort).
    async fn mark(&self, term: &LockGuard, report: &SweepReport) {
        let mark = SweepMark {
            at_ms: chrono::Utc::now().timestamp_millis(),
            republished: report.republished as u64,
            failed: report.failed as u64,
            created: report.created as u64,
            holder: term.holder().to_owned(),
        };
        if let Err(error) = self.deps.stock.books().record_sweep(&mark).await {
            tracing::debug!(%error, "sweep not recorded");
        }
    }

    /// One sweep over every sale, writing under `fence`.
    pub async fn sweep_once(&self, fence: Fence<'_>) -> anyhow::Result<SweepReport> {
        // The releases' pending takes depend on no checkpoint: each is
        // decided in its release's slot against the keep it races.
        let batch = self.settings.sweeper.batch;
        let releases = crate::release_sweep::sweep_releases(&self.deps.stock, batch, &self.release_cursors).await;
        if let Err(error) = releases {
            tracing::warn!(error = %format!("{error:#}"), "sweeping the releases failed; the next sweep tries again");
        }
        let mut checkpoint = self.checkpoint.lock().await;
        // Redis's time, read before the watermarks: every record of an order
        // whose deadline passed before it is below them, or never lands.
        let now = self.deps.stock.now_ms().await?;
        let kafka_settings = self.settings.servers.kafka.clone();
        let topic = self.deps.topics.orders.clone();
        let previous = checkpoint.clone();
        // Is the order group past the last checkpoint? Then take a new one.
        let (passed, fresh) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let timeout = kafka_settings.admin_timeout();
            let consumer: BaseConsumer =
                kafka::consumer_config(&kafka_settings, &kafka::order_group(&kafka_settings)).create()?;
            let passed = match &previous {
                Some((_, marks)) => {
                    let positions = kafka::committed_positions(&consumer, &topic, marks.keys(), timeout)?;
                    marks.iter().all(|(p, mark)| positions.get(p).is_some_and(|position| position >= mark))
                }
                None => false,
            };
            let fresh = if passed || previous.is_none() {
                Some((now, kafka::high_watermarks(&consumer, &topic, timeout)?))
            } else {
                None
            };
            Ok((passed.then_some(previous).flatten(), fresh))
        })
        .await??;
        if let Some(fresh) = fresh {
            *checkpoint = Some(fresh);
        }
        let Some((checkpoint_at, _)) = passed else {
            tracing::debug!("order service not yet past the last checkpoint; not sweeping");
            return Ok(SweepReport::default());
        };
        drop(checkpoint);
        let cutoff = checkpoint_at - self.settings.sweeper.grace_ms as i64;
        // Under the fence: a sweeper that lost its lock stops here.
        within(self.settings.servers.database.call_deadline(), async {
            let mut tx = self.deps.db.begin().await?;
            fence::check(&mut tx, fence).await.map_err(SettleError::from)?;
            tx.commit().await?;
            Ok::<_, anyhow::Error>(())
        })
        .await?;
        let mut report = SweepReport::default();
        for sale in self.deps.stock.books().sales().await? {
            // Each sale on its own: one whose Redis (or record) fails is
            // logged, counted and tried again next sweep; the others go on.
            if let Err(error) = self.sweep_sale(sale, cutoff, &mut report).await {
                tracing::warn!(%sale, error = %format!("{error:#}"), "sweeping a sale failed; the next sweep tries again");
                metrics::counter!("seckill_sweeper_sale_failures_total").increment(1);
                report.failed_sales += 1;
            }
        }
        metrics::counter!("seckill_sweeper_republished_total").increment(report.republished as u64);
        Ok(report)
    }

    /// One sale's part of a sweep: transfers left half done, then the
    /// reservations whose record provably never reached the order service.
    async fn sweep_sale(&self, sale: SaleKey, cutoff: i64, report: &mut SweepReport) -> anyhow::Result<()> {
        // Units a borrower left between two buckets (it died between
        // lending and receiving, or found a step not yet on the replicas)
        // arrive.
        let arrived = self.deps.stock.bucket_moves().complete_transfers(sale, cutoff).await?;
        if arrived > 0 {
            tracing::warn!(sale = %sale, arrived, "units left on their way between buckets arrived");
            metrics::counter!("seckill_sweeper_transfers_completed_total").increment(arrived as u64);
        }
        let stale =
            self.deps.stock.orders().stale_reservations(sale, cutoff, self.settings.sweeper.batch as isize).await?;
        for order_id in stale {
            self.settle_reservation(sale, &order_id, report).await?;
        }
        Ok(())
    }

    /// One reservation whose record provably never reached the order
    /// service: PostgreSQL's row decides if it has one (Redis follows);
    /// else the order is honoured — its record published again as the
    /// edge would have, and its reservation kept until it is written.
    async fn settle_reservation(
        &self,
        sale: SaleKey,
        order_id: &OrderId,
        report: &mut SweepReport,
    ) -> anyhow::Result<()> {
        let stock = &self.deps.stock;
        let orders = stock.orders();
        let Some(state) = orders.order_state(order_id).await? else {
            // Redis lost the order itself: nobody can say whose it was.
            tracing::error!(order_id = %order_id, "a reservation without its order: nothing to publish");
            report.unknown += 1;
            return Ok(orders.unreserve(std::slice::from_ref(order_id)).await?);
        };
        if state.status != OrderStatus::Queued {
            // Settled meanwhile (written, rolled back, voided).
            return Ok(orders.unreserve(std::slice::from_ref(order_id)).await?);
        }
        let user = UserId::new(state.user_id)?;
        let trace = orders.reservation_trace(order_id).await?;
        let (round, held) = match &trace {
            Some(trace) => (trace.round, trace.held),
            // Reserved without its trace (the lock deduction: one unit): the
            // sale's round, which a warm-up replacing it would have cleared.
            None => (stock.books().snapshot(sale).await?.round, Holding::ONE),
        };
        let record = OrderRecord::new(order_id.clone(), sale, user, state.accepted_at)
            .in_round(round)
            .holding(held.quantity, held.slot);
        let deadline = self.settings.servers.database.call_deadline();
        let row =
            sqlx::query!("SELECT status, reason, quantity, slot FROM orders WHERE order_id = $1", order_id.as_str())
                .fetch_optional(&self.deps.db);
        if let Some(row) = within(deadline, row).await? {
            let fate = Fate::from_row(&row.status, row.reason.as_deref());
            // The row says what the order holds, trace or not (in range:
            // the table's checks).
            let record = record.holding(row.quantity as u32, row.slot as u32);
            match within(deadline, fate::follow(stock, &self.deps.db, &record, fate)).await? {
                Followed::Created => report.created += 1,
                Followed::Failed(_) => report.failed += 1,
            }
            return Ok(orders.unreserve(std::slice::from_ref(order_id)).await?);
        }
        // An order of a release is published only with its take kept; a
        // take the releases' sweep gave back (no order was found made with
        // it then) leaves the order to fail: its buyer was told no 202.
        let take = TakeId::of_order(order_id);
        let releases = stock.releases();
        if releases.release_limit(sale.activity).await?.is_some() && !releases.release_keep(&take, order_id).await? {
            crate::settle::settle(&self.deps, &record, FailReason::PublishLost, Default::default()).await?;
            report.failed += 1;
            return Ok(orders.unreserve(std::slice::from_ref(order_id)).await?);
        }
        // A redriven order's record names the order it replaces; Redis
        // does not keep that, the redrive's link does (written before its
        // publish): the order's events read it from the record.
        let link = sqlx::query_scalar!(
            "SELECT original_order_id FROM dlq_redrives WHERE new_order_id = $1",
            order_id.as_str()
        )
        .fetch_optional(&self.deps.db);
        let redrive_of = within(deadline, link).await?.map(|original| OrderId::parse(&original)).transpose()?;
        let record = OrderRecord { redrive_of, ..record };
        let headers = trace.as_ref().map(|t| t.trace()).unwrap_or_default().headers();
        let payload = serde_json::to_vec(&record)?;
        let key = user.to_string();
        let timeout = Duration::from_millis(self.settings.servers.kafka.message_timeout_ms);
        let record = || FutureRecord::to(&self.deps.topics.orders).key(&key).payload(&payload).headers(headers.clone());
        self.producer
            .send(record, timeout.into())
            .await
            .map_err(|error| anyhow::anyhow!("publishing order {order_id} again: {error}"))?;
        // Not swept again before this record's own deadline has passed.
        orders.reserve_until(order_id, stock.now_ms().await? + timeout.as_millis() as i64 + 2_000).await?;
        tracing::info!(order_id = %order_id, "a lost publish is published again");
        report.republished += 1;
        Ok(())
    }
}
