//! The reservation sweeper: settles units whose record never reached the
//! order service (the edge died between deduction and publish, or a publish
//! timed out and never landed).
//!
//! Only one sweeper runs across all compensators: it holds the sweeper lock
//! with a watchdog, and passes the lock's fencing token to every
//! transaction it writes, so a sweeper that lost the lock (paused past its
//! lease) cannot write after its successor.
//!
//! Its fencing tokens outlive Redis: before competing it reads the newest
//! token PostgreSQL recorded and has the lock mint one above it, so a Redis
//! that lost its counter cannot hand out a token PostgreSQL would refuse
//! forever. A holder whose token is refused anyway (a newer holder wrote)
//! gives the lock up at once.
//!
//! A reservation is settled only once the order service has provably seen
//! every record that could belong to it. Each reservation carries its
//! publish deadline — the deduction's time plus the edge's own delivery
//! timeout, both on Redis's clock — after which its record is in the log or
//! never will be. Each sweep notes Redis's time and then the orders topic's
//! high watermarks (a checkpoint); a later sweep that finds the order group
//! committed past that checkpoint knows every record appended before it was
//! processed (and would have cleared its reservation). So reservations
//! whose deadline (plus a grace margin) passed before the checkpoint, still
//! reserved, never had a record: they are settled FAILED (`PUBLISH_LOST`).
//! One clock decides, whatever the services' clocks say, and the deadline
//! is the edge's, whatever the compensator's own Kafka settings are.
//! While the order service lags (PostgreSQL down, service stopped) the
//! checkpoint is not passed and nothing is swept, so a slow pipeline never
//! fails orders that are merely waiting; under steady load checkpoints keep
//! being passed, so the sweeper works during a sale, not only after it.

use crate::settle::{self, SettleError};
use crate::Settings;
use rdkafka::consumer::BaseConsumer;
use seckill_shared::domain::{FailReason, OrderRecord, UserId};
use seckill_shared::fate::Followed;
use seckill_shared::fence::{Fence, FencedLock};
use seckill_shared::host::Connections;
use seckill_shared::kafka;
use seckill_shared::leader::{self, Turn};
use seckill_shared::lock::{LockClient, LockGuard};
use seckill_shared::shutdown::Background;
use seckill_shared::stock::SweepMark;
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
    /// The last checkpoint (time in ms, the orders topic's high watermarks),
    /// waiting for the order group to commit past it.
    checkpoint: tokio::sync::Mutex<Option<(i64, BTreeMap<i32, i64>)>>,
}

/// What one sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepReport {
    /// Reservations settled as FAILED (`PUBLISH_LOST`).
    pub failed: usize,
    /// Reservations whose order turned out CREATED.
    pub created: usize,
}

impl Sweeper {
    /// A sweeper over the compensator's connections; its lock's watchdog
    /// runs on `background`.
    pub fn new(settings: Arc<Settings>, deps: Connections, background: Background) -> Self {
        let locks = LockClient::new(deps.stock.connection(), background);
        let lease = Duration::from_millis(settings.sweeper.lock_lease_ms);
        let seat = FencedLock::new(locks, deps.db.clone(), deps.stock.keys().sweeper_lock(), lease);
        Self { settings, deps, seat, checkpoint: Default::default() }
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
            failed: report.failed as u64,
            created: report.created as u64,
            holder: term.holder().to_owned(),
        };
        if let Err(error) = self.deps.stock.record_sweep(&mark).await {
            tracing::debug!(%error, "sweep not recorded");
        }
    }

    /// One sweep over every sale, writing under `fence`.
    pub async fn sweep_once(&self, fence: Fence<'_>) -> anyhow::Result<SweepReport> {
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
        let mut report = SweepReport::default();
        for sale in self.deps.stock.sales().await? {
            let stale = self.deps.stock.stale_reservations(sale, cutoff, self.settings.sweeper.batch as isize).await?;
            for order_id in stale {
                let Some(state) = self.deps.stock.order_state(&order_id).await? else {
                    // No status to tell the buyer: nothing Redis can restore.
                    self.deps.stock.unreserve(std::slice::from_ref(&order_id)).await?;
                    continue;
                };
                let user = UserId::new(state.user_id)?;
                // A reservation is of the sale's current round (a warm-up
                // clears them): the record names no round.
                let record = OrderRecord::new(order_id.clone(), sale, user, state.accepted_at);
                // Decided under the fence: a stale sweeper's transaction
                // rolls back before it writes.
                // The request never reached the pipeline's records: no trace.
                match settle::settle(&self.deps, &record, FailReason::PublishLost, Some(fence), Default::default())
                    .await?
                {
                    Followed::Created => report.created += 1,
                    Followed::Failed(_) => report.failed += 1,
                }
            }
        }
        metrics::counter!("seckill_sweeper_settled_total").increment(report.failed as u64);
        Ok(report)
    }
}
